"""Every hand-written v1 reader gives exactly what fastavro gives, or declines.

The oracle is ``fastavro.schemaless_reader`` with the published schema (as the codec reads it:
timestamps as integer micros), over values generated across the whole schema
(``fast_values.py``). On canonical values (what fastavro and our encoders write) every reader
must answer, and answer the same; on values a conforming writer may produce but we never do
(non-minimal varints, maps in negative-count blocks) and on corrupted values, a reader either
answers the same or declines, never differs.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime
from io import BytesIO
from typing import Any

import fastavro
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.schemas import fast_values as fv
from tracevault.archive._segment import encode_segment
from tracevault.schemas import EventKind, TraceEvent
from tracevault.schemas.fast import (
    event_kind,
    fast_decode_event,
    peek_event,
    sealed_columns,
    sealed_fields,
    sealed_rows,
    segment_rows,
)
from tracevault.services.archiver._sealed import parse_sealed

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _event_readers_agree(value: bytes, ref: dict[str, Any] | None, *, must_answer: bool) -> None:
    """Each TraceEvent reader answers ``ref`` (fastavro's record) or declines (None)."""
    full = fast_decode_event(value)
    peeked = peek_event(value)
    if must_answer:
        assert full is not None, "fast_decode_event declined a canonical value"
        assert peeked is not None, "peek_event declined a canonical value"
    if ref is None:
        assert full is None, "fast_decode_event read a value fastavro refuses"
        assert peeked is None, "peek_event read a value fastavro refuses"
        return
    if full is not None:
        assert type(full) is TraceEvent and type(full.kind) is EventKind
        assert full.to_avro() == ref
    if peeked is not None:
        assert tuple(peeked) == (
            ref["run_id"],
            ref["seq"],
            ref["kind"],
            ref["request"],
            ref["response"],
        )
        assert type(peeked.kind) is EventKind
    kind = event_kind(value)  # a prefix read: pinned on values fastavro reads
    assert kind == ref["kind"] or (kind is None and not must_answer)


def _sealed_readers_agree(value: bytes, ref: dict[str, Any] | None, *, must_answer: bool) -> None:
    got = sealed_fields(value)
    rows = sealed_rows([value])
    cols = sealed_columns([value])
    if must_answer:
        assert got is not None, "sealed_fields declined a canonical value"
        assert rows is not None, "sealed_rows declined a canonical value"
        assert cols is not None, "sealed_columns declined a canonical value"
    if ref is None:
        assert got is None, "sealed_fields read a value fastavro refuses"
        assert rows is None, "sealed_rows read a value fastavro refuses"
        assert cols is None, "sealed_columns read a value fastavro refuses"
        return
    if rows is not None:
        assert rows == [ref]
    if cols is not None:
        fields = ("run_id", "seq", "prev_hash", "hash", "raw")
        assert [c[0] for c in cols[:5]] == [ref[k] for k in fields]
        assert cols.events == [fast_decode_event(ref["raw"])]  # the walk's event is the reader's
    if got is not None:
        fields = ("run_id", "seq", "prev_hash", "hash", "raw", "sealed_at")
        assert got == tuple(ref[k] for k in fields)


@SETTINGS
@given(rec=fv.events)
def test_canonical_events_read_exactly_as_fastavro_reads_them(rec: dict[str, Any]) -> None:
    value = fv.canonical("TraceEvent", rec)
    ref = fv.reference("TraceEvent", value)
    assert ref is not None
    _event_readers_agree(value, ref, must_answer=True)


@SETTINGS
@given(rec=fv.events, rng=st.randoms(use_true_random=False))
def test_non_canonical_events_read_as_fastavro_reads_them_or_decline(
    rec: dict[str, Any], rng: random.Random
) -> None:
    value = fv.MAGIC + fv.version("TraceEvent").fingerprint + fv.Writer(rng).event(rec)
    ref = fv.reference("TraceEvent", value)
    assert ref is not None  # conforming Avro: fastavro reads it
    _event_readers_agree(value, ref, must_answer=False)


@SETTINGS
@given(rec=fv.events, rng=st.randoms(use_true_random=False), edits=st.integers(1, 4))
def test_corrupted_events_are_never_read_differently_from_fastavro(
    rec: dict[str, Any], rng: random.Random, edits: int
) -> None:
    value = bytearray(fv.Writer(rng, pad=0.1).event(rec))
    for _ in range(edits):
        action, i = rng.randrange(4), rng.randrange(len(value) + 1)
        if action == 0:
            del value[i:]
        elif action == 1 and i < len(value):
            value[i] ^= 1 << rng.randrange(8)
        elif action == 2:
            value[i:i] = bytes([rng.randrange(256)])
        else:
            value[i:i] = b"\x80" * rng.randint(1, 12)  # varint continuation bytes
    v = fv.MAGIC + fv.version("TraceEvent").fingerprint + bytes(value)
    ref = fv.reference("TraceEvent", v)
    full, peeked = fast_decode_event(v), peek_event(v)
    if ref is None:
        assert full is None and peeked is None
    else:
        assert full is None or full.to_avro() == ref
        assert peeked is None or tuple(peeked) == tuple(
            ref[k] for k in ("run_id", "seq", "kind", "request", "response")
        )


@SETTINGS
@given(rec=fv.sealed)
def test_canonical_sealed_values_read_exactly_as_fastavro_reads_them(rec: dict[str, Any]) -> None:
    value = fv.canonical("SealedEvent", rec)
    ref = fv.reference("SealedEvent", value)
    assert ref is not None
    _sealed_readers_agree(value, ref, must_answer=True)


@SETTINGS
@given(rec=fv.sealed, rng=st.randoms(use_true_random=False))
def test_non_canonical_sealed_values_read_as_fastavro_or_decline(
    rec: dict[str, Any], rng: random.Random
) -> None:
    value = fv.MAGIC + fv.version("SealedEvent").fingerprint + fv.Writer(rng).sealed(rec)
    ref = fv.reference("SealedEvent", value)
    assert ref is not None
    _sealed_readers_agree(value, ref, must_answer=False)
    # the archiver's parse (raw must then be an event): the fast fields, or the codec's reading
    rec = {**rec, "raw": fv.some_event_value()}
    value = fv.MAGIC + fv.version("SealedEvent").fingerprint + fv.Writer(rng).sealed(rec)
    ref = fv.reference("SealedEvent", value)
    assert ref is not None
    got = parse_sealed(value)
    assert got.finishes_run
    assert (got.run_id, got.seq, got.raw, got.sealed_at) == (
        ref["run_id"],
        ref["seq"],
        ref["raw"],
        ref["sealed_at"],
    )


@SETTINGS
@given(rec=fv.sealed, rng=st.randoms(use_true_random=False), cut=st.integers(1, 400))
def test_corrupted_sealed_values_are_never_read_differently_from_fastavro(
    rec: dict[str, Any], rng: random.Random, cut: int
) -> None:
    value = bytearray(fv.canonical("SealedEvent", rec))
    i = rng.randrange(10, len(value))
    if rng.random() < 0.5:
        value[i] ^= 1 << rng.randrange(8)
    else:
        del value[len(value) - min(cut, len(value) - 10) :]
    ref = fv.reference("SealedEvent", bytes(value))
    _sealed_readers_agree(bytes(value), ref, must_answer=False)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    recs=st.lists(fv.sealed, min_size=1, max_size=30),
    rng=st.randoms(use_true_random=False),
    pad=st.sampled_from([0.0, 0.3]),
)
def test_segment_rows_are_each_body_as_fastavro_reads_it(
    recs: list[dict[str, Any]], rng: random.Random, pad: float
) -> None:
    """The archiver's segment shape holding arbitrary rows (one run id or many)."""
    if rng.random() < 0.5:  # the usual shape: one run, one sequencer
        recs = [{**r, "run_id": recs[0]["run_id"], "sequencer_id": "s"} for r in recs]
    writer = fv.Writer(rng, pad=pad)
    bodies = [writer.sealed(r) for r in recs]
    data = encode_segment("run", 0, bodies)
    expected = [fv.reference("SealedEvent", fv.MAGIC + fv.version("SealedEvent").fingerprint + b)
                for b in bodies]  # fmt: skip
    rows = segment_rows(data)
    if pad == 0.0:
        assert rows is not None, "segment_rows declined an archiver-written segment"
    assert rows is None or rows == expected


