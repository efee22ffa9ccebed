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

from functools import lru_cache

from tracevault.schemas._binary import read_long
from tracevault.schemas._events import AgentInfo, ErrorInfo, EventKind, TraceEvent
from tracevault.schemas._registry import default_schemas

__all__ = ["V1_FINGERPRINT", "fast_decode_event"]

#: CRC-64-AVRO fingerprint of ``TraceEvent.v1.avsc``, the layout this reader mirrors.
V1_FINGERPRINT = bytes.fromhex("ec2e1f56534d0288")

_MAX = 1 << 63  # Avro longs are signed 64-bit
_AGENT_CACHE_MAX = 256
_agents: dict[bytes, AgentInfo] = {}
# The last run id and agent read, with their exact encodings (seeded with the empty ones,
# whose encodings they are, so a match is always a correct decode).
_last_run: tuple[bytes, str] = (b"\x00", "")
_last_agent: tuple[bytes, AgentInfo] = (b"\x00" * 5, AgentInfo("", "", "", "", ""))


@lru_cache(maxsize=1)
def _layout() -> tuple[bytes, tuple[EventKind, ...]] | None:
    """(header to match, enum index -> EventKind), or None when v1 is not what we read into."""
    current = default_schemas().get("TraceEvent")
    if current.fingerprint != V1_FINGERPRINT:
        return None
    (kind,) = (f for f in current.source["fields"] if f["name"] == "kind")
    return b"\xc3\x01" + V1_FINGERPRINT, tuple(EventKind(s) for s in kind["type"]["symbols"])


def _string(d: bytes, p: int, end: int) -> tuple[str, int]:
    n, p = read_long(d, p)
    q = p + n
    if n < 0 or q > end:
        raise IndexError("string runs past the value")
    return d[p:q].decode("utf-8"), q


def _agent(d: bytes, p: int, end: int) -> tuple[AgentInfo, int]:
    """The agent record at ``p``: the same bytes (one run, one agent) are decoded once."""
    global _last_agent  # noqa: PLW0603 - one tuple, replaced atomically
    last_key, last = _last_agent
    if d.startswith(last_key, p):  # Avro is prefix-free: the same bytes decode the same
        return last, p + len(last_key)
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


def fast_decode_event(data: bytes) -> TraceEvent | None:
    """``data`` as a TraceEvent if it is an ordinary v1 value read into v1, else None."""
    layout = _layout()
    if layout is None or data[:10] != layout[0]:
        return None
    if type(data) is not bytes:  # fastavro hands back bytes for ``bytes`` fields
        data = bytes(data)
    try:
        return _decode(data, layout[1])
    except (IndexError, ValueError):  # ValueError covers UnicodeDecodeError and VarintError
        return None


def _decode(d: bytes, kinds: tuple[EventKind, ...]) -> TraceEvent | None:
    end = len(d)
    # run_id (string)
    global _last_run  # noqa: PLW0603 - one tuple, replaced atomically
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
    seq, p = read_long(d, q)
    if not -_MAX <= seq < _MAX:
        return None
    b = d[p]
    if b & 1 or b >= 0x80 or (b >> 1) >= len(kinds):
        return None
    kind = kinds[b >> 1]
    at, p = read_long(d, p + 1)
    if not -_MAX <= at < _MAX:
        return None
    agent, p = _agent(d, p, end)
    # model: ["null", "string"]
    b = d[p]
    p += 1
    if b == 0:
        model = None
    elif b == 2:
        model, p = _string(d, p, end)
    else:
        return None
    # seed: ["null", "long"]
    b = d[p]
    p += 1
    if b == 0:
        seed = None
    elif b == 2:
        seed, p = read_long(d, p)
        if not -_MAX <= seed < _MAX:
            return None
    else:
        return None
    # request, response (bytes)
    n, p = read_long(d, p)
    q = p + n
    if n < 0 or q > end:
        return None
    request = d[p:q]
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
        parent, p = read_long(d, p)
        if not -_MAX <= parent < _MAX:
            return None
    else:
        return None
    # attributes: map<string> in blocks, ended by a zero count
    attributes: dict[str, str] = {}
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
    return TraceEvent(
        run_id, seq, kind, at, agent, request, response, model, seed, error, key, parent, attributes
    )
