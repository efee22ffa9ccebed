"""The rules' slow path: values the fast peek declines, and failures nobody foresaw.

Issue 10, item 1: a valid TraceEvent v1 whose ``model`` union index is a non-minimal varint
is declined by ``peek_event`` and read by the codec; with a non-canonical request it reached
a handler that formatted ``seq`` before it was assigned, and the ``UnboundLocalError`` stopped
the sequencer on that record at every restart.
"""

from __future__ import annotations

import pytest

from tests.conftest import NOW_US
from tests.faults.hostile import (
    event_fields,
    event_value,
    join,
    the_item1_record,
    trace_header,
    with_field,
)
from tests.services.sequencer.support import raw_event
from tracevault.chain import genesis, link
from tracevault.errors import SchemaError, ServiceUnavailableError
from tracevault.heads import Head, HeldEvent
from tracevault.heads._record import encode_head
from tracevault.kafka import partition_for
from tracevault.runid import RUN_ID_RULE
from tracevault.schemas import decode_event
from tracevault.schemas.fast import peek_event
from tracevault.services.sequencer import BatchOutput, DlqReason, RunBook
from tracevault.services.sequencer._rules import MAX_GAP_RANGES

PARTS = 3
RAW = "p.raw"


def book(history: object = None, max_gap: int = 100) -> RunBook:
    def loader(run_id: str, partition: int, first: int, last: int) -> dict[int, bytes]:
        if isinstance(history, BaseException):
            raise history
        assert isinstance(history, dict), "history must not be needed here"
        return history

    return RunBook(
        raw_topic=RAW,
        partitions=PARTS,
        sequencer_id="test",
        gap_timeout_us=1_000,
        max_gap=max_gap,
        history=loader,
    )


def feed(b: RunBook, run: str, value: bytes, offset: int = 0, now: int = 0) -> BatchOutput:
    out = BatchOutput()
    b.apply(out, run.encode(), value, partition_for(run, PARTS), offset, NOW_US + now)
    return out


def test_the_item1_record_goes_to_the_dlq_as_invalid_naming_run_and_seq() -> None:
    value = the_item1_record("r", 0)
    assert peek_event(value) is None, "the fast peek must decline it (the fallback path)"
    assert decode_event(value, check_json=False).run_id == "r", "it is valid Avro"
    b = book()
    out = feed(b, "r", value, offset=7)
    [d] = out.dlq
    assert (d.reason, d.run_id, d.seq, d.source_offset) == (DlqReason.INVALID, "r", 0, 7)
    assert "p.raw[" in d.detail and "@7 seq 0" in d.detail and "request" in d.detail
    assert "not canonical" in d.detail
    assert d.value == value and out.sealed == []
    # and the run goes on: the good seq 0 is sealed right after it
    good = raw_event("r", 0)
    [s] = feed(b, "r", good, offset=8).sealed
    assert (s.seq, s.hash) == (0, link(genesis("r"), good))


def test_a_non_canonical_response_on_the_fallback_path_is_named_too() -> None:
    fields = event_fields("r", 0, response=b'{"z":1,"a":2}')
    value = join(trace_header(), with_field(fields, "seed", b"\x80\x80\x00"))
    assert peek_event(value) is None
    [d] = feed(book(), "r", value).dlq
    assert d.reason is DlqReason.INVALID and "response" in d.detail and d.seq == 0


def test_a_valid_value_the_peek_declines_is_sealed_through_the_codec() -> None:
    b = book()
    for seq in range(3):
        fields = event_fields("r", seq, kind="RUN_STARTED" if seq == 0 else "TOOL_CALL")
        value = join(trace_header(), with_field(fields, "idempotency_key", b"\x80\x00"))
        assert peek_event(value) is None
        [s] = feed(b, "r", value, offset=seq).sealed
        assert s.seq == seq and s.raw == value
    assert b.runs["r"].next_seq == 3


def test_a_truncated_value_on_the_fallback_path_is_undecodable() -> None:
    value = the_item1_record("r", 0)[:-3]
    [d] = feed(book(), "r", value).dlq
    assert d.reason is DlqReason.UNDECODABLE and d.detail


def test_an_unreadable_sealed_history_sends_the_resent_event_to_the_dlq_as_internal() -> None:
    # A resent old seq needs the run's sealed history; a corrupt sealed record there is no
    # reason to stop: the resent event waits in the DLQ, the exception named.
    r0, r1 = raw_event("r", 0), raw_event("r", 1)
    h1 = link(link(genesis("r"), r0), r1)
    b = book(history=SchemaError("sealed event is truncated"))
    b.restore([Head("r", 2, h1, False, partition_for("r", PARTS), 0, 1)])
    out = feed(b, "r", r0, offset=9)
    [d] = out.dlq
    assert (d.reason, d.source_offset, d.value) == (DlqReason.INTERNAL, 9, r0)
    assert "SchemaError" in d.detail and "truncated" in d.detail
    [s] = feed(b, "r", raw_event("r", 2), offset=10).sealed
    assert (s.seq, s.prev_hash) == (2, h1), "the run goes on from its head"


