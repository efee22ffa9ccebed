"""A small demo, run as a user runs it, and its summary checked against the archive itself."""

from __future__ import annotations

from tests.stack.conftest import DemoRun
from tracevault.consumer.archive import list_runs, open_store, read_run_objects
from tracevault.consumer.archive.layout import FinalReceipt, final_key


def test_small_demo_summary_matches_the_archive(demo_run: DemoRun) -> None:
    summary, archive, tmp_path = demo_run.summary, demo_run.archive, demo_run.cwd

    assert summary["runs"] == 12 == len(summary["run_ids"])
    assert summary["failed_runs"] >= 1  # chargeback tickets fail by design
    assert summary["verified"] == {"archive": 3, "topic": 3}
    assert summary["replayed"] == {"archive": 3, "topic": 3}

    store = open_store(archive)
    try:
        listed = {r.run_id for r in list_runs(store)}
        assert listed == set(summary["run_ids"])
        archived_events = 0
        for run_id in summary["run_ids"]:
            final = FinalReceipt.from_json(store.get(final_key(run_id)))
            objects = read_run_objects(store, run_id)
            seqs = [ev.seq for seg in objects.segments for ev in seg.events()]
            assert seqs == list(range(final.count)), run_id
            archived_events += final.count
    finally:
        store.close()
    assert summary["events"] == summary["events_sealed"] == summary["events_archived"]
    assert summary["events_archived"] == archived_events
    # The services were stopped cleanly: their logs end without a traceback.
    for path in summary["logs"].values():
        assert "Traceback" not in (tmp_path / path).read_text()
