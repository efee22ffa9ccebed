"""The archiver's direct walk of sealed values agrees with the codec, and refuses bad bytes."""

from __future__ import annotations

import dataclasses

import pytest

from tests.services.archiver.sealed_factory import T0_MICROS, raw_event
from tracevault.chain import genesis, link
from tracevault.errors import SchemaError
from tracevault.schemas import EventKind, SealedEvent, decode_sealed, encode_sealed
from tracevault.services.archiver._sealed import finishes_run, parse_sealed


def _sealed(run_id: str, seq: int, kind: EventKind, **kw: object) -> SealedEvent:
    raw = raw_event(run_id, seq, kind)
    prev = genesis(run_id)
    values: dict[str, object] = {
        "run_id": run_id, "seq": seq, "prev_hash": prev, "hash": link(prev, raw), "raw": raw,
        "sealed_at": T0_MICROS, "source_partition": 2, "source_offset": 12345,
        "sequencer_id": "seq-1",
    }  # fmt: skip
    values.update(kw)
    return SealedEvent(**values)  # type: ignore[arg-type]


@pytest.mark.parametrize("run_id", ["r", "run-é-🙂", "x" * 63, "y" * 64, "z" * 300])
@pytest.mark.parametrize("seq", [0, 1, 63, 64, 8191, 8192, 2**40])
@pytest.mark.parametrize("kind", [EventKind.RUN_FINISHED, EventKind.TOOL_CALL, EventKind.GAP])
def test_parse_agrees_with_the_codec(run_id: str, seq: int, kind: EventKind) -> None:
    ev = _sealed(run_id, seq, kind)
    value = encode_sealed(ev)
    got = parse_sealed(value)
    want = decode_sealed(value)
    assert (got.run_id, got.seq, got.prev_hash, got.hash, got.raw, got.sealed_at) == (
        want.run_id, want.seq, want.prev_hash, want.hash, want.raw, want.sealed_at,
    )  # fmt: skip
    assert got.body == value[10:]
    assert got.finishes_run is (kind is EventKind.RUN_FINISHED) is finishes_run(ev.raw)


def test_transport_fields_of_any_size_are_walked() -> None:
    ev = _sealed("r", 5, EventKind.CLOCK, source_offset=-1, sequencer_id="s" * 200,
                 sealed_at=-(2**62), source_partition=2**31 - 1)  # fmt: skip
    assert parse_sealed(encode_sealed(ev)).sealed_at == -(2**62)


def test_a_raw_from_another_run_is_still_classified_by_the_codec() -> None:
    ev = dataclasses.replace(
        _sealed("a", 3, EventKind.TOOL_CALL), raw=raw_event("other", 3, EventKind.RUN_FINISHED)
    )
    assert parse_sealed(encode_sealed(ev)).finishes_run


@pytest.mark.parametrize("cut", [1, 20, 70, 200])
def test_truncated_values_are_refused(cut: int) -> None:
    value = encode_sealed(_sealed("r", 7, EventKind.TOOL_CALL))
    with pytest.raises(SchemaError):
        parse_sealed(value[:-cut])


def test_trailing_bytes_are_refused() -> None:
    value = encode_sealed(_sealed("r", 7, EventKind.TOOL_CALL))
    with pytest.raises(SchemaError, match="1 unexpected bytes after the SealedEvent record"):
        parse_sealed(value + b"\x00")


def test_a_value_that_is_not_a_sealed_event_is_refused_by_the_codec() -> None:
    with pytest.raises(SchemaError):
        parse_sealed(b"\xc3\x01" + b"\x00" * 8 + b"body")


def test_a_sequencer_id_that_is_not_utf8_is_refused() -> None:
    # The archiver copies the body into the segment: a bad string there made the archived
    # segment unreadable (found by tests/faults/test_hostile_records.py).
    from tests.faults.hostile import event_value, join, sealed_fields, sealed_header, with_field

    fields = sealed_fields("r", 0, event_value("r", 0, kind="RUN_STARTED"))
    assert parse_sealed(join(sealed_header(), fields)).run_id == "r"
    bad = join(sealed_header(), with_field(fields, "sequencer_id", b"\x02\xff"))
    with pytest.raises(SchemaError, match="malformed"):
        parse_sealed(bad)


def test_a_negative_raw_length_is_refused() -> None:
    from tests.faults.hostile import event_value, join, sealed_fields, sealed_header, varint

    fields = sealed_fields("r", 0, event_value("r", 0, kind="RUN_STARTED"))
    raw = next(f for f in fields if f.name == "raw")
    for n in (-1, -64, -(2**40)):
        bad = [
            f.__class__(f.name, f.kind, varint(n) + raw.data[1:]) if f is raw else f for f in fields
        ]
        with pytest.raises(SchemaError):
            parse_sealed(join(sealed_header(), bad))
