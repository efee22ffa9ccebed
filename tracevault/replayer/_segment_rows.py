"""A direct reader for the archiver's own segments: SealedEvent v1 rows in deflate OCF blocks.

Replaying a 100,000-event run reads 100,000 SealedEvent rows; fastavro's generic OCF reader
spends ~3.6 µs on each row kept (including a ``datetime`` for ``sealed_at`` that the replayer
turns straight back into micros), this reader ~3 µs. The archiver writes one fixed shape
(``_segment.py``: deflate, the current SealedEvent schema, one sync marker), so this module
reads exactly that shape into the same row dicts, with ``sealed_at`` as integer micros.

It returns ``None`` for anything else or anything unusual — another codec or schema, a bad
sync marker, a block that does not hold exactly its rows, a truncated or corrupted value — and
the caller reads the segment with fastavro, which keeps deciding what is readable and how an
unreadable segment is reported. One deliberate difference: ``sealed_at`` (transport metadata,
outside the chain) is kept as the long that was written, so a value beyond ``datetime``'s
years 1-9999, which fastavro's timestamp conversion cannot represent, still reads.
``tests/replayer/test_fast_paths.py`` pins the rows to fastavro's.
"""

from __future__ import annotations

import json
import zlib
from functools import lru_cache
from typing import Any

from tracevault.schemas import default_schemas, read_long

__all__ = ["SEALED_V1_FINGERPRINT", "fast_segment_rows"]

#: CRC-64-AVRO fingerprint of ``SealedEvent.v1.avsc``, the row layout read here.
SEALED_V1_FINGERPRINT = bytes.fromhex("56e7e7d30b5c62aa")
_MAX = 1 << 63
_MAX_INT = 1 << 31
_CONT8 = 0x8080808080808080  # the continuation bits of 8 varint bytes, little-endian
_CONT7 = 0x0080808080808080  # ... set on the first 7 only: an 8-byte varint


@lru_cache(maxsize=1)
def _current_source() -> dict[str, Any] | None:
    v = default_schemas().get("SealedEvent")
    return v.source if v.fingerprint == SEALED_V1_FINGERPRINT else None


def _long(buf: bytes, pos: int) -> tuple[int, int]:
    b = buf[pos]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    n, end = read_long(buf, pos)
    if end - pos > 9 and not -_MAX <= n < _MAX:
        raise ValueError("long outside 64 bits")
    return n, end


def _header(data: bytes) -> tuple[int, bytes] | None:
    """(position of the first block, sync marker) if this is a segment we know how to read."""
    if data[:4] != b"Obj\x01":
        return None
    meta: dict[str, bytes] = {}
    count, p = _long(data, 4)
    while count:
        if count < 0:
            return None
        for _ in range(count):
            n, p = _long(data, p)
            k = data[p : p + n].decode("utf-8")
            p += n
            n, p = _long(data, p)
            meta[k] = data[p : p + n]
            p += n
            if n < 0 or p > len(data):
                return None
        count, p = _long(data, p)
    source = _current_source()
    if (
        source is None
        or meta.get("avro.codec") != b"deflate"
        or set(meta)
        != {
            "avro.codec",
            "avro.schema",
        }
    ):
        return None
    if json.loads(meta["avro.schema"]) != source:
        return None
    sync = data[p : p + 16]
    if len(sync) != 16:
        return None
    return p + 16, sync


