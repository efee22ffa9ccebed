"""Direct readers of TraceEvent v2 values: the replayer's full decode and the sequencer's peek.

fastavro's ``schemaless_reader`` costs ~9 µs per event and ``TraceEvent.from_avro`` then copies
the dict into the dataclass; replaying a 100,000-event run, or sealing one, would spend most of
its time there. The v2 layout is fixed (a published file is never edited), so these walks read
its fields straight from the bytes:

* :func:`fast_decode_event` reads every field into a :class:`TraceEvent` (the codec's
  ``decode_event`` and the replayer's rebuild), with the (usually single) agent record, run id
  and model of a run decoded once and shared;
* :func:`peek_event` reads every field but keeps only what sealing needs (run id, seq, kind,
  request, response), and validates the rest (bounds, UTF-8);
* :func:`event_kind` reads only the first three fields (the archiver, on sealed values).

The guard (``_guard.py``) arms them only while v2 is the newest published TraceEvent; each
walk checks the header, declines (returns None) on anything unusual or on an error in
``DECLINE``, and checks that it ended exactly at the end of the value. The caller then falls
back to fastavro. ``tests/schemas/test_fast_pinned.py`` pins each walk to
``fastavro.schemaless_reader`` with the published schema.

The walks are written out flat, with the common varint widths read inline (see
``_varint.py``): they run once per event and a Python call per field costs more than the rest
of the walk. The fields after ``response`` of the usual event (no error, idempotency key,
parent, attributes or interleave) are its last five bytes, all zero, and are taken at once;
any other tail is read by ``_tail``.
"""

from __future__ import annotations

import dataclasses
import struct
from functools import lru_cache
from typing import Any, NamedTuple

from tracevault.schemas._events import AgentInfo, ErrorInfo, EventKind, Interleave, TraceEvent
from tracevault.schemas._registry import default_schemas
from tracevault.schemas.fast._guard import DECLINE, TRACE_EVENT_V2, armed_header
from tracevault.schemas.fast._varint import CONT7, CONT8, VarintError, read_long

__all__ = [
    "Peeked",
    "event_kind",
    "event_time",
    "fast_decode_event",
    "peek_event",
    "with_content",
]

_AGENT_CACHE_MAX = 256
_agents: dict[bytes, AgentInfo] = {}
# The last run id and agent read, with their exact encodings (seeded with the empty ones,
# whose encodings they are, so a match is always a correct decode).
_last_run: tuple[bytes, str] = (b"\x00", "")
_last_model: tuple[bytes, str] = (b"\x00", "")
_last_agent: tuple[bytes, AgentInfo] = (b"\x00" * 5, AgentInfo("", "", "", "", ""))


_FIELDS = (
    "run_id", "seq", "kind", "at", "agent", "request", "response", "model", "seed", "error",
    "idempotency_key", "parent_seq", "attributes", "interleave",
)  # fmt: skip


def _layout_twin() -> Any:
    """A plain slotted class with TraceEvent's exact layout, when building through it is safe.

    A frozen dataclass's ``__init__`` stores each argument through ``object.__setattr__``
    (~2 µs for 14 fields on a shared core); even the slots' own setters cost ~1 µs. A plain
    class with the same ``__slots__`` takes the 14 stores as ordinary attribute stores (~0.2
    µs), and assigning ``__class__`` then makes the object a TraceEvent (CPython allows it
    between classes of identical layout): ``type(ev) is TraceEvent``, frozen from then on.
    Used only while TraceEvent is exactly the plain slotted dataclass of these fields with no
    ``__post_init__`` and the assignment works (checked here, once); otherwise events are
    built with the constructor.
    """
    names = tuple(f.name for f in dataclasses.fields(TraceEvent))
    if (
        names != _FIELDS
        or getattr(TraceEvent, "__slots__", None) != _FIELDS
        or hasattr(TraceEvent, "__post_init__")
    ):
        return None
    twin = type("_TraceEventLayout", (), {"__slots__": _FIELDS})
    try:
        probe: Any = object.__new__(twin)
        probe.__class__ = TraceEvent
    except TypeError:  # not the same layout after all
        return None
    return twin


_TWIN = _layout_twin()
_new = object.__new__
_u64 = struct.Struct("<Q").unpack_from


def with_content(ev: TraceEvent, request: bytes, response: bytes) -> TraceEvent:
    """``ev`` with other request and response bytes (an encrypted run's event opened), built
    as the walk builds events (:func:`_layout_twin`): a fifth of the constructor's time."""
    if _TWIN is None:
        return dataclasses.replace(ev, request=request, response=response)
    new = _new(_TWIN)
    new.run_id = ev.run_id
    new.seq = ev.seq
    new.kind = ev.kind
    new.at = ev.at
    new.agent = ev.agent
    new.request = request
    new.response = response
    new.model = ev.model
    new.seed = ev.seed
    new.error = ev.error
    new.idempotency_key = ev.idempotency_key
    new.parent_seq = ev.parent_seq
    new.attributes = ev.attributes
    new.interleave = ev.interleave
    new.__class__ = TraceEvent
    return new  # type: ignore[no-any-return]  # a TraceEvent now (see _layout_twin)


