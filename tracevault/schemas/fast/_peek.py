"""Readers of parts of TraceEvent v2 values: the sequencer's peek and two prefix reads.

* :func:`peek_event` reads every field but keeps only what sealing needs (run id, seq, kind,
  request, response), and validates the rest (bounds, UTF-8);
* :func:`event_kind` reads only the first three fields (the archiver, on sealed values);
* :func:`event_time` reads the first four (the sequencer, on a run it does not know).

Split from ``_event.py`` (the full decode), whose guard they share: :func:`_arm` takes the
header and the kinds from ``_event._arm`` once and keeps them here, so every call reads them
as this module's own globals. Like the full decode, each walk declines (None) on anything
unusual, and ``tests/schemas/test_fast_pinned.py`` pins them to fastavro.
"""

from __future__ import annotations

from typing import NamedTuple

from tracevault.schemas._events import EventKind
from tracevault.schemas.fast import _event
from tracevault.schemas.fast._event import _NULL_TAIL, _string
from tracevault.schemas.fast._guard import DECLINE
from tracevault.schemas.fast._varint import CONT7, CONT8, VarintError, read_long

__all__ = ["Peeked", "event_kind", "event_time", "peek_event"]

_header: bytes | None = None  # C3 01 + the v2 fingerprint, once the guard armed the walks
_kinds: tuple[EventKind, ...] = ()


def _arm() -> bytes | None:
    """The header v2 values start with, or None when the guard keeps the walks off."""
    global _header, _kinds  # noqa: PLW0603 - taken from _event on first use, not at import
    header = _event._arm()
    if header is not None:
        _kinds = _event._kinds
        _header = header
    return header


class Peeked(NamedTuple):
    """What the sequencer needs of a raw event."""

    run_id: str
    seq: int
    kind: EventKind
    request: bytes
    response: bytes


# Peeked(...) without the generated __new__'s Python frame: the same tuple.
_new_tuple = tuple.__new__
# The agent record's bytes of the last event peeked, checked then; seeded with the all-empty
# record (five zero lengths), which is valid.
_peeked_agent = b"\x00" * 5
_peeked_model = b"\x00"  # the same for the model: a null one


def peek_event(value: bytes) -> Peeked | None:
    """The fields the sequencer needs from a TraceEvent v2 value; None means "ask fastavro"."""
    header = _header
    if header is None:
        header = _arm()
        if header is None:
            return None
    if not value.startswith(header):
        return None
    try:
        return _peek_walk(value)
    except DECLINE:
        return None


# The common encodings are read inline: a length or a union branch in one byte
# (``b & 0x81 == 0`` is a non-negative value under 64, ``b >> 1``); anything else goes through
# ``read_long`` or ``_string``. Every field is still read, bounds-checked and (strings) UTF-8
# validated.


def _peek_walk(v: bytes) -> Peeked | None:
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
    if b & 0x81 or (b >> 1) >= len(_kinds):
        return None
    kind = _kinds[b >> 1]
    # at (never needed, only checked): most are one 8-byte varint, read as one word
    if int.from_bytes(v[pos + 1 : pos + 9], "little") & CONT8 == CONT7:
        pos += 9
    else:
        _, pos = rl(v, pos + 1)
    # agent: five strings; a run's events repeat the bytes the last event's agent had, which
    # were checked then (Avro is prefix-free: the same bytes read the same)
    last = _peeked_agent
    pos = pos + len(last) if v.startswith(last, pos) else _peek_agent(v, pos, n)
    # model (optional string): a run calls few models, so it is the last one's bytes again
    last = _peeked_model
    pos = pos + len(last) if v.startswith(last, pos) else _peek_model(v, pos, n)
    # seed (optional long): null in most events
    pos = pos + 1 if v[pos] == 0 else _optional_long(v, pos)
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
    # the fields after it: the usual event's are its last five bytes, all zero
    if (end == n - 5 and v.endswith(_NULL_TAIL)) or _peek_tail(v, end, n):
        return _new_tuple(Peeked, (run_id, seq, kind, request, response))
    return None


def _peek_agent(v: bytes, pos: int, n: int) -> int:
    """Where the agent record at ``pos`` ends, its five strings checked (bounds, UTF-8); its
    bytes become ``_peeked_agent``.

    When every length is one (ASCII) byte, the whole block is valid UTF-8 exactly when each
    string is (a multi-byte character cannot span an ASCII byte), so it is checked with one
    decode."""
    global _peeked_agent  # noqa: PLW0603 - one bytes object, replaced atomically
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
            _, pos = _string(v, pos, n)
    else:
        v[start:p].decode("utf-8")
        pos = p
    _peeked_agent = v[start:pos]
    return pos