def _rows(body: bytes, count: int, out: list[dict[str, Any]]) -> bool:
    """Append ``count`` rows read from ``body``; False unless they fill it exactly."""
    end = len(body)
    rid_bytes, run_id = b"\x00", ""
    sid_bytes, sequencer_id = b"\x00", ""
    p = 0
    append = out.append
    for _ in range(count):
        if body.startswith(rid_bytes, p):  # every row of a segment is the same run
            p += len(rid_bytes)
        else:
            n, q = _long(body, p)
            if n < 0 or q + n > end:
                return False
            run_id = body[q : q + n].decode("utf-8")
            rid_bytes = body[p : q + n]
            p = q + n
        # seq: seqs and offsets are 1-3 byte varints, read in one go
        x = int.from_bytes(body[p : p + 3], "little")
        if not x & 0x80:
            seq, p = (x >> 1 & 0x3F) ^ -(x & 1), p + 1
        elif not x & 0x8000:
            z = (x & 0x7F) | (x >> 1 & 0x3F80)
            seq, p = (z >> 1) ^ -(z & 1), p + 2
        elif not x & 0x800000:
            z = (x & 0x7F) | (x >> 1 & 0x3F80) | (x >> 2 & 0x1FC000)
            seq, p = (z >> 1) ^ -(z & 1), p + 3
        else:
            seq, p = _long(body, p)
        prev_hash = body[p : p + 32]
        hash_ = body[p + 32 : p + 64]
        p += 64
        n = body[p]  # raw's length: values below 8 KiB take 1-2 bytes
        if n < 0x80:
            n = (n >> 1) ^ -(n & 1)
            p += 1
        elif body[p + 1] < 0x80:
            n = (n & 0x7F) | body[p + 1] << 7
            n = (n >> 1) ^ -(n & 1)
            p += 2
        else:
            n, p = read_long(body, p)
        q = p + n
        if n < 0 or q > end:
            return False
        raw = body[p:q]
        # sealed_at: µs from 1974 to 2540 are 8-byte varints, read in one go
        x = int.from_bytes(body[q : q + 8], "little")
        if x & _CONT8 == _CONT7:
            z = (
                (x & 0x7F)
                | (x >> 1 & 0x3F80)
                | (x >> 2 & 0x1FC000)
                | (x >> 3 & 0xFE00000)
                | (x >> 4 & 0x7F0000000)
                | (x >> 5 & 0x3F800000000)
                | (x >> 6 & 0x1FC0000000000)
                | (x >> 7 & 0xFE000000000000)
            )
            sealed_at = (z >> 1) ^ -(z & 1)
            p = q + 8
        else:
            sealed_at, p = _long(body, q)
        b = body[p]
        if b < 0x80:  # a partition number below 64
            partition = (b >> 1) ^ -(b & 1)
            p += 1
        else:
            partition, p = _long(body, p)
            if not -_MAX_INT <= partition < _MAX_INT:
                return False
        # offset: seqs and offsets are 1-3 byte varints, read in one go
        x = int.from_bytes(body[p : p + 3], "little")
        if not x & 0x80:
            offset, p = (x >> 1 & 0x3F) ^ -(x & 1), p + 1
        elif not x & 0x8000:
            z = (x & 0x7F) | (x >> 1 & 0x3F80)
            offset, p = (z >> 1) ^ -(z & 1), p + 2
        elif not x & 0x800000:
            z = (x & 0x7F) | (x >> 1 & 0x3F80) | (x >> 2 & 0x1FC000)
            offset, p = (z >> 1) ^ -(z & 1), p + 3
        else:
            offset, p = _long(body, p)
        if body.startswith(sid_bytes, p):
            p += len(sid_bytes)
        else:
            n, q = _long(body, p)
            if n < 0 or q + n > end:
                return False
            sequencer_id = body[q : q + n].decode("utf-8")
            sid_bytes = body[p : q + n]
            p = q + n
        append(
            {
                "run_id": run_id,
                "seq": seq,
                "prev_hash": prev_hash,
                "hash": hash_,
                "raw": raw,
                "sealed_at": sealed_at,
                "source_partition": partition,
                "source_offset": offset,
                "sequencer_id": sequencer_id,
            }
        )
    return p == end


def fast_segment_rows(data: bytes) -> list[dict[str, Any]] | None:
    """The SealedEvent rows of an archiver-written segment, or None (read it with fastavro)."""
    try:
        head = _header(data)
        if head is None:
            return None
        p, sync = head
        end = len(data)
        rows: list[dict[str, Any]] = []
        while p < end:
            count, p = _long(data, p)
            size, p = _long(data, p)
            q = p + size
            if count < 0 or size < 0 or q + 16 > end or data[q : q + 16] != sync:
                return None
            if not _rows(zlib.decompress(data[p:q], -15), count, rows):
                return None
            p = q + 16
    except (IndexError, ValueError, zlib.error):
        return None
    return rows