def _string(d: bytes, p: int, end: int) -> tuple[str, int]:
    n, p = read_long(d, p)
    q = p + n
    if n < 0 or q > end:
        raise IndexError("string runs past the value")
    return d[p:q].decode("utf-8"), q


def _agent(d: bytes, p: int, end: int) -> tuple[AgentInfo, int]:
    """The agent record at ``p``: the same bytes (one run, one agent) are decoded once."""
    global _last_agent  # noqa: PLW0603 - one tuple, replaced atomically
    start = p
    for _ in range(5):
        n, p = read_long(d, p)
        p += n
        if n < 0 or p > end:
            raise IndexError("agent string runs past the value")
    key = d[start:p]
    agent = _agents.get(key)
    if agent is None:
        q = start
        a_id, q = _string(d, q, end)
        a_ver, q = _string(d, q, end)
        host, q = _string(d, q, end)
        harness, q = _string(d, q, end)
        sdk, q = _string(d, q, end)
        agent = AgentInfo(a_id, a_ver, host, harness, sdk)
        if len(_agents) >= _AGENT_CACHE_MAX:
            _agents.clear()
        _agents[key] = agent
    _last_agent = (key, agent)
    return agent, p


_header: bytes | None = None  # C3 01 + the v2 fingerprint, once the guard armed the walks
_kinds: tuple[EventKind, ...] = ()


@lru_cache(maxsize=1)
def _arm() -> bytes | None:
    """The header v2 values start with, or None when the guard keeps the walks off."""
    global _header, _kinds  # noqa: PLW0603 - computed on first use, not at import
    header = armed_header(TRACE_EVENT_V2)
    if header is not None:
        _kinds = _kind_symbols()
        _header = header
    return header


def _kind_symbols() -> tuple[EventKind, ...]:
    """EventKind by enum index, as TraceEvent v2 lists its symbols."""
    v2 = default_schemas().get(TRACE_EVENT_V2.record, TRACE_EVENT_V2.version)
    (kind,) = (f for f in v2.source["fields"] if f["name"] == "kind")
    return tuple(EventKind(s) for s in kind["type"]["symbols"])


def fast_decode_event(data: object) -> TraceEvent | None:
    """``data`` as a TraceEvent if it is an ordinary v2 value read into v2, else None.

    One flat function on purpose: it runs once per event on every replay.
    """
    global _last_run, _last_model  # noqa: PLW0603 - see the caches above
    header = _header
    if header is None:
        header = _arm()
        if header is None:
            return None
    if type(data) is bytes:
        d = data
    elif isinstance(data, (bytearray, memoryview)):
        d = bytes(data)  # fastavro hands back bytes for ``bytes`` fields
    else:
        return None  # not a buffer: the codec reports it
    if not d.startswith(header):
        return None
    kinds = _kinds
    try:
        end = len(d)
        # run_id (string)
        rid_bytes, run_id = _last_run
        if d.startswith(rid_bytes, 10):  # the run's events share their run id
            q = 10 + len(rid_bytes)
        else:
            n, p = read_long(d, 10)
            q = p + n
            if n < 0 or q > end:
                return None
            run_id = d[p:q].decode("utf-8")
            _last_run = (d[10:q], run_id)
        # seq (long), kind (enum), at (long)
        # seq: a 1-3 byte varint, read byte by byte (cheaper than slicing a word)
        b = d[q]
        if b < 0x80:
            seq, p = (b >> 1) ^ -(b & 1), q + 1
        elif (c := d[q + 1]) < 0x80:
            z = (b & 0x7F) | c << 7
            seq, p = (z >> 1) ^ -(z & 1), q + 2
        elif (e := d[q + 2]) < 0x80:
            z = (b & 0x7F) | (c & 0x7F) << 7 | e << 14
            seq, p = (z >> 1) ^ -(z & 1), q + 3
        else:
            seq, p = read_long(d, q)
        b = d[p]
        if b & 1 or b >= 0x80 or (b >> 1) >= len(kinds):
            return None
        kind = kinds[b >> 1]
        # at: a timestamp in µs is an 8-byte varint from 1974 to 2540; read those in one go
        x = _u64(d, p + 1)[0] if p + 9 <= end else 0
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
            at = (z >> 1) ^ -(z & 1)
            p += 9
        else:
            at, p = read_long(d, p + 1)
        last_key, agent = _last_agent
        if d.startswith(last_key, p):  # Avro is prefix-free: the same bytes decode the same
            p += len(last_key)
        else:
            agent, p = _agent(d, p, end)
        # model: ["null", "string"]
        b = d[p]
        p += 1
        if b == 0:
            model = None
        elif b == 2:
            m_bytes, model = _last_model
            if d.startswith(m_bytes, p):  # a run calls few models
                p += len(m_bytes)
            else:
                model, q = _string(d, p, end)
                _last_model = (d[p:q], model)
                p = q
        else:
            return None
        # seed: ["null", "long"]
        b = d[p]
        p += 1
        if b == 0:
            seed = None
        elif b == 2:
            seed, p = read_long(d, p)
        else:
            return None
        # request, response (bytes): lengths below 8 KiB are 1-2 byte varints
        n = d[p]
        if n < 0x80:
            n = (n >> 1) ^ -(n & 1)
            p += 1
        elif d[p + 1] < 0x80:
            n = (n & 0x7F) | d[p + 1] << 7
            n = (n >> 1) ^ -(n & 1)
            p += 2
        else:
            n, p = read_long(d, p)
        q = p + n
        if n < 0 or q > end:
            return None
        request = d[p:q]
        n = d[q]
        if n < 0x80:
            n = (n >> 1) ^ -(n & 1)
            p = q + 1
        elif d[q + 1] < 0x80:
            n = (n & 0x7F) | d[q + 1] << 7
            n = (n >> 1) ^ -(n & 1)
            p = q + 2
        else:
            n, p = read_long(d, q)
        q = p + n
        if n < 0 or q > end:
            return None
        response = d[p:q]
        p = q
        if p == end - 5 and d.endswith(_NULL_TAIL):  # the usual event's last five bytes
            error = key = parent = interleave = None
            attributes: dict[str, str] = {}
        else:
            tail = _tail(d, p, end)
            if tail is None:
                return None
            error, key, parent, attributes, interleave = tail
        if _TWIN is None:
            return TraceEvent(
                run_id, seq, kind, at, agent, request, response, model, seed, error, key, parent,
                attributes, interleave,
            )  # fmt: skip
        ev = _new(_TWIN)
        ev.run_id = run_id
        ev.seq = seq
        ev.kind = kind
        ev.at = at
        ev.agent = agent
        ev.request = request
        ev.response = response
        ev.model = model
        ev.seed = seed
        ev.error = error
        ev.idempotency_key = key
        ev.parent_seq = parent
        ev.attributes = attributes
        ev.interleave = interleave
        ev.__class__ = TraceEvent
        return ev  # type: ignore[no-any-return]  # a TraceEvent now (see _layout_twin)
    except DECLINE:
        return None


