"""Reading just what the archiver needs from a sealed value, without a full decode.

The archiver touches every sealed event: a full ``decode_sealed`` plus ``decode_event`` costs
about 25 µs an event, more than writing the archive itself, and would halve throughput. For
values written with the current SealedEvent schema (the fingerprint is checked) the Avro body
is walked directly: the field order is fixed by the published ``SealedEvent.v1.avsc`` and the
walk checks that the record ends exactly where the value does. Anything else goes through the
codec, so an older or newer schema is still read correctly, just slower.
"""

from __future__ import annotations

from typing import NamedTuple

from tracevault.archive._segment import current_sealed_header
from tracevault.errors import SchemaError
from tracevault.schemas import (
    EventKind,
    VarintError,
    decode_event,
    decode_sealed,
    default_schemas,
    encode_sealed,
    read_long,
)

__all__ = ["Sealed", "finishes_run", "parse_sealed"]

_HEADER = 10


class Sealed(NamedTuple):
    """The fields the archiver routes, checks and indexes by, plus the Avro body it copies.

    A NamedTuple, not a frozen dataclass: one is built per archived event, and a frozen
    dataclass's ``__init__`` costs several times more.
    """

    run_id: str
    seq: int
    prev_hash: bytes
    hash: bytes
    raw: bytes
    sealed_at: int
    body: bytes
    finishes_run: bool
    """True when ``raw`` is the run's RUN_FINISHED event (see tracevault/edges.py)."""


def finishes_run(raw: bytes) -> bool:
    """True when the TraceEvent value ``raw`` is of kind RUN_FINISHED."""
    return _kind(raw) is EventKind.RUN_FINISHED


_SEALED_HEADER: bytes | None = None


def parse_sealed(value: bytes, *, what: str = "sealed event") -> Sealed:
    """The archiver's view of one ``<prefix>.sealed`` value; ``SchemaError`` if malformed."""
    global _SEALED_HEADER  # noqa: PLW0603 - built on first use, not at import
    if _SEALED_HEADER is None:
        _SEALED_HEADER = current_sealed_header()
    if value[:_HEADER] != _SEALED_HEADER:
        ev = decode_sealed(value, what=what)
        body = encode_sealed(ev)[_HEADER:]
        return Sealed(
            ev.run_id, ev.seq, ev.prev_hash, ev.hash, ev.raw, ev.sealed_at, body,
            finishes_run(ev.raw),
        )  # fmt: skip
    b = value
    # One-byte varints (lengths, small numbers) are decoded inline: this runs once per
    # archived event and Python function calls are most of its cost.
    try:
        x = b[10]
        if not x & 0x81:  # a length under 64 (odd: negative, read in full)
            n, p = x >> 1, 11
        else:
            n, p = read_long(b, 10)
        if n < 0:
            raise IndexError(f"run_id has a negative length {n}")
        run_id = b[p : p + n].decode()
        p += n
        x = b[p]
        if x < 0x80:
            seq, p = (x >> 1) ^ -(x & 1), p + 1
        else:
            seq, p = read_long(b, p)
        prev, h = b[p : p + 32], b[p + 32 : p + 64]
        p += 64
        x = b[p]
        if not x & 0x81:  # a length under 64 (odd: negative, read in full)
            m, p = x >> 1, p + 1
        else:
            m, p = read_long(b, p)
        if m < 0:  # checked here: m is reused for sequencer_id below
            raise IndexError(f"raw has a negative length {m}")
        raw = b[p : p + m]
        p += m
        sealed_at, p = read_long(b, p)
        if b[p] < 0x80:  # source_partition
            p += 1
        else:
            part, p = read_long(b, p)
            if not -(2**31) <= part < 2**31:  # an Avro int: a reader of the segment refuses more
                raise SchemaError(f"{what}: source_partition {part} is not a 32-bit int")
        _offset, p = read_long(b, p)
        # sequencer_id: copied into the segment as is, so it must be valid UTF-8 like run_id,
        # or the archived segment would not read back (found by tests/consumer/test_hostile_records)
        x = b[p]
        if not x & 0x81:  # a length under 64 (odd: negative, read in full)
            m, p = x >> 1, p + 1
        else:
            m, p = read_long(b, p)
        if m < 0 or p + m > len(b):
            raise IndexError("sequencer_id runs past the value")
        b[p : p + m].decode()
        p += m
    except (IndexError, UnicodeDecodeError, VarintError) as exc:
        raise SchemaError(f"{what} is truncated or malformed: {exc}") from exc
    if p != len(b) or len(h) != 32 or n < 0:
        raise SchemaError(
            f"{what} ({run_id!r} seq {seq}) does not end where its record does "
            f"({p} of {len(b)} bytes)"
        )
    return Sealed(run_id, seq, prev, h, raw, sealed_at, b[_HEADER:], _finishes(raw, b, n))


def _finishes(raw: bytes, sealed: bytes, n: int) -> bool:
    """``finishes_run(raw)``, reading the kind in place when raw is a TraceEvent v1 whose
    run id (its first field) is the sealed record's: ``sealed[10 : 11 + n]``."""
    header, _, finished = _event_v1()
    if n < 64 and raw[:_HEADER] == header and raw[10 : 11 + n] == sealed[10 : 11 + n]:
        q = 11 + n
        try:
            while raw[q] & 0x80:  # skip seq
                q += 1
            return raw[q + 1] == finished
        except (IndexError, VarintError):
            pass  # truncated: let the codec name the problem
    return finishes_run(raw)


_EVENT_V1: tuple[bytes, list[EventKind], int] | None = None


def _event_v1() -> tuple[bytes, list[EventKind], int]:
    """TraceEvent v1's single-object header, its kind symbols by enum index, and the one
    byte (zigzag of the index) that encodes RUN_FINISHED."""
    global _EVENT_V1  # noqa: PLW0603 - built on first use, not at import
    if _EVENT_V1 is None:
        v1 = default_schemas().get("TraceEvent", 1)
        kind = next(f for f in v1.source["fields"] if f["name"] == "kind")
        kinds = [EventKind(s) for s in kind["type"]["symbols"]]
        _EVENT_V1 = (b"\xc3\x01" + v1.fingerprint, kinds, 2 * kinds.index(EventKind.RUN_FINISHED))
    return _EVENT_V1


def _kind(raw: bytes) -> EventKind:
    header, kinds, _ = _event_v1()
    if raw[:_HEADER] == header:
        # TraceEvent v1 starts run_id (string), seq (long), kind (enum index).
        try:
            n, p = read_long(raw, _HEADER)
            _seq, p = read_long(raw, p + n)
            idx, _ = read_long(raw, p)
            return kinds[idx]
        except (IndexError, VarintError):
            pass  # let the codec produce the precise error
    return decode_event(raw, check_json=False).kind
