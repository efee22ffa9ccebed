"""Every DLQ reason and the GAP marker, end to end through the real broker."""

from __future__ import annotations

import json
from collections.abc import Callable

from tests.services.sequencer.support import (
    assert_chain,
    produce_raw,
    raw_event,
    read_all,
    running,
    sealed_by_run,
    wait_until,
)
from tracevault.config import Settings
from tracevault.heads import GapRange, locate_run, read_heads
from tracevault.kafka import partition_for
from tracevault.schemas import EventKind, decode_event


def test_each_dlq_reason_keeps_the_original_record_and_says_why(
    seq_settings: Callable[..., Settings],
) -> None:
    settings = seq_settings(partitions=3, sequencer_gap_timeout_s=1.0)
    wrong = (partition_for("wrong-part", 3) + 1) % 3
    first = [
        ("fin", raw_event("fin", 0)),
        ("fin", raw_event("fin", 1, last=1)),
        ("fin", raw_event("fin", 2)),  # after_finish
        ("fin", raw_event("fin", 0, note="-tampered")),  # conflict
        ("fin", raw_event("fin", 0)),  # duplicate: dropped, not DLQ
        ("junk", b"\x00\x01 definitely not avro"),  # undecodable
        ("not-the-run", raw_event("keyed-wrong", 0)),  # invalid (key != run_id)
        ("far", raw_event("far", 0)),
        ("far", raw_event("far", 50_000)),  # out_of_range (max_gap 10_000)
        ("late", raw_event("late", 0)),
        ("late", raw_event("late", 2)),  # gap at 1, sealed as GAP after 1 s
    ]
    where = produce_raw(settings, list(first))
    where += produce_raw(settings, [("wrong-part", raw_event("wrong-part", 0))], partition=wrong)
    expected = {
        "after_finish": 2,
        "conflict": 3,
        "undecodable": 5,
        "invalid": 6,
        "out_of_range": 8,
    }
    with running(settings) as (seq, errors):
        wait_until(
            lambda: "late" in sealed_by_run(settings) and len(sealed_by_run(settings)["late"]) == 3,
            timeout=30,
            what="the GAP of run 'late' to be sealed",
        )
        [(late_pos)] = produce_raw(settings, [("late", raw_event("late", 1))])  # late
        wait_until(
            lambda: len(read_all(settings, settings.topics.dlq)) == 7, timeout=30, what="7 DLQ"
        )
        assert not errors
    dlq = read_all(settings, settings.topics.dlq)
    by_reason: dict[str, list[object]] = {}
    for rec in dlq:
        reason = rec.headers["tracevault.reason"].decode()
        by_reason.setdefault(reason, []).append(rec)
        src_p = int(rec.headers["tracevault.source.partition"])
        src_o = int(rec.headers["tracevault.source.offset"])
        assert rec.headers["tracevault.source.topic"] == settings.topics.raw.encode()
        assert rec.partition == src_p, "DLQ keeps the source partition index"
        assert rec.headers["tracevault.detail"], "every refusal says why"
        if reason == "late":
            assert (src_p, src_o) == late_pos
            assert rec.value == raw_event("late", 1) and rec.key == b"late"
        elif reason == "invalid" and rec.key == b"wrong-part":
            assert (src_p, src_o) == where[-1]
            assert b"murmur2" in rec.headers["tracevault.detail"]
        else:
            i = expected[reason]
            assert (src_p, src_o) == where[i], reason
            key, value = first[i]
            assert (rec.key, rec.value) == (key.encode(), value), reason
    assert sorted(by_reason) == sorted(
        ["after_finish", "conflict", "invalid", "late", "out_of_range", "undecodable"]
    )
    assert len(by_reason["invalid"]) == 2
    snap = seq.metrics.snapshot()
    assert snap["tracevault_sequencer_duplicates_total"] == 1
    assert snap["tracevault_sequencer_dlq_total{reason=late}"] == 1
    assert snap["tracevault_sequencer_dlq_total{reason=invalid}"] == 2


