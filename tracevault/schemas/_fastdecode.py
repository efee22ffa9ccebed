"""A direct reader for TraceEvent v1 bodies, for every reader's hot path.

fastavro's ``schemaless_reader`` costs ~9 µs per event and then ``TraceEvent.from_avro``
copies the dict into the dataclass; replaying a 100,000-event run spends most of its time
there. The v1 layout is fixed (the published file is never edited), so this module reads its
fields straight from the bytes into a :class:`TraceEvent`, with the (usually single) agent
record of a run decoded once and shared.

Safety, by construction:

* it is used only when the value's header is ``C3 01`` + the v1 fingerprint pinned below
  **and** v1 is the version the codec reads into (a newer schema means v1 values must be
  resolved, which is the codec's job);
* it returns ``None`` — and ``decode_event`` falls back to the fastavro codec, which raises
  the precise :mod:`tracevault.errors` error or returns what fastavro returns — on anything
  unusual: a truncated value, a negative length, a union or enum index outside the schema, a
  long outside 64 bits, invalid UTF-8, trailing bytes, a negative-count map block;
* ``tests/schemas/test_fastdecode.py`` pins it field for field to the codec over every
  optional-field combination and to the codec's error types over truncated and corrupted
  values.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from tracevault.schemas._binary import read_long
from tracevault.schemas._events import AgentInfo, ErrorInfo, EventKind, TraceEvent
from tracevault.schemas._registry import default_schemas

__all__ = ["V1_FINGERPRINT", "fast_decode_event"]

#: CRC-64-AVRO fingerprint of ``TraceEvent.v1.avsc``, the layout this reader mirrors.
V1_FINGERPRINT = bytes.fromhex("ec2e1f56534d0288")

_MAX = 1 << 63  # Avro longs are signed 64-bit
_CONT8 = 0x8080808080808080  # the continuation bits of 8 varint bytes, little-endian
_CONT7 = 0x0080808080808080  # ... set on the first 7 only: an 8-byte varint
_AGENT_CACHE_MAX = 256
_agents: dict[bytes, AgentInfo] = {}
# The last run id and agent read, with their exact encodings (seeded with the empty ones,
# whose encodings they are, so a match is always a correct decode).
_last_run: tuple[bytes, str] = (b"\x00", "")
_last_model: tuple[bytes, str] = (b"\x00", "")
_last_agent: tuple[bytes, AgentInfo] = (b"\x00" * 5, AgentInfo("", "", "", "", ""))


_FIELDS = (
    "run_id", "seq", "kind", "at", "agent", "request", "response", "model", "seed", "error",
    "idempotency_key", "parent_seq", "attributes",
)  # fmt: skip


def _slot_setters() -> tuple[Callable[[TraceEvent, Any], None], ...] | None:
    """The slot setters of TraceEvent's fields, when building it field by field is safe.

    A frozen dataclass's ``__init__`` stores each argument through ``object.__setattr__``
    (~1 µs for 13 fields); the slots' own setters do the same stores in half that. Used only
    while TraceEvent is exactly the plain slotted dataclass of these fields with no
    ``__post_init__`` (checked here); otherwise events are built with the constructor.
    """
    names = tuple(f.name for f in dataclasses.fields(TraceEvent))
    if (
        names != _FIELDS
        or getattr(TraceEvent, "__slots__", None) != _FIELDS
        or hasattr(TraceEvent, "__post_init__")
    ):
        return None
    return tuple(getattr(TraceEvent, n).__set__ for n in names)


_SET = _slot_setters()
_new = object.__new__


@lru_cache(maxsize=1)
def _layout() -> tuple[bytes, tuple[EventKind, ...]] | None:
    """(header to match, enum index -> EventKind), or None when v1 is not what we read into."""
    current = default_schemas().get("TraceEvent")
    if current.fingerprint != V1_FINGERPRINT:
        return None
    (kind,) = (f for f in current.source["fields"] if f["name"] == "kind")
    return b"\xc3\x01" + V1_FINGERPRINT, tuple(EventKind(s) for s in kind["type"]["symbols"])


def _long(buf: bytes, pos: int) -> tuple[int, int]:
    """``read_long``, but a value outside 64 bits (a 10-byte varint) raises ValueError."""
    b = buf[pos]
    pos += 1
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos
    n = b & 0x7F
    shift = 7
    while b & 0x80:
        b = buf[pos]
        pos += 1
        n |= (b & 0x7F) << shift
        shift += 7
    if shift > 63 and (shift > 70 or n >> 64):  # past 64 bits or 10 bytes: the codec judges
        raise ValueError("long outside 64 bits")
    return (n >> 1) ^ -(n & 1), pos


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


_header: bytes | None = None  # C3 01 + V1_FINGERPRINT once _layout() said v1 is current
_kinds: tuple[EventKind, ...] = ()


def fast_decode_event(data: object) -> TraceEvent | None:
    """``data`` as a TraceEvent if it is an ordinary v1 value read into v1, else None.

    One flat function on purpose: it runs once per event on every replay.
    """
    global _header, _kinds, _last_run, _last_model  # noqa: PLW0603 - see the caches above
    if _header is None:
        layout = _layout()
        if layout is None:
            return None
        _kinds = layout[1]
        _header = layout[0]
    if type(data) is bytes:
        d = data
    elif isinstance(data, (bytearray, memoryview)):
        d = bytes(data)  # fastavro hands back bytes for ``bytes`` fields
    else:
        return None  # not a buffer: the codec reports it
    if not d.startswith(_header):
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
        # seq: seqs and offsets are 1-3 byte varints, read in one go
        x = int.from_bytes(d[q : q + 3], "little")
        if not x & 0x80:
            seq, p = (x >> 1 & 0x3F) ^ -(x & 1), q + 1
        elif not x & 0x8000:
            z = (x & 0x7F) | (x >> 1 & 0x3F80)
            seq, p = (z >> 1) ^ -(z & 1), q + 2
        elif not x & 0x800000:
            z = (x & 0x7F) | (x >> 1 & 0x3F80) | (x >> 2 & 0x1FC000)
            seq, p = (z >> 1) ^ -(z & 1), q + 3
        else:
            seq, p = _long(d, q)
        b = d[p]
        if b & 1 or b >= 0x80 or (b >> 1) >= len(kinds):
            return None
        kind = kinds[b >> 1]
        # at: a timestamp in µs is an 8-byte varint from 1974 to 2540; read those in one go
        x = int.from_bytes(d[p + 1 : p + 9], "little")
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
            at = (z >> 1) ^ -(z & 1)
            p += 9
        else:
            at, p = _long(d, p + 1)
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
            seed, p = _long(d, p)
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
            parent, p = _long(d, p)
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
        if p != end:
            return None
        if _SET is None:
            return TraceEvent(
                run_id, seq, kind, at, agent, request, response, model, seed, error, key, parent,
                attributes,
            )  # fmt: skip
        ev = _new(TraceEvent)
        (s_run, s_seq, s_kind, s_at, s_agent, s_req, s_resp, s_model, s_seed, s_err, s_key,
         s_parent, s_attrs) = _SET  # fmt: skip
        s_run(ev, run_id)
        s_seq(ev, seq)
        s_kind(ev, kind)
        s_at(ev, at)
        s_agent(ev, agent)
        s_req(ev, request)
        s_resp(ev, response)
        s_model(ev, model)
        s_seed(ev, seed)
        s_err(ev, error)
        s_key(ev, key)
        s_parent(ev, parent)
        s_attrs(ev, attributes)
        return ev
    except (IndexError, ValueError):  # ValueError covers UnicodeDecodeError and VarintError
        return None