@pytest.mark.parametrize("sealed_at", [2**48, 1_790_000_000_000_000, 2**55 - 1, 0, -1])
@settings(max_examples=20, deadline=None)
@example(n=1)
@given(n=st.integers(1, 200))
def test_segment_rows_match_fastavro_reading_the_container_file(sealed_at: int, n: int) -> None:
    """And the OCF framing: the same rows as fastavro's own container reader."""
    rng = random.Random(n)
    recs = [
        {
            "run_id": "rün-✓",
            "seq": s,
            "prev_hash": rng.randbytes(32),
            "hash": rng.randbytes(32),
            "raw": fv.some_event_value(),
            "sealed_at": sealed_at + s,
            "source_partition": s % 3,
            "source_offset": s * 977,
            "sequencer_id": "seq-1",
        }
        for s in range(8180, 8180 + n)
    ]
    data = encode_segment("rün-✓", 8180, [fv.canonical("SealedEvent", r)[10:] for r in recs])
    rows = segment_rows(data)
    by_fastavro = [
        {**r, "sealed_at": _micros(r["sealed_at"])} for r in fastavro.reader(BytesIO(data))
    ]
    assert rows == by_fastavro == recs


def _micros(dt: datetime) -> int:
    delta = dt - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


@pytest.mark.parametrize("varint", [b"\xff" * 9 + b"\x03", b"\xfe" * 9 + b"\x7f"])
def test_a_long_past_64_bits_is_declined_where_fastavro_drops_its_high_bits(varint: bytes) -> None:
    """A 10-byte varint with bits past 64: fastavro truncates, so the readers must decline."""
    w = fv.Writer(random.Random(0), pad=0.0, split=0.0)
    rec = {**fv._SOME_EVENT, "run_id": "r"}
    body = w.event(rec)
    assert body[:3] == b"\x02r\x00"  # run_id "r", then seq 0 (one byte)
    value = fv.MAGIC + fv.version("TraceEvent").fingerprint + body[:2] + varint + body[3:]
    ref = fv.reference("TraceEvent", value)
    assert ref is not None and -(2**63) <= ref["seq"] < 2**63  # what fastavro makes of it
    _event_readers_agree(value, ref, must_answer=False)
    sealed = dict.fromkeys(("seq", "sealed_at", "source_partition", "source_offset"), 0)
    sealed |= {"run_id": "r", "prev_hash": bytes(32), "hash": bytes(32), "raw": b""}
    sealed["sequencer_id"] = ""
    body = w.sealed(sealed)
    value = fv.MAGIC + fv.version("SealedEvent").fingerprint + body[:2] + varint + body[3:]
    ref = fv.reference("SealedEvent", value)
    assert ref is not None
    _sealed_readers_agree(value, ref, must_answer=False)
