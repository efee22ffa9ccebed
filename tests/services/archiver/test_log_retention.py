"""Listing, retention report and purge on runs of the static-log layout (beside legacy ones)."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

from tests.services.archiver.sealed_factory import sealed_run, write_log_run, write_segment_objects
from tracevault.archive import ObjectStore, list_runs, purge, retention_report, runs_on_day
from tracevault.transparency import (
    Ed25519Signer,
)


def test_log_runs_are_listed_reported_and_never_purged_alone(store: ObjectStore) -> None:
    write_log_run(store, "tiled", 7, Ed25519Signer.generate("test-log"))
    write_segment_objects(store, sealed_run("legacy", 3))
    day = date(2026, 1, 1)
    assert {(r.run_id, r.events, r.complete) for r in list_runs(store, day=day)} == {
        ("tiled", 7, True)
    }
    assert {r.run_id for r in list_runs(store)} == {"tiled", "legacy"}
    assert runs_on_day(store, day) == ["tiled"]  # what `replay batch` and OTel export use
    (tiled,) = [r for r in retention_report(store) if r.run_id == "tiled"]
    assert not tiled.missing and not tiled.extra
    assert not tiled.problems, tiled.problems  # locked long enough, by the store's own lock
    assert {o.lock_mode for o in tiled.objects} == {store.lock_mode}
    # its objects state no retention of their own and the log is shared: purge keeps it
    report = purge(store, now=datetime.now(UTC) + timedelta(days=400), dry_run=True)
    assert "tiled" in report.kept and "tiled" not in report.deleted
