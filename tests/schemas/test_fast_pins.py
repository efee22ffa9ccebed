"""A new schema version cannot silently turn a fast path off.

Every fast path mirrors one published version (its Pin). Publishing a newer version makes the
guard switch it off (correct: fastavro resolves old values into the new version, and a v1 walk
would not), so every value would quietly take the slow path. These tests fail then, saying
what to update.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.schemas import fast_values as fv
from tracevault.archive._segment import encode_segment
from tracevault.schemas import (
    SCHEMA_DIR,
    AgentInfo,
    Codec,
    EventKind,
    SchemaSet,
    TraceEvent,
    decode_event,
    default_schemas,
    encode_event,
)
from tracevault.schemas import _registry as registry
from tracevault.schemas.fast import (
    PINS,
    SEALED_EVENT_V1,
    TRACE_EVENT_V2,
    _event,
    _peek,
    _sealed,
    event_kind,
    fast_decode_event,
    peek_event,
    sealed_fields,
    segment_rows,
    stale,
)
from tracevault.schemas.fast._guard import armed_header


def test_every_pin_is_the_newest_published_version_of_its_record() -> None:
    for pin in PINS:
        why = stale(pin, default_schemas())
        assert why is None, why


def test_every_record_with_hand_written_readers_has_a_pin() -> None:
    assert {p.record for p in PINS} == {"TraceEvent", "SealedEvent"}


def _newest_event_value() -> bytes:
    """A TraceEvent written by fastavro with the newest published schema."""
    return fv.canonical("TraceEvent", fv._SOME_EVENT)


def test_values_of_the_newest_trace_event_schema_take_every_fast_path() -> None:
    value = _newest_event_value()
    hint = stale(TRACE_EVENT_V2, default_schemas()) or (
        f"update the walks in {TRACE_EVENT_V2.walks} to read TraceEvent "
        f"v{default_schemas().get('TraceEvent').version}"
    )
    assert fast_decode_event(value) is not None, f"fast_decode_event declined: {hint}"
    assert peek_event(value) is not None, f"peek_event declined: {hint}"
    assert event_kind(value) is EventKind.RUN_FINISHED, f"event_kind declined: {hint}"


def test_values_of_the_newest_sealed_event_schema_take_every_fast_path() -> None:
    rec = {
        "run_id": "r",
        "seq": 0,
        "prev_hash": bytes(32),
        "hash": bytes(32),
        "raw": _newest_event_value(),
        "sealed_at": 1_790_000_000_000_000,
        "source_partition": 0,
        "source_offset": 0,
        "sequencer_id": "s",
    }
    value = fv.canonical("SealedEvent", rec)
    hint = stale(SEALED_EVENT_V1, default_schemas()) or (
        f"update the walks in {SEALED_EVENT_V1.walks} to read SealedEvent "
        f"v{default_schemas().get('SealedEvent').version}"
    )
    assert sealed_fields(value) is not None, f"sealed_fields declined: {hint}"
    assert segment_rows(encode_segment("r", 0, [value[10:]])) is not None, (
        f"segment_rows declined an archiver-written segment: {hint}"
    )


@pytest.fixture
def trace_event_next(tmp_path: Path) -> SchemaSet:
    """The published schemas plus a TraceEvent v3 (v2 with one more optional field)."""
    for f in SCHEMA_DIR.glob("*.avsc"):
        shutil.copy(f, tmp_path / f.name)
    v3 = json.loads((SCHEMA_DIR / "TraceEvent.v2.avsc").read_text("utf-8"))
    v3["fields"].append({"name": "tenant", "type": ["null", "string"], "default": None})
    (tmp_path / "TraceEvent.v3.avsc").write_text(json.dumps(v3), "utf-8")
    return SchemaSet(tmp_path)


def test_a_new_version_is_reported_with_what_to_update(trace_event_next: SchemaSet) -> None:
    why = stale(TRACE_EVENT_V2, trace_event_next)
    assert why is not None
    assert "TraceEvent v3" in why and "tracevault/schemas/fast/_event.py" in why
    assert "pin them to fastavro" in why
    assert armed_header(TRACE_EVENT_V2, trace_event_next) is None
    assert stale(SEALED_EVENT_V1, trace_event_next) is None  # SealedEvent did not change


def test_under_a_new_version_the_v1_walks_decline_and_the_codec_reads(
    trace_event_next: SchemaSet, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the pins tests guard against: correct answers, every one from the slow path."""
    ev = TraceEvent("r", 3, EventKind.TOOL_CALL, 1, AgentInfo("a", "1", "h", "x", "0"), b"{}", b"1")
    v2_value = encode_event(ev)  # written with v2 before the switch
    monkeypatch.setattr(registry, "_DEFAULT", trace_event_next)
    monkeypatch.setattr(_event, "_header", None)
    monkeypatch.setattr(_peek, "_header", None)
    monkeypatch.setattr(_sealed, "_header", None)
    _event._arm.cache_clear()
    try:
        assert fast_decode_event(v2_value) is None
        assert peek_event(v2_value) is None
        assert event_kind(v2_value) is None
        # the codec (fastavro) still reads the v2 value, resolved into v3
        rec = Codec("TraceEvent", trace_event_next).decode(v2_value)
        assert rec["tenant"] is None and rec["seq"] == 3
    finally:
        _event._arm.cache_clear()
    monkeypatch.undo()
    assert decode_event(v2_value) == ev  # and with v2 current again, the fast path is back
    assert fast_decode_event(v2_value) == ev