def _peek_model(v: bytes, pos: int, n: int) -> int:
    """Where the model (``["null", "string"]``) at ``pos`` ends, checked; its bytes become
    ``_peeked_model``. A ValueError (a decline) on another union branch."""
    global _peeked_model  # noqa: PLW0603 - one bytes object, replaced atomically
    b = v[pos]
    if b == 0:
        end = pos + 1
    elif b == 2:
        _, end = _string(v, pos + 1, n)
    else:
        raise ValueError("model: not a branch of its union")
    _peeked_model = v[pos:end]
    return end


def _optional_long(v: bytes, pos: int) -> int:
    """Where the ``["null", "long"]`` at ``pos`` ends; a ValueError (a decline) on another
    union branch."""
    b = v[pos]
    if b == 0:
        return pos + 1
    if b == 2:
        return read_long(v, pos + 1)[1]
    raise ValueError("not a branch of the union")


def _peek_tail(v: bytes, pos: int, n: int) -> bool:
    """Whether the fields after ``response`` (error .. interleave) read to exactly ``n``.
    Called only when they are not the all-null five bytes."""
    rl = read_long
    # error (optional record of two strings)
    b = v[pos]
    if b == 0:
        pos += 1
    elif b == 2:
        _, pos = _string(v, pos + 1, n)
        _, pos = _string(v, pos, n)
    else:
        return False
    # idempotency_key (optional string)
    b = v[pos]
    if b == 0:
        pos += 1
    elif b == 2:
        _, pos = _string(v, pos + 1, n)
    else:
        return False
    # parent_seq (optional long)
    b = v[pos]
    if b == 0:
        pos += 1
    elif b == 2:
        _, pos = rl(v, pos + 1)
    else:
        return False
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
                _, pos = _string(v, pos, n)
                _, pos = _string(v, pos, n)
    # interleave (optional record: an optional long, two longs)
    b = v[pos]
    if b == 0:
        pos += 1
    elif b == 2:
        b = v[pos + 1]
        if b == 0:
            pos += 2
        elif b == 2:
            _, pos = rl(v, pos + 2)
        else:
            return False
        _, pos = rl(v, pos)
        _, pos = rl(v, pos)
    else:
        return False
    return pos == n


def _armed_v2(raw: bytes) -> bool:
    """Whether the walks are armed and ``raw`` starts with the v2 header (the prefix reads'
    check; :func:`peek_event`, once per raw event, has it inline)."""
    header = _header
    if header is None:
        header = _arm()
        if header is None:
            return False
    return raw.startswith(header)


def event_kind(raw: bytes) -> EventKind | None:
    """The kind of a v2 value, read from its first three fields; None means "ask fastavro".

    A prefix read, not a walk of the whole value: the archiver calls it on sealed values, which
    the sequencer walked in full before sealing them (and the chain covers their bytes). On a
    value fastavro reads, it gives fastavro's kind or None.
    """
    if not _armed_v2(raw):
        return None
    try:
        b = raw[10]  # run_id's length: one byte below 64
        if b & 0x81:
            n, p = read_long(raw, 10)
            if n < 0:
                return None
            p += n
        else:
            p = 11 + (b >> 1)
        q = p  # seq: skipped, at most 10 bytes
        while raw[q] & 0x80:
            q += 1
        if q - p > 9:
            return None
        b = raw[q + 1]
    except IndexError:
        return None
    if b & 0x81 or (b >> 1) >= len(_kinds):
        return None
    return _kinds[b >> 1]


def event_time(raw: bytes) -> int | None:
    """The ``at`` of a v1 value (µs), read from its first four fields; None: ask fastavro.

    The sequencer reads it for the first event of a run it does not know, to refuse a
    resend of a run finished longer ago than its horizon (docs/fleet.md). A prefix read:
    the caller has walked the whole value already.
    """
    if not _armed_v2(raw):
        return None
    try:
        n, p = read_long(raw, 10)  # run_id's length
        if n < 0:
            return None
        _seq, p = read_long(raw, p + n)
        _kind, p = read_long(raw, p)
        at, p = read_long(raw, p)
    except (IndexError, VarintError):
        return None
    return at
