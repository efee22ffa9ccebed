"""Legal hold, purge after expiry (time injected) and the retention report, on both stores."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from unittest import mock

import pytest

from tests.consumer.archive.sealed_factory import sealed_values
from tracevault.archive import (
    ObjectStore,
    hold_run,
    list_run,
    list_runs,
    open_store,
    purge,
    read_run_objects,
    retention_report,
)
from tracevault.archive.layout import day_prefix
from tracevault.config import Settings
from tracevault.consumer.archive import ArchiveWriter
from tracevault.consumer.archive._sealed import parse_sealed
from tracevault.errors import ServiceUnavailableError

T0 = datetime(2020, 1, 1, tzinfo=UTC)


def _archive(store: ObjectStore, run_id: str, at: datetime, n: int = 12) -> None:
    writer = ArchiveWriter(store, clock=lambda: at)
    cur = writer.cursor(run_id)
    events = [parse_sealed(v) for v in sealed_values(run_id, n)]
    writer.write_segment(cur, events[: n // 2])
    writer.write_segment(cur, events[n // 2 :])


def test_purge_deletes_only_expired_unheld_runs_and_records_it(store: ObjectStore) -> None:
    _archive(store, "old-held", T0)
    _archive(store, "old", T0)
    _archive(store, "new", datetime.now(UTC))
    assert hold_run(store, "old-held", True) == 5
    before = {i.key for i in store.list("")}

    early = purge(store, now=T0 + timedelta(days=100))
    assert early.deleted == {} and early.record is None
    dry = purge(store, now=T0 + timedelta(days=200), dry_run=True)
    assert list(dry.deleted) == ["old"] and dry.record is None
    assert {i.key for i in store.list("")} == before

    report = purge(store, now=T0 + timedelta(days=200))
    assert list(report.deleted) == ["old"]
    assert report.deleted["old"][0] == "runs/old/final.receipt.json"  # final receipt first
    assert "legal hold" in report.kept["old-held"]
    assert "retained until" in report.kept["new"]
    assert [r.run_id for r in list_runs(store)] == ["new", "old-held"]
    assert "old" not in {k.key.rsplit("/", 1)[-1] for k in store.list("index/days/")}
    assert report.record is not None
    record = json.loads(store.get(report.record))
    assert sorted(record["deleted"]["old"]) == sorted(
        k for k in before if "/old/" in k or k.endswith("/old")
    )
    assert store.head(report.record).lock_mode == "COMPLIANCE"

    hold_run(store, "old-held", False)
    again = purge(store, now=T0 + timedelta(days=200))
    assert list(again.deleted) == ["old-held"]
    assert read_run_objects(store, "new").complete


def test_ls_by_day_and_by_id(store: ObjectStore) -> None:
    _archive(store, "r1", T0)
    _archive(store, "r2", T0, n=4)
    day = datetime(2026, 1, 1, tzinfo=UTC).date()  # sealed_at of the factory's events
    assert [i.key for i in store.list(day_prefix(day))] == [
        "index/days/2026-01-01/r1",
        "index/days/2026-01-01/r2",
    ]
    summaries = list_runs(store, day=day)
    assert [(s.run_id, s.segments, s.events, s.complete) for s in summaries] == [
        ("r1", 2, 12, True),
        ("r2", 2, 4, True),
    ]
    assert list_runs(store, run_id="r2") == summaries[1:]


def test_retention_report_shows_locks_and_flags_short_retention(store: ObjectStore) -> None:
    _archive(store, "good", datetime.now(UTC))
    store.put(
        "runs/short/final.receipt.json", b"{}", retain_until=datetime.now(UTC) + timedelta(days=30)
    )
    runs = {r.run_id: r for r in retention_report(store)}
    assert runs["good"].ok and len(runs["good"].objects) == 5
    assert {o.lock_mode for o in runs["good"].objects} == {"COMPLIANCE"}
    assert all(
        o.retention_days is not None and o.retention_days >= 183 for o in runs["good"].objects
    )
    assert not runs["short"].ok
    assert "under 183" in runs["short"].problems[0]


def test_retention_report_flags_a_file_whose_lock_was_reset(tmp_path: Path) -> None:
    store = open_store(f"file://{tmp_path}", Settings())
    _archive(store, "r", datetime.now(UTC))
    os.utime(tmp_path / "objects" / "runs" / "r" / "final.receipt.json")  # mtime = now
    (bad,) = retention_report(store)
    assert len(bad.problems) == 1
    assert bad.problems[0].startswith("runs/r/final.receipt.json: retained 0.0 days")


def test_a_purge_that_dies_half_way_leaves_no_complete_looking_run(store: ObjectStore) -> None:
    _archive(store, "doomed", T0)
    real_delete = store.delete
    calls = {"n": 0}

    def failing_delete(key: str, *, now: datetime | None = None) -> None:
        calls["n"] += 1
        if calls["n"] == 3:
            raise ServiceUnavailableError("object store went away mid-purge")
        real_delete(key, now=now)

    later = T0 + timedelta(days=200)
    with (
        mock.patch.object(store, "delete", autospec=True, side_effect=failing_delete),
        pytest.raises(ServiceUnavailableError),
    ):
        purge(store, now=later)
    assert not list_run(store, "doomed").has_final  # the final receipt went first
    assert len(store.list("purges/")) == 1  # the record was written before deleting
    report = purge(store, now=later)
    assert list(report.deleted) == ["doomed"]
    assert store.list("runs/") == [] and len(store.list("purges/")) == 2


def test_seconds_of_clock_skew_between_writer_and_store_are_not_short_retention(
    tmp_path: Path,
) -> None:
    # The writer's clock ran 2 s behind the store's (S3 stamps Last-Modified itself, in whole
    # seconds): 183 days by the writer's clock are not "under 183". An hour short is.
    store = open_store(f"file://{tmp_path}", Settings())
    now = datetime.now(UTC)
    store.put(
        "runs/skew/final.receipt.json", b"{}", retain_until=now + timedelta(days=183, seconds=-2)
    )
    store.put(
        "runs/short/final.receipt.json", b"{}", retain_until=now + timedelta(days=183, hours=-1)
    )
    runs = {r.run_id: r for r in retention_report(store)}
    assert runs["skew"].ok, runs["skew"].problems
    assert not runs["short"].ok
    assert "under 183" in runs["short"].problems[0]
