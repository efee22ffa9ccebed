"""A fleet over six months (docs/fleet.md): state bounded by open runs plus a horizon.

Pure rules first (the run book alone), then the real sequencer on the real broker: finished
runs leave memory and come back from chunks at a restart, are forgotten after the horizon
(measured through the state metrics), never get a second chain, and idle runs are closed.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from tests.conftest import NOW_US
from tests.services.sequencer.support import (
    produce_raw,
    raw_event,
    read_all,
    running,
    sealed_by_run,
    wait_until,
)
from tracevault.chain import genesis, link
from tracevault.config import Settings
from tracevault.heads import FinishedChunk, fingerprint, is_finished_key, locate_run
from tracevault.kafka import partition_for
from tracevault.schemas import EventKind, decode_event
from tracevault.services.sequencer import BatchOutput, DlqReason, RunBook

PARTS = 3
HOUR_US = 3_600_000_000


def _book(history: dict[int, bytes]) -> RunBook:
    return RunBook(
        raw_topic="p.raw",
        partitions=PARTS,
        sequencer_id="t",
        gap_timeout_us=1_000_000,
        max_gap=100,
        history=lambda run, part, first, last: history,
        horizon_us=2 * HOUR_US,
        skew_us=60_000_000,
        idle_close_us=HOUR_US,
    )


def _feed(b: RunBook, run: str, value: bytes, now: int) -> BatchOutput:
    out = BatchOutput()
    b.apply(out, run.encode(), value, partition_for(run, PARTS), 0, now)
    return out


def test_a_finished_run_leaves_the_book_and_its_resends_are_judged_from_the_compact_set() -> None:
    raws = [raw_event("r", s, last=2) for s in range(3)]
    hashes, prev = {}, genesis("r")
    for s, raw in enumerate(raws):
        prev = hashes[s] = link(prev, raw)
    b = _book(hashes)
    now = NOW_US
    out = BatchOutput()
    for raw in raws:
        b.apply(out, b"r", raw, partition_for("r", PARTS), 0, now)
    assert list(out.finished) == ["r"]
    cid = b.finished.new_chunk(b"\x00fin/x", partition_for("r", PARTS), now)
    b.retire(out, {partition_for("r", PARTS): cid})
    assert "r" not in b.runs and len(b.finished) == 1
    b.finished.seal()
    assert b.finished.nbytes <= 64, "at most 64 bytes per finished run"
    assert _feed(b, "r", raws[1], now).duplicates == 1
    assert _feed(b, "r", raw_event("r", 1, note="x"), now).dlq[0].reason is DlqReason.CONFLICT
    assert _feed(b, "r", raw_event("r", 3), now).dlq[0].reason is DlqReason.AFTER_FINISH
    assert _feed(b, "r", raws[0], now).sealed == [], "seq 0 again never starts a second chain"
    # past the horizon (and the skew) the run is forgotten and its chunk is to be deleted
    out = BatchOutput()
    b.sweep(out, now + 2 * HOUR_US + 60_000_001)
    assert out.expired == [(b"\x00fin/x", partition_for("r", PARTS))]
    assert len(b.finished) == 0 and b.finished.nbytes == 0
    # ... and a resend, which carries its old recording time, is stale: no second chain
    late = _feed(b, "r", raws[0], now + 2 * HOUR_US + 60_000_001)
    assert late.sealed == [] and late.dlq[0].reason is DlqReason.STALE
    assert "finished-run horizon" in late.dlq[0].detail


def test_an_unknown_runs_event_from_the_future_is_refused_with_its_skew() -> None:
    b = _book({})
    out = _feed(b, "f", raw_event("f", 0, at=NOW_US + HOUR_US), NOW_US)
    assert out.sealed == [] and out.dlq[0].reason is DlqReason.INVALID
    assert "in the future" in out.dlq[0].detail


def test_an_idle_run_is_closed_with_a_sequencer_marker_after_its_gap() -> None:
    b = _book({})
    _feed(b, "i", raw_event("i", 0), NOW_US)
    _feed(b, "i", raw_event("i", 2), NOW_US)  # held behind a gap at seq 1
    out = BatchOutput()
    b.close_idle(out, NOW_US + HOUR_US - 1)
    assert out.sealed == []
    b.close_idle(out, NOW_US + HOUR_US + 1)
    kinds = [decode_event(s.raw).kind for s in out.sealed]
    assert [s.seq for s in out.sealed] == [1, 2, 3]
    assert kinds == [EventKind.GAP, EventKind.TOOL_CALL, EventKind.RUN_FINISHED]
    marker = decode_event(out.sealed[-1].raw)
    assert marker.error is not None and marker.error.type == "RunAbandoned"
    assert marker.attributes["tracevault.closed"] == "idle"
    assert list(out.finished) == ["i"] and out.closed_idle == 1


def _metric(seq: object, name: str) -> float:
    return seq.metrics.snapshot().get(name, -1.0)  # type: ignore[attr-defined]


def test_finished_runs_leave_memory_survive_a_restart_and_go_after_the_horizon(
    seq_settings: Callable[..., Settings],
) -> None:
    settings = seq_settings(
        spool_max_age_s=1.0,
        sequencer_clock_skew_s=1.0,
        sequencer_finished_horizon_s=8.0,
        sequencer_gap_timeout_s=2.0,
    )
    now = time.time_ns() // 1000
    runs = [f"fin-{i}" for i in range(20)]
    raws = {r: [raw_event(r, s, last=2, at=now + s) for s in range(3)] for r in runs}
    produce_raw(settings, [(r, v) for r in runs for v in raws[r]])
    open_run = "open-1"
    produce_raw(settings, [(open_run, raw_event(open_run, 0, at=now))])
    fin = "tracevault_sequencer_runs{state=finished}"
    opened = "tracevault_sequencer_runs{state=open}"
    with running(settings, "fleet-1") as (seq, errors):
        wait_until(lambda: _metric(seq, fin) == 20, timeout=60, what="20 finished runs")
        assert _metric(seq, opened) == 1, "only the open run keeps a run object"
        assert _metric(seq, "tracevault_sequencer_finished_state_bytes") > 0
        assert not errors
    # their heads are tombstoned and the chunks hold them: locate_run still finds one
    loc = locate_run(settings, runs[0])
    assert loc is not None and loc.finished and loc.last_seq == 2
    # a restart restores them from the chunks, and a resend is still a duplicate
    produce_raw(settings, [(runs[0], raws[runs[0]][1]), (runs[1], raws[runs[1]][0])])
    with running(settings, "fleet-1") as (seq, errors):
        wait_until(
            lambda: _metric(seq, "tracevault_sequencer_duplicates_total") == 2,
            timeout=60,
            what="the resends dropped as duplicates after a restart",
        )
        assert _metric(seq, fin) == 20
        # after the horizon (8 s + 1 s skew) they are forgotten: the state metric says so
        wait_until(lambda: _metric(seq, fin) == 0, timeout=60, what="finished runs forgotten")
        assert _metric(seq, "tracevault_sequencer_finished_state_bytes") == 0
        # a resend now is stale (it carries its recording time): still no second chain
        produce_raw(settings, [(runs[2], raws[runs[2]][0])])
        wait_until(
            lambda: _metric(seq, "tracevault_sequencer_dlq_total{reason=stale}") == 1,
            timeout=60,
            what="the late resend refused as stale",
        )
        assert not errors
    sealed = sealed_by_run(settings)
    for r in runs:
        assert [e.seq for _, e in sealed[r]] == [0, 1, 2], f"{r}: exactly one chain"
    heads = read_all(settings, settings.topics.heads)
    chunk_keys = {h.key for h in heads if is_finished_key(h.key) and h.value is not None}
    assert chunk_keys, "finished runs were written as chunks"
    deleted = {h.key for h in heads if is_finished_key(h.key) and h.value is None}
    assert chunk_keys <= deleted, "every chunk past the horizon is tombstoned"
    chunk = FinishedChunk.decode(next(h.value for h in heads if h.key in chunk_keys and h.value))
    assert set(chunk.fingerprints) <= {fingerprint(r) for r in runs}


def test_an_idle_open_run_is_closed_by_the_real_sequencer(
    seq_settings: Callable[..., Settings],
) -> None:
    settings = seq_settings(sequencer_idle_close_s=1.0)
    run = "idle-1"
    produce_raw(settings, [(run, raw_event(run, 0, at=time.time_ns() // 1000))])
    with running(settings, "idle-1") as (seq, errors):
        wait_until(
            lambda: _metric(seq, "tracevault_sequencer_closed_idle_total") == 1,
            timeout=60,
            what="the idle run closed",
        )
        assert not errors
    events = [e for _, e in sealed_by_run(settings)[run]]
    assert [e.seq for e in events] == [0, 1]
    marker = decode_event(events[1].raw)
    assert marker.kind is EventKind.RUN_FINISHED and marker.error is not None
    assert marker.error.type == "RunAbandoned"
    # a late event of the closed run is refused, not sealed (its seq holds the marker)
    produce_raw(settings, [(run, raw_event(run, 1, at=time.time_ns() // 1000))])
    with running(settings, "idle-1") as (seq, errors):
        wait_until(
            lambda: _metric(seq, "tracevault_sequencer_dlq_total{reason=conflict}") == 1,
            timeout=60,
            what="the late event refused",
        )
    assert len(sealed_by_run(settings)[run]) == 2
