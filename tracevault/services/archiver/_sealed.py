"""Reading just what the archiver needs from a sealed value, without a full decode.

The archiver touches every sealed event: a full ``decode_sealed`` plus ``decode_event`` costs
about 25 µs an event, more than writing the archive itself, and would halve throughput. Values
written with SealedEvent v1 while it is the current schema are read by the v1 fast path
(:func:`tracevault.schemas.fast.sealed_fields`); anything that reader declines goes through
the codec, so an older or newer schema is still read correctly, just slower, and a malformed
value is refused with the codec's precise error.
"""

from __future__ import annotations

from typing import NamedTuple

from tracevault.schemas import EventKind, decode_event, decode_sealed, encode_sealed
from tracevault.schemas.fast import event_kind, sealed_fields

__all__ = ["Sealed", "finishes_run", "leaf_fields", "parse_sealed"]

_HEADER = 10
_FINISHED = EventKind.RUN_FINISHED


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
    kind = event_kind(raw)
    if kind is None:  # not a plain v1 value: the codec reads it or names the problem
        kind = decode_event(raw, check_json=False).kind
    return kind is EventKind.RUN_FINISHED


def parse_sealed(value: bytes, *, what: str = "sealed event") -> Sealed:
    """The archiver's view of one ``<prefix>.sealed`` value; ``SchemaError`` if malformed."""
    fields = sealed_fields(value)
    if fields is None:  # another version, or unusual: the codec reads it or names the problem
        ev = decode_sealed(value, what=what)
        body = encode_sealed(ev)[_HEADER:]  # the current schema's body, as segments hold
        return Sealed(
            ev.run_id, ev.seq, ev.prev_hash, ev.hash, ev.raw, ev.sealed_at, body,
            finishes_run(ev.raw),
        )  # fmt: skip
    run_id, seq, prev, h, raw, sealed_at = fields
    kind = event_kind(raw)  # inline of finishes_run: this runs once per archived event
    fin = kind is _FINISHED if kind is not None else finishes_run(raw)
    return Sealed(run_id, seq, prev, h, raw, sealed_at, value[_HEADER:], fin)


def leaf_fields(value: bytes) -> tuple[str, int, bytes, bool, int]:
    """``(run_id, seq, hash, finishes_run, sealed_at)``: what the archiver's log needs of one
    sealed value, checked as ``parse_sealed`` checks it (``SchemaError`` if malformed) but
    without building a ``Sealed`` or copying the body (once per event, at 60k events/s)."""
    fields = sealed_fields(value)
    if fields is None:
        ev = parse_sealed(value)
        return ev.run_id, ev.seq, ev.hash, ev.finishes_run, ev.sealed_at
    run_id, seq, _prev, h, raw, sealed_at = fields
    kind = event_kind(raw)
    return run_id, seq, h, kind is _FINISHED if kind is not None else finishes_run(raw), sealed_at
