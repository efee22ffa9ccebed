"""The per-run rules, one by one (pure: the Kafka behaviour is in the other test files)."""

from __future__ import annotations

import json

import pytest

from tests.conftest import NOW_US
from tests.services.sequencer.support import raw_event
from tracevault.chain import genesis, link
from tracevault.heads import Head
from tracevault.kafka import partition_for
from tracevault.schemas import EventKind, decode_event
from tracevault.services.sequencer import BatchOutput, DlqReason, RunBook

PARTS = 3
RAW = "p.raw"


def book(history: dict[int, bytes] | None = None, gap_timeout_us: int = 1_000) -> RunBook:
    def loader(run_id: str, partition: int, first: int, last: int) -> dict[int, bytes]:
        assert history is not None, "history must not be needed here"
        return history

    return RunBook(
        raw_topic=RAW,
        partitions=PARTS,
        sequencer_id="test",
        gap_timeout_us=gap_timeout_us,
        max_gap=100,
        history=loader,
    )


def feed(b: RunBook, run: str, value: bytes | None, *, now: int = 0, key: bytes | None = None,
         partition: int | None = None, offset: int = 0) -> BatchOutput:  # fmt: skip
    out = BatchOutput()
    b.apply(
        out,
        key=run.encode() if key is None else key,
        value=value,
        partition=partition_for(run, PARTS) if partition is None else partition,
        offset=offset,
        now_us=NOW_US + now,
    )
    return out


def test_in_order_events_are_sealed_on_the_chain() -> None:
    b = book()
    prev = genesis("r")
    for seq in range(3):
        raw = raw_event("r", seq)
        out = feed(b, "r", raw)
        [s] = out.sealed
        assert (s.seq, s.prev_hash, s.hash, s.raw) == (seq, prev, link(prev, raw), raw)
        prev = s.hash
    assert b.runs["r"].next_seq == 3


def test_resent_duplicate_is_dropped_and_counted() -> None:
    b = book()
    first = raw_event("r", 0)
    feed(b, "r", first)
    feed(b, "r", raw_event("r", 1))
    out = feed(b, "r", first)
    assert (out.sealed, out.dlq, out.duplicates) == ([], [], 1)


def test_same_seq_with_other_bytes_is_a_conflict() -> None:
    b = book()
    feed(b, "r", raw_event("r", 0))
    out = feed(b, "r", raw_event("r", 0, note="-changed"), offset=42)
    [d] = out.dlq
    assert (d.reason, d.run_id, d.seq, d.source_offset) == (DlqReason.CONFLICT, "r", 0, 42)
    assert d.value == raw_event("r", 0, note="-changed")


def test_old_duplicate_after_restore_reads_the_sealed_history() -> None:
    r0, r1 = raw_event("r", 0), raw_event("r", 1)
    h0 = link(genesis("r"), r0)
    h1 = link(h0, r1)
    b = book(history={0: h0, 1: h1})
    b.restore([Head("r", 2, h1, False, partition_for("r", PARTS), 0, 1)])
    assert feed(b, "r", r0).duplicates == 1
    assert feed(b, "r", raw_event("r", 0, note="x")).dlq[0].reason is DlqReason.CONFLICT


def test_gap_is_held_then_filled_in_order() -> None:
    b = book()
    feed(b, "r", raw_event("r", 0))
    out = feed(b, "r", raw_event("r", 2))
    assert out.sealed == [] and b.runs["r"].held.keys() == {2}
    assert "r" in out.touched, "held events are persisted in the head"
    out = feed(b, "r", raw_event("r", 1))
    assert [s.seq for s in out.sealed] == [1, 2]
    assert not b.runs["r"].held


def test_held_duplicate_and_held_conflict() -> None:
    b = book()
    feed(b, "r", raw_event("r", 0))
    feed(b, "r", raw_event("r", 3))
    assert feed(b, "r", raw_event("r", 3)).duplicates == 1
    assert feed(b, "r", raw_event("r", 3, note="x")).dlq[0].reason is DlqReason.CONFLICT


def test_timed_out_gap_is_sealed_as_one_gap_marker_per_missing_seq() -> None:
    b = book(gap_timeout_us=1_000)
    feed(b, "r", raw_event("r", 0))
    feed(b, "r", raw_event("r", 4), now=10)
    out = BatchOutput()
    b.sweep(out, now_us=NOW_US + 500)
    assert out.sealed == [], "not yet timed out"
    b.sweep(out, now_us=NOW_US + 1_010)
    assert [s.seq for s in out.sealed] == [1, 2, 3, 4]
    assert out.gap_markers == 3
    for s in out.sealed[:3]:
        ev = decode_event(s.raw)
        assert ev.kind is EventKind.GAP and ev.seq == s.seq and ev.run_id == "r"
        assert json.loads(ev.request) == {"missing_from": 1, "missing_to": 3}
        assert ev.response == b"null"
        assert s.source_offset == -1
    # a late arrival of a GAP-covered seq goes to the DLQ as late
    assert feed(b, "r", raw_event("r", 2)).dlq[0].reason is DlqReason.LATE
    assert b.runs["r"].to_head(0, "t").gaps[0].missing_to == 3


