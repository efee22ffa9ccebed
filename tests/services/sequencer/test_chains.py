"""Many runs interleaved across partitions: every sealed chain equals the independent one."""

from __future__ import annotations

from collections.abc import Callable

from tests.services.sequencer.support import (
    assert_chain,
    interleaved_runs,
    produce_raw,
    read_all,
    running,
    sealed_by_run,
    sealed_count,
    wait_until,
)
from tracevault.config import Settings
from tracevault.heads import locate_run
from tracevault.kafka import partition_for


def test_interleaved_runs_are_sealed_into_their_chains(
    seq_settings: Callable[..., Settings],
) -> None:
    settings = seq_settings(partitions=3)
    items = interleaved_runs(40, 25)
    produce_raw(settings, [(run, value) for run, value in items])
    expected: dict[str, list[bytes]] = {}
    for run, value in items:
        expected.setdefault(run, []).append(value)

    with running(settings) as (seq, errors):
        wait_until(lambda: sealed_count(settings) >= len(items), timeout=60, what="all sealed")
        assert not errors
    runs = sealed_by_run(settings)
    assert set(runs) == set(expected)
    for run_id, recs in runs.items():
        part = partition_for(run_id, 3)
        assert {rec.partition for rec, _ in recs} == {part}, "sealed is co-partitioned with raw"
        assert_chain(run_id, [ev for _, ev in recs], expected[run_id])
        loc = locate_run(settings, run_id)
        assert loc is not None
        assert (loc.partition, loc.start_offset, loc.end_offset) == (
            part,
            recs[0][0].offset,
            recs[-1][0].offset,
        )
        assert loc.last_seq == 24 and loc.finished
    assert read_all(settings, settings.topics.dlq) == []
    snap = seq.metrics.snapshot()
    assert snap["tracevault_sequencer_sealed_total"] == len(items)
    assert snap["tracevault_sequencer_transactions_total{outcome=committed}"] >= 1