def test_a_broker_outage_while_reading_history_is_not_the_records_fault() -> None:
    b = book(history=ServiceUnavailableError("broker down"))
    r0 = raw_event("r", 0)
    b.restore([Head("r", 2, b"\x01" * 32, False, partition_for("r", PARTS), 0, 1)])
    with pytest.raises(ServiceUnavailableError):
        feed(b, "r", r0)


def test_held_bytes_that_no_longer_decode_go_to_the_dlq_and_the_run_goes_on() -> None:
    # Held events come back from the heads topic; one whose bytes no longer decode (a heads
    # record written by someone else) must not stop the drain behind it.
    p = partition_for("r", PARTS)
    r0 = raw_event("r", 0)
    head = Head("r", 0, genesis("r"), False, p, held=(HeldEvent(1, b"\xc3\x01junk", p, 4, 0),))
    b = book()
    b.restore([head])
    out = feed(b, "r", r0, offset=5)
    assert [s.seq for s in out.sealed] == [0]
    [d] = out.dlq
    assert (d.reason, d.seq, d.source_offset) == (DlqReason.INTERNAL, 1, 4)
    assert not b.runs["r"].held
    [s] = feed(b, "r", raw_event("r", 1), offset=6).sealed
    assert s.seq == 1


def test_json_nested_past_the_recursion_limit_is_invalid_not_a_crash() -> None:
    # json.loads raised RecursionError out of the rules: one record stopped the sequencer.
    value = join(trace_header(), event_fields("r", 0, request=b"[" * 1500 + b"]" * 1500))
    [d] = feed(book(), "r", value).dlq
    assert (d.reason, d.seq, d.run_id) == (DlqReason.INVALID, 0, "r")
    assert "nested deeper" in d.detail


@pytest.mark.parametrize(
    "run_id", ["", "x" * 256, "é" * 128, ".", "..", "中" * 85, "x" * 129, "a/b", "a b"]
)
def test_a_run_id_the_recorder_would_refuse_is_invalid(run_id: str) -> None:
    # An empty run id was sealed, and the archiver then stopped on it (no valid archive path);
    # ".", ".." and 85 CJK characters were sealed and then wedged the partition's archive.
    key = run_id.encode()
    out = BatchOutput()
    book().apply(
        out, key, event_value(run_id, 0, kind="RUN_STARTED"), partition_for(key, PARTS), 0, NOW_US
    )
    [d] = out.dlq
    assert d.reason is DlqReason.INVALID and RUN_ID_RULE in d.detail


def test_a_run_sending_every_other_seq_cannot_grow_its_head_past_one_kafka_record(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Every other seq, ~140-byte events: each held event past 256 KB closed one gap, and each
    # sealed gap range grew the head (20,000 events made a 384 KB head; ~50,000 passed 1 MB,
    # and then every transaction of the partition failed on the heads record).
    caplog.set_level("ERROR")  # one warning per gap closed is not what this test reads
    b = book(max_gap=10_000)
    p = partition_for("g", PARTS)
    out = BatchOutput()
    b.apply(out, b"g", event_value("g", 0, kind="RUN_STARTED"), p, 0, NOW_US)
    pad = b'"' + b"x" * 80 + b'"'
    n = 12_000
    for i in range(1, n + 1):
        b.apply(out, b"g", event_value("g", 2 * i, request=pad), p, i, NOW_US)
    run = b.runs["g"]
    assert len(run.gaps) <= MAX_GAP_RANGES
    assert len(encode_head(run.to_head(0, "t"))) < 600_000
    refused = [d for d in out.dlq if d.reason is DlqReason.OUT_OF_RANGE]
    assert refused and "sealed gaps" in refused[0].detail
    sealed = [s for s in out.sealed if s.source_offset >= 0]
    assert len(sealed) + len(out.dlq) + len(run.held) == n + 1, "every record accounted for"


def test_a_large_event_held_behind_a_second_hole_does_not_stay_held() -> None:
    # One close used to leave it held: a head carrying ~900 KB plus everything else.
    b = book()
    p = partition_for("r", PARTS)
    out = BatchOutput()
    b.apply(out, b"r", raw_event("r", 0), p, 0, NOW_US)
    b.apply(out, b"r", event_value("r", 5, request=b'"' + b"x" * 200_000 + b'"'), p, 1, NOW_US)
    b.apply(out, b"r", event_value("r", 9, request=b'"' + b"y" * 900_000 + b'"'), p, 2, NOW_US)
    run = b.runs["r"]
    assert not run.held and run.next_seq == 10
    assert [s.seq for s in out.sealed if s.source_offset >= 0] == [0, 5, 9]