def test_events_after_run_finished_go_to_the_dlq() -> None:
    b = book()
    feed(b, "r", raw_event("r", 0))
    feed(b, "r", raw_event("r", 1, last=1))
    assert b.runs["r"].finished
    out = feed(b, "r", raw_event("r", 2))
    assert out.dlq[0].reason is DlqReason.AFTER_FINISH
    # the finished run keeps the hashes a resent RUN_FINISHED needs
    assert feed(b, "r", raw_event("r", 1, last=1)).duplicates == 1


def test_held_events_past_a_finish_go_to_the_dlq_when_it_is_sealed() -> None:
    b = book()
    feed(b, "r", raw_event("r", 0))
    feed(b, "r", raw_event("r", 3), offset=30)
    out = feed(b, "r", raw_event("r", 1, last=1))
    assert [s.seq for s in out.sealed] == [1]
    [d] = out.dlq
    assert (d.reason, d.seq, d.source_offset) == (DlqReason.AFTER_FINISH, 3, 30)


def test_seq_too_far_ahead_is_out_of_range() -> None:
    b = book()
    assert feed(b, "r", raw_event("r", 101)).dlq[0].reason is DlqReason.OUT_OF_RANGE


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (b"not avro at all", DlqReason.UNDECODABLE),
        (b"\xc3\x01" + b"\x00" * 8 + b"body", DlqReason.UNDECODABLE),
        (None, DlqReason.UNDECODABLE),
        (raw_event("r", 0)[:-3], DlqReason.UNDECODABLE),
    ],
)
def test_undecodable_values(value: bytes | None, reason: DlqReason) -> None:
    out = feed(book(), "r", value, offset=7)
    [d] = out.dlq
    assert (d.reason, d.value, d.key, d.source_offset) == (reason, value, b"r", 7)


def test_invalid_events() -> None:
    b = book()
    good = raw_event("r", 0)
    assert feed(b, "r", good, key=b"other").dlq[0].reason is DlqReason.INVALID
    wrong = (partition_for("r", PARTS) + 1) % PARTS
    d = feed(b, "r", good, partition=wrong).dlq[0]
    assert d.reason is DlqReason.INVALID and "murmur2" in d.detail
    gap = raw_event("r", 0, kind=EventKind.GAP)
    assert feed(b, "r", gap).dlq[0].reason is DlqReason.INVALID
    neg = raw_event("r", -1)
    assert feed(b, "r", neg).dlq[0].reason is DlqReason.INVALID
    assert "r" not in b.runs or b.runs["r"].next_seq == 0


def test_dlq_headers_name_the_reason_and_the_source() -> None:
    d = feed(book(), "r", b"junk", offset=9).dlq[0]
    headers = dict(d.headers("seq-a"))
    assert headers["tracevault.reason"] == b"undecodable"
    assert headers["tracevault.source.topic"] == RAW.encode()
    assert headers["tracevault.source.offset"] == b"9"
    assert headers["tracevault.sequencer"] == b"seq-a"


def test_a_value_too_large_to_seal_is_invalid() -> None:
    from tracevault.schemas import AgentInfo, TraceEvent, canonical_json, encode_event

    big = encode_event(
        TraceEvent(
            "r", 0, EventKind.RUN_STARTED, 0, AgentInfo("a", "1", "h", "x", "0"),
            canonical_json({"input": "x" * 1_000_001}), b"null",
        )
    )  # fmt: skip
    d = feed(book(), "r", big).dlq[0]
    assert d.reason is DlqReason.INVALID and "1 MiB" in d.detail


def test_non_canonical_json_is_invalid() -> None:
    from tracevault.schemas import AgentInfo, TraceEvent, encode_event

    value = encode_event(
        TraceEvent(
            "r", 0, EventKind.RUN_STARTED, 0, AgentInfo("a", "1", "h", "x", "0"),
            b'{"b": 1, "a": 2}', b"null",
        )
    )  # fmt: skip
    d = feed(book(), "r", value).dlq[0]
    assert d.reason is DlqReason.INVALID and "canonical" in d.detail and "seq 0" in d.detail
