"""Where a witness keeps its cosigned checkpoints, for the witness that writes them and the
verifiers that read them.

A witness's store is its own, never the topic or the archive, but its layout is a format with
two readers: the witness service (``tracevault.witness``) decides against what it cosigned
before, and ``replay verify --witness-store`` counts its cosignatures. So the layout lives
here, beneath both (docs/design.md, "Layout"), and a verifier imports no service::

    witness/<quoted origin>/checkpoint/<size, 20 digits>   the cosigned checkpoint note

Every object is immutable, written once (docs/log.md, "Witness").
"""

from __future__ import annotations

from urllib.parse import quote

from tracevault.archive._store import ObjectStore

__all__ = ["checkpoint_key", "cosigned_checkpoint", "cosigned_sizes", "origin_prefix"]

_SIZE_DIGITS = 20


def origin_prefix(origin: str) -> str:
    """The store prefix of one origin (an origin holds '/', a key segment may not)."""
    return f"witness/{quote(origin, safe='')}/"


def checkpoint_key(origin: str, size: int) -> str:
    return f"{origin_prefix(origin)}checkpoint/{size:0{_SIZE_DIGITS}d}"


def cosigned_sizes(store: ObjectStore, origin: str) -> list[int]:
    """Every size the witness cosigned for ``origin``, ascending (one listing)."""
    objs = store.list(f"{origin_prefix(origin)}checkpoint/")
    return [int(o.key.rsplit("/", 1)[1]) for o in objs]


def cosigned_checkpoint(store: ObjectStore, origin: str, min_size: int) -> str | None:
    """The smallest cosigned checkpoint note of ``origin`` covering ``min_size`` leaves.

    For a verifier that needs a witnessed checkpoint over a run whose last leaf is
    ``min_size - 1``: it proves the run's leaves against this size. None if the witness has
    cosigned nothing that large yet. The note is returned as stored; trust comes from
    checking it with the log's and the witness's vkeys, never from the store.
    """
    for size in cosigned_sizes(store, origin):
        if size >= min_size:
            return store.get(checkpoint_key(origin, size)).decode()
    return None
