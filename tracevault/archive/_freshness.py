"""Freshness: is the archive as large as every signed size anyone has seen of its logs?

A storage admin can roll a partition's log back consistently (delete the newer checkpoints,
tiles, bundles and run indexes): what is left verifies. What it cannot delete is what others
keep: a witness's cosigned checkpoints (in the witness's own store) and the sealed topic's
checkpoint records the archiver committed past (``tracevault.kafka.archived_tails``). An
archived log smaller than a size either proves is a rollback (docs/log.md, "Freshness").

Nothing read here is trusted: a size counts only from a note the trusted log key signed
(and, when witness keys are given, that one of them cosigned). A witness may be ahead of the
archive legitimately (it follows the topic; the archiver flushes later): when the topic shows
the archiver has not committed that far yet, the difference is reported as lag, not rollback.
This module reads stores only; the caller brings the topic's facts, so verifying an archive
imports no Kafka client.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol
from urllib.parse import unquote

from tracevault.archive._open import open_store
from tracevault.archive._store import ObjectStore
from tracevault.archive.tlog import checkpoint_prefix, log_prefix, parse_checkpoint_key
from tracevault.archive.witness_layout import checkpoint_key as witness_checkpoint_key
from tracevault.archive.witness_layout import cosigned_sizes
from tracevault.config import Settings
from tracevault.errors import LogError, NotFoundError
from tracevault.transparency import (
    Checkpoint,
    NoteVerifier,
    is_partition_origin,
    open_note,
    origin_generation,
)

__all__ = [
    "Freshness",
    "Rollback",
    "SignedSize",
    "TopicTail",
    "archive_freshness",
    "check_freshness",
    "deployment_origins",
    "freshest_cosigned",
]

log = logging.getLogger(__name__)

#: notes tried per witness store and origin, newest first, before giving up on it
_TRIES = 8


class TopicTail(Protocol):
    """The newest checkpoint record of a partition the archiver committed past."""

    @property
    def partition(self) -> int: ...
    @property
    def origin(self) -> str: ...
    @property
    def size(self) -> int: ...
    @property
    def note(self) -> str: ...
    @property
    def where(self) -> str: ...


@dataclass(frozen=True, slots=True)
class SignedSize:
    """A size of ``origin`` some evidence proves the log reached, and where it is kept."""

    origin: str
    size: int
    evidence: str  # e.g. "witness w1.test (store file:///w)" or "topic tv.sealed[1]@812"


@dataclass(frozen=True, slots=True)
class Rollback:
    """An archived log smaller than a signed size: the archive was rolled back."""

    origin: str
    partition: int
    archived: int
    proof: SignedSize

    def describe(self) -> str:
        return (
            f"the archive of partition {self.partition} ({self.origin}) was rolled back: it "
            f"holds size {self.archived}, but {self.proof.evidence} shows size "
            f"{self.proof.size} signed"
        )


@dataclass(slots=True)
class Freshness:
    """What the freshness check found, per archived log it could compare."""

    rollbacks: list[Rollback] = field(default_factory=list)
    compared: list[str] = field(default_factory=list)  # what was compared, one line each
    notes: list[str] = field(default_factory=list)  # lag and what could not be compared
    #: the origins held to the topic's checkpoint: only the topic proves an archive current
    #: (a witness store shows a floor, and whoever rolls back the archive may roll it back)
    topic_checked: set[str] = field(default_factory=set)

    @property
    def ok(self) -> bool:
        return not self.rollbacks


def _partition(origin: str) -> int | None:
    tail = origin.rpartition("/")[2]
    return int(tail) if tail.isdigit() else None


def archived_size(store: ObjectStore, prefix: str, origin: str) -> int:
    """The size of the newest checkpoint object of ``origin``'s log in the archive (0: none)."""
    p = _partition(origin)
    if p is None:
        return 0
    cps = store.list(checkpoint_prefix(log_prefix(prefix, p, origin_generation(origin))))
    sizes = [s for o in cps if (s := parse_checkpoint_key(o.key)) is not None]
    return max(sizes, default=0)


def _signed_size(
    note: str, origin: str, keys: Sequence[NoteVerifier], witnesses: Sequence[NoteVerifier]
) -> tuple[int, list[str]] | None:
    """``(size, witness names)`` when the log key signed ``note`` for ``origin`` (and, with
    ``witnesses``, one of them cosigned it); else None."""
    try:
        text, _ = open_note(note, keys)
        cp = Checkpoint.parse(text)
        names: list[str] = []
        if witnesses:
            names = [v.name for v in open_note(note, witnesses)[1]]
    except LogError:
        return None
    return (cp.size, names) if cp.origin == origin else None


