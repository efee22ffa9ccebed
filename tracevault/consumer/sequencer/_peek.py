"""A direct reader of TraceEvent v1 values: the sequencer's hot path.

Sealing needs only ``run_id``, ``seq``, ``kind`` and the two JSON fields (to check they are
canonical), but the whole record must be valid Avro. fastavro's generic reader cost more
than everything else the sequencer does per event, so v1 values are walked here directly:
every field is read and bounds-checked, every string must be valid UTF-8, and nothing may
follow the record. Anything unusual (another schema version, a bad length, a truncated body)
returns None and the caller falls back to :func:`tracevault.schemas.decode_event`, which
decides and explains the refusal. A test pins this reader to fastavro on valid and on
corrupted values.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from tracevault.schemas import MAGIC, EventKind, VarintError, default_schemas, read_long

__all__ = ["Peeked", "peek_event"]


class Peeked(NamedTuple):
    run_id: str
    seq: int
    kind: EventKind
    request: bytes
    response: bytes


#: One varint of at most 10 bytes (what ``read_long`` accepts), matched rather than decoded.
_skip_varint = re.compile(rb"[\x80-\xff]{0,9}[\x00-\x7f]").match


# Peeked(...) without the generated __new__'s Python frame: the same tuple.
_new_tuple = tuple.__new__


class _Bad(Exception):
    pass


_HEADER: bytes | None = None
_KINDS: tuple[EventKind, ...] = ()


def _setup() -> bytes:
    global _HEADER, _KINDS  # noqa: PLW0603 - computed on first use, not at import
    if _HEADER is None:
        v1 = default_schemas().get("TraceEvent", 1)
        kind_field = next(f for f in v1.source["fields"] if f["name"] == "kind")
        _KINDS = tuple(EventKind(s) for s in kind_field["type"]["symbols"])
        _HEADER = MAGIC + v1.fingerprint
    return _HEADER


def _bytes(buf: bytes, pos: int) -> tuple[bytes, int]:
    n, pos = read_long(buf, pos)
    end = pos + n
    if n < 0 or end > len(buf):
        raise _Bad
    return buf[pos:end], end


def _str(buf: bytes, pos: int) -> tuple[str, int]:
    raw, pos = _bytes(buf, pos)
    return raw.decode("utf-8"), pos


def peek_event(value: bytes) -> Peeked | None:
    """The fields the sequencer needs from a TraceEvent v1 value; None means "ask fastavro"."""
    header = _HEADER if _HEADER is not None else _setup()
    if not value.startswith(header):
        return None
    try:
        return _walk(value)
    except (_Bad, IndexError, UnicodeDecodeError, VarintError):
        return None


# The walk below is written out rather than built from the helpers above: it runs once per
# raw event, and a call per field cost more than the rest of the walk. The common encodings
# are read inline: a length or a union branch in one byte (``b & 0x81 == 0`` is a
# non-negative value under 64, ``b >> 1``); anything else goes through ``read_long`` or the
# helpers. Every field is still read, bounds-checked and (strings) UTF-8 validated.


def _walk(v: bytes) -> Peeked | None:
    n = len(v)
    rl = read_long
    # run_id
    b = v[10]
    if b & 0x81:
        ln, pos = rl(v, 10)
        if ln < 0:
            return None
    else:
        ln, pos = b >> 1, 11
    end = pos + ln
    if end > n:
        return None
    run_id = v[pos:end].decode("utf-8")
    # seq
    b = v[end]
    if b < 0x80:
        seq, pos = (b >> 1) ^ -(b & 1), end + 1
    elif v[end + 1] < 0x80:  # two bytes: seqs up to 8191
        z = (b & 0x7F) | (v[end + 1] << 7)
        seq, pos = (z >> 1) ^ -(z & 1), end + 2
    else:
        seq, pos = rl(v, end)
    # kind: an enum index, one byte for every symbol
    b = v[pos]
    if b & 0x81 or (b >> 1) >= len(_KINDS):
        return None
    kind = _KINDS[b >> 1]
    m = _skip_varint(v, pos + 1)  # at (never needed, only skipped)
    if m is None:
        return None
    pos = m.end()
    # agent: five strings. When every length is one (ASCII) byte, the whole block is valid
    # UTF-8 exactly when each string is (a multi-byte character cannot span an ASCII byte),
    # so it is checked with one decode.
    start = p = pos
    try:
        b = v[p]
        p += 1 + (b >> 1)
        f = b
        b = v[p]
        p += 1 + (b >> 1)
        f |= b
        b = v[p]
        p += 1 + (b >> 1)
        f |= b
        b = v[p]
        p += 1 + (b >> 1)
        f |= b
        b = v[p]
        p += 1 + (b >> 1)
        f |= b
    except IndexError:
        f = 0x80  # a length of more than one byte sent the walk astray: read it properly
    if f & 0x81 or p > n:
        pos = start
        for _ in range(5):
            _, pos = _str(v, pos)
    else:
        v[start:p].decode("utf-8")
        pos = p
    # model (optional string)
    b = v[pos]
    if b == 0:
        pos += 1
    elif b == 2:
        _, pos = _str(v, pos + 1)
    else:
        return None
    # seed (optional long)
    b = v[pos]
    if b == 0:
        pos += 1
    elif b == 2:
        _, pos = rl(v, pos + 1)
    else:
        return None
    # request, response (bytes)
    b = v[pos]
    if b & 0x81:
        ln, pos = rl(v, pos)
        if ln < 0:
            return None
    else:
        ln = b >> 1
        pos += 1
    end = pos + ln
    if end > n:
        return None
    request = v[pos:end]
    b = v[end]
    if b & 0x81:
        ln, pos = rl(v, end)
        if ln < 0:
            return None
    else:
        ln = b >> 1
        pos = end + 1
    end = pos + ln
    if end > n:
        return None
    response = v[pos:end]
    pos = end
    # error (optional record of two strings)
    b = v[pos]
    if b == 0:
        pos += 1
    elif b == 2:
        _, pos = _str(v, pos + 1)
        _, pos = _str(v, pos)
    else:
        return None
    # idempotency_key (optional string)
    b = v[pos]
    if b == 0:
        pos += 1
    elif b == 2:
        _, pos = _str(v, pos + 1)
    else:
        return None
    # parent_seq (optional long)
    b = v[pos]
    if b == 0:
        pos += 1
    elif b == 2:
        _, pos = rl(v, pos + 1)
    else:
        return None
    # attributes: map<string> in blocks
    if v[pos] == 0:
        pos += 1
    else:
        while True:
            count, pos = rl(v, pos)
            if count == 0:
                break
            if count < 0:
                count = -count
                _, pos = rl(v, pos)  # block size in bytes
            for _ in range(count):
                _, pos = _str(v, pos)
                _, pos = _str(v, pos)
    if pos != n:
        return None
    return _new_tuple(Peeked, (run_id, seq, kind, request, response))
