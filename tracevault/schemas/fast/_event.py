"""The direct reader of whole TraceEvent v2 values: the replayer's and the codec's decode.

fastavro's ``schemaless_reader`` costs ~9 µs per event and ``TraceEvent.from_avro`` then copies
the dict into the dataclass; replaying a 100,000-event run, or sealing one, would spend most of
its time there. The v2 layout is fixed (a published file is never edited), so these walks read
its fields straight from the bytes:

* :func:`fast_decode_event` reads every field into a :class:`TraceEvent` (the codec's
  ``decode_event`` and the replayer's rebuild), with the (usually single) agent record, run id
  and model of a run decoded once and shared.

The readers of parts of a value (the sequencer's peek, the archiver's kind, the first event's
time) are in ``_peek.py``; both modules arm under the same guard through :func:`_arm` here.

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
from typing import Any

from tracevault.schemas._events import AgentInfo, ErrorInfo, EventKind, Interleave, TraceEvent
from tracevault.schemas._registry import default_schemas
from tracevault.schemas.fast._guard import DECLINE, TRACE_EVENT_V2, armed_header
from tracevault.schemas.fast._varint import CONT7, CONT8, read_long

__all__ = ["fast_decode_event", "with_content"]

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
