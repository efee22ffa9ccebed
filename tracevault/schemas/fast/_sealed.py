"""Direct readers of SealedEvent v1: one sealed value (the archiver) and OCF segments (replay).

* :func:`sealed_fields` reads one ``<prefix>.sealed`` value. The archiver touches every sealed
  event, and a fastavro ``decode_sealed`` costs more than writing the archive itself.
* :func:`sealed_rows` reads many whole values into row dicts: the archive's data bundles
  (the static log) hold the exact sealed values, and the replayer reads every one of a run.
* :func:`segment_rows` reads the archiver's own segments: SealedEvent v1 rows in deflate OCF
  blocks. fastavro's generic OCF reader spends ~3.6 µs on each row (including a ``datetime``
  for ``sealed_at`` that the replayer turns straight back into micros), this reader ~3 µs. The
  archiver writes one fixed shape (``tracevault/archive/_segment.py``: deflate, the current
  SealedEvent schema, one sync marker), so only that shape is read, into the same row dicts,
  with ``sealed_at`` as integer micros (fastavro's ``datetime`` cannot hold a long beyond years
  1-9999, which this reader keeps as written: transport metadata, outside the chain).

The guard (``_guard.py``) arms both only while v1 is the newest published SealedEvent; both
decline (return None) on anything else or unusual, and check that the walk ended exactly at
the end of the value or of each block. The caller then reads with fastavro, which decides what
is readable and how an unreadable value or segment is reported.
``tests/schemas/test_fast_pinned.py`` pins both to fastavro.
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Sequence
from functools import lru_cache
from itertools import accumulate
from typing import Any

from tracevault.schemas._registry import default_schemas
from tracevault.schemas.fast._guard import DECLINE, SEALED_EVENT_V1, armed_header
from tracevault.schemas.fast._varint import CONT7, CONT8, read_long

__all__ = ["sealed_fields", "sealed_rows", "segment_rows"]

_MAX_INT = 1 << 31
_META_KEYS = {"avro.codec", "avro.schema"}
_u64 = struct.Struct("<Q").unpack_from
_header: bytes | None = None  # C3 01 + the v1 fingerprint, once the guard armed the walks


@lru_cache(maxsize=1)
def _arm() -> bytes | None:
    """The header v1 values start with, or None when the guard keeps the walks off."""
    global _header  # noqa: PLW0603 - computed on first use, not at import
    _header = armed_header(SEALED_EVENT_V1)
    return _header


@lru_cache(maxsize=1)
def _source() -> dict[str, Any] | None:
    """The v1 schema as published (what an archiver-written OCF header holds), when armed."""
    if _arm() is None:
        return None
    return default_schemas().get(SEALED_EVENT_V1.record, SEALED_EVENT_V1.version).source


def sealed_fields(value: bytes) -> tuple[str, int, bytes, bytes, bytes, int] | None:
    """(run_id, seq, prev_hash, hash, raw, sealed_at) of a SealedEvent v1 value, or None
    ("ask fastavro"). One flat function: it runs once per archived event."""
    header = _header
    if header is None:
        header = _arm()
        if header is None:
            return None
    if not value.startswith(header):
        return None
    b, end = value, len(value)
    try:
        x = b[10]
        if x < 0x80:
            n, p = (x >> 1) ^ -(x & 1), 11
        else:
            n, p = read_long(b, 10)
        q = p + n
        if n < 0 or q > end:
            return None
        run_id = b[p:q].decode("utf-8")
        x = b[q]
        if x < 0x80:
            seq, p = (x >> 1) ^ -(x & 1), q + 1
        else:
            seq, p = read_long(b, q)
        prev, h = b[p : p + 32], b[p + 32 : p + 64]
        p += 64
        x = b[p]
        if x < 0x80:
            m, p = (x >> 1) ^ -(x & 1), p + 1
        else:
            m, p = read_long(b, p)
        q = p + m
        if m < 0 or q > end:
            return None
        raw = b[p:q]
        # sealed_at: µs from 1974 to 2540 are 8-byte varints, read in one go
        x = int.from_bytes(b[q : q + 8], "little")
        if x & CONT8 == CONT7:
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
            sealed_at, p = read_long(b, q)
        x = b[p]  # source_partition (an int)
        if x < 0x80:
            p += 1
        else:
            partition, p = read_long(b, p)
            if not -_MAX_INT <= partition < _MAX_INT:
                return None
        q = p  # source_offset: not needed, only checked
        while b[q] & 0x80:
            q += 1
        if q - p < 9:  # up to 9 bytes: always a valid long
            p = q + 1
        else:  # 10 bytes or more: read_long refuses what fastavro would misread
            _, p = read_long(b, p)
        x = b[p]  # sequencer_id
        if x < 0x80:
            n, p = (x >> 1) ^ -(x & 1), p + 1
        else:
            n, p = read_long(b, p)
        q = p + n
        if n < 0 or q != end:  # the record ends exactly where the value does
            return None
        b[p:q].decode("utf-8")
    except DECLINE:
        return None
    return run_id, seq, prev, h, raw, sealed_at


def _ocf_header(data: bytes) -> tuple[int, bytes] | None:
    """(position of the first block, sync marker) if this is a segment we know how to read."""
    if data[:4] != b"Obj\x01":
        return None
    meta: dict[str, bytes] = {}
    count, p = read_long(data, 4)
    while count:
        if count < 0:
            return None
        for _ in range(count):
            n, p = read_long(data, p)
            k = data[p : p + n].decode("utf-8")
            p += n
            n, p = read_long(data, p)
            meta[k] = data[p : p + n]
            p += n
            if n < 0 or p > len(data):
                return None
        count, p = read_long(data, p)
    source = _source()
    if source is None or meta.get("avro.codec") != b"deflate" or meta.keys() != _META_KEYS:
        return None
    if json.loads(meta["avro.schema"]) != source:
        return None
    sync = data[p : p + 16]
    if len(sync) != 16:
        return None
    return p + 16, sync


def _rows(
    body: bytes,
    count: int,
    out: list[dict[str, Any]],
    ends: Sequence[int] = (),
    header: bytes = b"",
) -> bool:
    """Append ``count`` rows read from ``body``; False unless they fill it exactly.

    With ``header``, every row is a whole sealed value (its header first, checked) and row
    ``k`` must end exactly at ``ends[k]``.
    """
    end = len(body)
    rid_bytes, run_id = b"\x00", ""
    sid_bytes, sequencer_id = b"\x00", ""
    p = 0
    append = out.append
    for k in range(count):
        if header:
            if not body.startswith(header, p):
                return False
            p += len(header)
        if body.startswith(rid_bytes, p):  # every row of a segment is the same run
            p += len(rid_bytes)
        else:
            rid_bytes, run_id, p = _name(body, p, end)
        # seq: seqs and offsets are 1-3 byte varints, read byte by byte (cheaper than a slice)
        b = body[p]
        if b < 0x80:
            seq, p = (b >> 1) ^ -(b & 1), p + 1
        elif (c := body[p + 1]) < 0x80:
            z = (b & 0x7F) | c << 7
            seq, p = (z >> 1) ^ -(z & 1), p + 2
        elif (e := body[p + 2]) < 0x80:
            z = (b & 0x7F) | (c & 0x7F) << 7 | e << 14
            seq, p = (z >> 1) ^ -(z & 1), p + 3
        else:
            seq, p = read_long(body, p)
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
        sealed_at, partition, offset, p = _transport(body, q)
        if body.startswith(sid_bytes, p):  # and of one sequencer
            p += len(sid_bytes)
        else:
            sid_bytes, sequencer_id, p = _name(body, p, end)
        if header and p != ends[k]:
            return False
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


def _transport(body: bytes, q: int) -> tuple[int, int, int, int]:
    """(sealed_at, source_partition, source_offset, where they end) of the row whose
    transport metadata starts at ``q``; an IndexError (a decline) on a partition that is not
    an int."""
    # sealed_at: µs from 1974 to 2540 are 8-byte varints, read in one go
    x = _u64(body, q)[0] if q + 8 <= len(body) else 0
    if x & CONT8 == CONT7:
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
        sealed_at, p = read_long(body, q)
    b = body[p]
    if b < 0x80:  # a partition number below 64
        partition = (b >> 1) ^ -(b & 1)
        p += 1
    else:
        partition, p = read_long(body, p)
        if not -_MAX_INT <= partition < _MAX_INT:
            raise IndexError("source_partition is not an int")
    # offset: a 1-3 byte varint, as the seq
    b = body[p]
    if b < 0x80:
        offset, p = (b >> 1) ^ -(b & 1), p + 1
    elif (c := body[p + 1]) < 0x80:
        z = (b & 0x7F) | c << 7
        offset, p = (z >> 1) ^ -(z & 1), p + 2
    elif (e := body[p + 2]) < 0x80:
        z = (b & 0x7F) | (c & 0x7F) << 7 | e << 14
        offset, p = (z >> 1) ^ -(z & 1), p + 3
    else:
        offset, p = read_long(body, p)
    return sealed_at, partition, offset, p


def _name(body: bytes, p: int, end: int) -> tuple[bytes, str, int]:
    """The string at ``p``: its encoding, its value and where it ends (a run id or a
    sequencer id that is not the previous row's)."""
    n, q = read_long(body, p)
    if n < 0 or q + n > end:
        raise IndexError("string runs past the body")
    return body[p : q + n], body[q : q + n].decode("utf-8"), q + n


def segment_rows(data: bytes) -> list[dict[str, Any]] | None:
    """The SealedEvent rows of an archiver-written segment, or None (read it with fastavro)."""
    try:
        head = _ocf_header(data)
        if head is None:
            return None
        p, sync = head
        end = len(data)
        rows: list[dict[str, Any]] = []
        while p < end:
            count, p = read_long(data, p)
            size, p = read_long(data, p)
            q = p + size
            if count < 0 or size < 0 or q + 16 > end or data[q : q + 16] != sync:
                return None
            if not _rows(zlib.decompress(data[p:q], -15), count, rows):
                return None
            p = q + 16
    except (*DECLINE, zlib.error):
        return None
    return rows


def sealed_rows(values: Sequence[bytes]) -> list[dict[str, Any]] | None:
    """The SealedEvent v1 rows of whole sealed values (as ``segment_rows`` gives them), or
    None when any of them is not a plain v1 value (read them all with fastavro)."""
    got = _values(values)
    return None if got is None else got[0]


def _values(values: Sequence[bytes]) -> tuple[list[dict[str, Any]]] | None:
    """One walk over the values laid end to end, each checked to end where it does."""
    header = _header
    if header is None:
        header = _arm()
        if header is None:
            return None
    rows: list[dict[str, Any]] = []
    try:
        ends = list(accumulate(map(len, values)))
        if not _rows(b"".join(values), len(values), rows, ends, header):
            return None
    except DECLINE:
        return None
    return (rows,)