_NULL_TAIL = b"\x00" * 5
"""error, idempotency_key, parent_seq null, an empty attributes map, interleave null."""


def _tail(
    d: bytes, p: int, end: int
) -> tuple[ErrorInfo | None, str | None, int | None, dict[str, str], Interleave | None] | None:
    """The fields after ``response`` (error .. interleave), read to exactly ``end``; None to
    decline. Called only when they are not the all-null five bytes."""
    # error: ["null", ErrorInfo]
    b = d[p]
    p += 1
    if b == 0:
        error = None
    elif b == 2:
        etype, p = _string(d, p, end)
        emsg, p = _string(d, p, end)
        error = ErrorInfo(etype, emsg)
    else:
        return None
    # idempotency_key: ["null", "string"]
    b = d[p]
    p += 1
    if b == 0:
        key = None
    elif b == 2:
        key, p = _string(d, p, end)
    else:
        return None
    # parent_seq: ["null", "long"]
    b = d[p]
    p += 1
    if b == 0:
        parent = None
    elif b == 2:
        parent, p = read_long(d, p)
    else:
        return None
    # attributes: map<string> in blocks, ended by a zero count
    attributes: dict[str, str] = {}
    if d[p] == 0:
        count, p = 0, p + 1
    else:
        count, p = read_long(d, p)
    while count:
        if count < 0:
            return None  # sized blocks: rare, left to the codec
        for _ in range(count):
            k, p = _string(d, p, end)
            attributes[k], p = _string(d, p, end)
        count, p = read_long(d, p)
    # interleave: ["null", Interleave(branch_prev ["null", long], long, long)]
    b = d[p]
    p += 1
    if b == 0:
        interleave = None
    elif b == 2:
        b = d[p]
        p += 1
        if b == 0:
            prev = None
        elif b == 2:
            prev, p = read_long(d, p)
        else:
            return None
        started, p = read_long(d, p)
        done, p = read_long(d, p)
        interleave = Interleave(prev, started, done)
    else:
        return None
    if p != end:
        return None
    return error, key, parent, attributes, interleave


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


def event_kind(raw: bytes) -> EventKind | None:
    """The kind of a v2 value, read from its first three fields; None means "ask fastavro".

    A prefix read, not a walk of the whole value: the archiver calls it on sealed values, which
    the sequencer walked in full before sealing them (and the chain covers their bytes). On a
    value fastavro reads, it gives fastavro's kind or None.
    """
    header = _header
    if header is None:
        header = _arm()
        if header is None:
            return None
    if not raw.startswith(header):
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
    header = _header
    if header is None:
        header = _arm()
        if header is None:
            return None
    if not raw.startswith(header):
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