def freshest_cosigned(
    store: ObjectStore,
    origin: str,
    keys: Sequence[NoteVerifier],
    witnesses: Sequence[NoteVerifier] = (),
) -> SignedSize | None:
    """The largest size of ``origin`` the witness store holds a signed checkpoint of: signed
    by a trusted log key and, when ``witnesses`` are given, cosigned by one of them."""
    for size in sorted(cosigned_sizes(store, origin), reverse=True)[:_TRIES]:
        try:
            note = store.get(witness_checkpoint_key(origin, size)).decode("utf-8", "replace")
        except NotFoundError:
            continue
        got = _signed_size(note, origin, keys, witnesses)
        if got is None or got[0] != size:
            log.warning("witness store %s: %s@%d does not verify", store.url, origin, size)
            continue
        who = f"witness {', '.join(got[1])}" if got[1] else "a checkpoint signed by the log key"
        return SignedSize(origin, size, f"{who} (store {store.url}) cosigned")
    return None


def deployment_origins(
    stores: Sequence[ObjectStore], base: str, prefix: str, tails: Mapping[int, TopicTail] | None
) -> set[str]:
    """Every origin of this deployment (``base``/``prefix``) the witness stores or the topic
    know: the logs whose freshness can be checked."""
    found: set[str] = set()
    for s in stores:
        for o in s.list("witness/"):
            parts = o.key.split("/")
            if len(parts) == 4 and parts[2] == "checkpoint":
                found.add(unquote(parts[1]))
    found |= {t.origin for t in (tails or {}).values()}
    return {
        o
        for o in found
        if (p := _partition(o)) is not None and is_partition_origin(o, base, prefix, p)
    }


def check_freshness(
    archive: ObjectStore,
    prefix: str,
    origins: Sequence[str],
    *,
    keys: Sequence[NoteVerifier],
    witness_stores: Sequence[ObjectStore] = (),
    witnesses: Sequence[NoteVerifier] = (),
    tails: Mapping[int, TopicTail] | None = None,
) -> Freshness:
    """Compare each archived log of ``origins`` with the witness stores and the topic.

    ``tails`` None means the topic was not reachable (said in ``notes``). The archive is
    listed once per origin (its checkpoint objects)."""
    out = Freshness()
    if tails is None:
        out.notes.append("the sealed topic was not compared (Kafka not reachable)")
    for origin in sorted(origins):
        p = _partition(origin)
        if p is None:
            continue
        have = archived_size(archive, prefix, origin)
        tail = (tails or {}).get(p)
        topic: SignedSize | None = None
        if tail is not None and tail.origin == origin:
            got = _signed_size(tail.note, origin, keys, ())
            if got is not None:
                topic = SignedSize(origin, got[0], f"the topic's checkpoint record {tail.where}")
                out.topic_checked.add(origin)
        proofs = [topic] if topic is not None else []
        for s in witness_stores:
            w = freshest_cosigned(s, origin, keys, witnesses)
            if w is None:
                continue
            if topic is not None and topic.size < w.size:
                # the witness follows the topic, the archiver commits after its flush: what
                # it has not committed yet is lag (the topic's size is still compared)
                out.notes.append(
                    f"partition {p}: {w.evidence} size {w.size}; the archiver has committed "
                    f"through size {topic.size} so far (archive at {have}): not archived yet"
                )
                continue
            proofs.append(w)
        for proof in proofs:
            out.compared.append(
                f"partition {p}: archive at size {have}, {proof.evidence} size {proof.size}"
            )
        worst = max(proofs, key=lambda s: s.size, default=None)
        if worst is not None and have < worst.size:
            out.rollbacks.append(Rollback(origin, p, have, worst))
    return out


def archive_freshness(
    settings: Settings,
    *,
    keys: Sequence[NoteVerifier],
    witnesses: Sequence[NoteVerifier] = (),
    witness_urls: Sequence[str] = (),
    tails: Mapping[int, TopicTail] | None,
    origins: Sequence[str] | None = None,
) -> Freshness:
    """:func:`check_freshness` of ``settings.archive_url`` against the witness stores at
    ``witness_urls`` and the topic's ``tails``, over ``origins`` (None: every origin of this
    deployment the stores or the topic know)."""
    # readers: an archive that does not exist is not found, never an empty one rolled back
    archive = open_store(settings.archive_url, settings, create=False)
    stores = [open_store(u, settings, create=False) for u in witness_urls]
    try:
        if origins is None:
            origins = sorted(
                deployment_origins(stores, settings.log_origin, settings.topic_prefix, tails)
            )
        return check_freshness(
            archive,
            settings.topic_prefix,
            origins,
            keys=keys,
            witness_stores=stores,
            witnesses=witnesses,
            tails=tails,
        )
    finally:
        for s in [archive, *stores]:
            s.close()