def test_timed_out_gap_is_sealed_as_gap_markers_and_the_chain_stays_continuous(
    seq_settings: Callable[..., Settings],
) -> None:
    settings = seq_settings(partitions=2, sequencer_gap_timeout_s=1.0)
    raws = {s: raw_event("g", s, last=6) for s in range(7)}
    produce_raw(settings, [("g", raws[s]) for s in (0, 1, 4, 5, 6)])  # 2 and 3 never come
    with running(settings) as (seq, errors):
        wait_until(
            lambda: len(sealed_by_run(settings).get("g", [])) == 7, timeout=30, what="7 sealed"
        )
        assert not errors
    sealed = [ev for _, ev in sealed_by_run(settings)["g"]]
    assert_chain("g", sealed, None)
    for ev in sealed:
        decoded = decode_event(ev.raw)
        if ev.seq in (2, 3):
            assert decoded.kind is EventKind.GAP
            assert json.loads(decoded.request) == {"missing_from": 2, "missing_to": 3}
            assert decoded.agent.agent_id == "tracevault-sequencer"
            assert ev.source_offset == -1
        else:
            assert ev.raw == raws[ev.seq]
    loc = locate_run(settings, "g")
    assert loc is not None and loc.gaps == (GapRange(2, 3),) and loc.finished
    assert seq.metrics.snapshot()["tracevault_sequencer_gap_markers_total"] == 2


def test_held_events_survive_a_restart(seq_settings: Callable[..., Settings]) -> None:
    settings = seq_settings(partitions=2, sequencer_gap_timeout_s=60.0)
    part = partition_for("h", 2)
    raws = [raw_event("h", s, last=3) for s in range(4)]
    produce_raw(settings, [("h", raws[0]), ("h", raws[2]), ("h", raws[3])])
    with running(settings, "h1") as (_, errors):
        wait_until(
            lambda: [e.seq for e in read_heads(settings, [part]).get("h", _NO).held] == [2, 3],
            timeout=30,
            what="seqs 2, 3 held in the committed head",
        )
        assert not errors
    # The raw offsets of 2 and 3 are committed: only the head remembers them.
    produce_raw(settings, [("h", raws[1])])
    with running(settings, "h1") as (_, errors):  # a restart: same instance id
        wait_until(
            lambda: len(sealed_by_run(settings).get("h", [])) == 4, timeout=30, what="4 sealed"
        )
        assert not errors
    assert_chain("h", [ev for _, ev in sealed_by_run(settings)["h"]], raws)


class _Empty:
    held: tuple[object, ...] = ()


_NO = _Empty()


def test_old_resends_after_a_restart_are_checked_against_the_sealed_topic(
    seq_settings: Callable[..., Settings],
) -> None:
    settings = seq_settings(partitions=2)
    raws = [raw_event("old", s, last=4) for s in range(5)]
    produce_raw(settings, [("old", r) for r in raws])
    with running(settings, "o1") as (_, errors):
        wait_until(lambda: len(sealed_by_run(settings).get("old", [])) == 5, timeout=30, what="5")
        assert not errors
    # After a restart the sequencer knows only the run's head; an old seq must be looked up.
    tampered = raw_event("old", 2, note="-tampered")
    produce_raw(settings, [("old", raws[1]), ("old", tampered)])
    with running(settings, "o1") as (seq, errors):
        wait_until(
            lambda: len(read_all(settings, settings.topics.dlq)) == 1, timeout=30, what="DLQ"
        )
        wait_until(
            lambda: seq.metrics.snapshot()["tracevault_sequencer_duplicates_total"] == 1,
            timeout=30,
            what="the resent seq 1 counted as a duplicate",
        )
        assert not errors
    [rec] = read_all(settings, settings.topics.dlq)
    assert rec.headers["tracevault.reason"] == b"conflict" and rec.value == tampered
    assert_chain("old", [ev for _, ev in sealed_by_run(settings)["old"]], raws)
