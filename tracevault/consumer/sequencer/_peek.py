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

from typing import NamedTuple

from tracevault.schemas import MAGIC, EventKind, VarintError, default_schemas, read_long

__all__ = ["Peeked", "peek_event"]


class Peeked(NamedTuple):
    run_id: str
    seq: int
    kind: EventKind
    request: bytes
    response: bytes


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


def _opt_str(buf: bytes, pos: int) -> int:
    branch, pos = read_long(buf, pos)
    if branch == 1:
        _, pos = _str(buf, pos)
    elif branch != 0:
        raise _Bad
    return pos


def _opt_long(buf: bytes, pos: int) -> int:
    branch, pos = read_long(buf, pos)
    if branch == 1:
        _, pos = read_long(buf, pos)
    elif branch != 0:
        raise _Bad
    return pos


def peek_event(value: bytes) -> Peeked | None:
    """The fields the sequencer needs from a TraceEvent v1 value; None means "ask fastavro"."""
    header = _setup()
    if value[:10] != header:
        return None
    try:
        pos = 10
        run_id, pos = _str(value, pos)
        seq, pos = read_long(value, pos)
        kind_index, pos = read_long(value, pos)
        if not 0 <= kind_index < len(_KINDS):
            return None
        _, pos = read_long(value, pos)  # at
        for _ in range(5):  # agent: agent_id, agent_version, host, harness, sdk_version
            _, pos = _str(value, pos)
        pos = _opt_str(value, pos)  # model
        pos = _opt_long(value, pos)  # seed
        request, pos = _bytes(value, pos)
        response, pos = _bytes(value, pos)
        branch, pos = read_long(value, pos)  # error
        if branch == 1:
            _, pos = _str(value, pos)
            _, pos = _str(value, pos)
        elif branch != 0:
            return None
        pos = _opt_str(value, pos)  # idempotency_key
        pos = _opt_long(value, pos)  # parent_seq
        while True:  # attributes: map<string> in blocks
            count, pos = read_long(value, pos)
            if count == 0:
                break
            if count < 0:
                count = -count
                _, pos = read_long(value, pos)  # block size in bytes
            for _ in range(count):
                _, pos = _str(value, pos)
                _, pos = _str(value, pos)
        if pos != len(value):
            return None
    except (_Bad, IndexError, UnicodeDecodeError, VarintError):
        return None
    return Peeked(run_id, seq, _KINDS[kind_index], request, response)
