"""Segments: Avro Object Container Files of SealedEvent records, written deterministically.

Codec: **deflate**. It is in the Avro spec's required set, so every Avro implementation
(fastavro, Apache ``avro``, Java) reads it without extra packages; snappy and zstandard would
each need a native package on every reader's machine.

Why hand-written: the sealed topic already carries each record's Avro binary body (after the
10-byte single-object header), and an OCF block is just those bodies concatenated, so the
archiver copies the exact sealed bytes into the file instead of decoding and re-encoding
them. The sync marker is derived from the run id and first seq and the header has no
timestamps, so the same events always make the same bytes: a crash that re-writes a segment
re-writes it byte for byte, and the store's "same bytes = no-op" rule makes that safe.
"""

from __future__ import annotations

import hashlib
import json
import zlib
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime, timedelta
from io import BytesIO

from fastavro import reader as _ocf_reader

from tracevault.errors import ArchiveError
from tracevault.schemas import (
    SealedEvent,
    avro_bytes,
    avro_long,
    decode_sealed,
    default_schemas,
    encode_sealed,
)

__all__ = [
    "CODEC",
    "encode_segment",
    "iter_segment",
    "read_segment",
    "sealed_body",
    "sync_marker",
]

CODEC = "deflate"
_MAGIC = b"Obj\x01"
_BLOCK_BYTES = 1 << 20  # uncompressed bytes per block: bounded reader memory per block
_DEFLATE_LEVEL = 6
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


_SCHEMA_CACHE: tuple[bytes, bytes] | None = None


def _schema() -> tuple[bytes, bytes]:
    """(schema JSON for the OCF header, single-object header of the current SealedEvent)."""
    global _SCHEMA_CACHE  # noqa: PLW0603 - built on first use, not at import
    if _SCHEMA_CACHE is None:
        v = default_schemas().get("SealedEvent")
        _SCHEMA_CACHE = (json.dumps(v.source).encode(), b"\xc3\x01" + v.fingerprint)
    return _SCHEMA_CACHE


def sealed_body(value: bytes) -> bytes:
    """The Avro body of a sealed value in the current SealedEvent schema.

    A value written with the current schema is copied as is; an older version is decoded and
    re-encoded so one segment always holds one writer schema.
    """
    header = _schema()[1]
    if value[:10] == header:
        return value[10:]
    return encode_sealed(decode_sealed(value))[10:]


def sync_marker(run_id: str, first_seq: int) -> bytes:
    h = hashlib.sha256(b"tracevault/v1/segment-sync\x00")
    h.update(run_id.encode())
    h.update(first_seq.to_bytes(8, "big"))
    return h.digest()[:16]


def encode_segment(run_id: str, first_seq: int, bodies: Iterable[bytes]) -> bytes:
    """An OCF holding ``bodies`` (SealedEvent Avro bodies, see :func:`sealed_body`)."""
    schema_json, _ = _schema()
    sync = sync_marker(run_id, first_seq)
    out = bytearray(_MAGIC)
    out += avro_long(2)
    out += avro_bytes(b"avro.codec") + avro_bytes(CODEC.encode())
    out += avro_bytes(b"avro.schema") + avro_bytes(schema_json)
    out += avro_long(0)
    out += sync

    block: list[bytes] = []
    size = 0

    def flush() -> None:
        nonlocal size
        comp = zlib.compressobj(_DEFLATE_LEVEL, zlib.DEFLATED, -15)
        data = comp.compress(b"".join(block)) + comp.flush()
        out.extend(avro_long(len(block)) + avro_long(len(data)) + data + sync)
        block.clear()
        size = 0

    for body in bodies:
        block.append(body)
        size += len(body)
        if size >= _BLOCK_BYTES:
            flush()
    if block:
        flush()
    return bytes(out)


def iter_segment(data: bytes, *, key: str = "segment") -> Iterator[SealedEvent]:
    """The SealedEvents of one segment, in file order; ``ArchiveError`` if unreadable."""
    try:
        for rec in _ocf_reader(BytesIO(data)):
            if not isinstance(rec, dict):
                raise ArchiveError(f"{key} holds a non-record value")
            at = rec["sealed_at"]
            if isinstance(at, datetime):  # fastavro applies timestamp-micros; keep the integer
                rec["sealed_at"] = (at - _EPOCH) // timedelta(microseconds=1)
            yield SealedEvent.from_avro(rec)
    except (ValueError, EOFError, KeyError, zlib.error) as exc:
        raise ArchiveError(f"{key} is not a readable Avro container file: {exc}") from exc


def read_segment(data: bytes, *, key: str = "segment") -> list[SealedEvent]:
    """All SealedEvents of one segment (see :func:`iter_segment`)."""
    return list(iter_segment(data, key=key))
