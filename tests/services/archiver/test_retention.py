"""Legal hold, purge, and the retention report, on both stores.

Retention facts come from the receipts (content), never from the store's metadata alone
(docs/design.md, "Archive"). Every object is written with the real clock, so every
retain-until is in the future, as real S3 and MinIO require; expiry is tested by injecting
``now`` on our side. On S3 the server's own clock still holds the lock, so there a purge past
the receipts' retain-until is *refused by the store*, which the tests assert.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from unittest import mock

import boto3
import pytest
from click.testing import CliRunner

from tests.services.archiver.sealed_factory import sealed_run, sealed_values
from tracevault.archive import (
    ObjectStore,
    encode_segment,
    hold_run,
    list_run,
    list_runs,
    open_store,
    purge,
    read_run_objects,
    retention_report,
    sealed_body,
)
from tracevault.archive._filestore import FileStore
from tracevault.archive.layout import (
    FinalReceipt,
    SegmentReceipt,
    day_prefix,
    final_key,
    receipt_key,
    segment_key,
)
from tracevault.cli import tracevault
from tracevault.config import Settings
from tracevault.errors import ServiceUnavailableError
from tracevault.replayer import verify
from tracevault.replayer.load.archive import load_from_archive
from tracevault.schemas import encode_sealed
from tracevault.services.archiver import ArchiveWriter
from tracevault.services.archiver._sealed import parse_sealed


def _later() -> datetime:
    """Past a 183-day retention, before a 400-day one: taken when the purge needs it, not at
    import (on a loaded CI, minutes before the objects are written)."""
    return datetime.now(UTC) + timedelta(days=200)


def _archive(
    store: ObjectStore, run_id: str, n: int = 12, *, retention_days: int = 183
) -> list[str]:
    writer = ArchiveWriter(store, retention_days=retention_days)
    cur = writer.cursor(run_id)
    events = [parse_sealed(v) for v in sealed_values(run_id, n)]
    return [
        writer.write_segment(cur, events[: n // 2]),
        writer.write_segment(cur, events[n // 2 :]),
    ]


def _on_s3(store: ObjectStore) -> bool:
    return store.url.startswith("s3://")


def _objects(tmp_path: Path) -> Path:
    return tmp_path / "objects"


def _file(tmp_path: Path, key: str) -> Path:
    """The file of ``key`` in the file store (runs share shard directories)."""
    return FileStore(tmp_path).path_of(key)


def _run_files(tmp_path: Path, run_id: str) -> list[Path]:
    fs = FileStore(tmp_path)
    return [fs.path_of(i.key) for i in fs.list(f"runs/{run_id}/")]


def test_purge_deletes_only_expired_unheld_runs_and_records_it(store: ObjectStore) -> None:
    _archive(store, "old-held")
    _archive(store, "old")
    _archive(store, "new", retention_days=400)
    assert len(hold_run(store, "old-held", True).objects) == 5
    before = {i.key for i in store.list("")}

    early = purge(store, now=datetime.now(UTC) + timedelta(days=100))
    assert early.deleted == {} and early.record is None
    dry = purge(store, now=_later(), dry_run=True)
    assert list(dry.deleted) == ["old"] and dry.record is None
    assert dry.deleted["old"][0] == "runs/old/final.receipt.json"  # final receipt first
    assert "legal hold" in dry.kept["old-held"]
    assert "retained until" in dry.kept["new"]
    assert {i.key for i in store.list("")} == before

    report = purge(store, now=_later())
    assert report.record is not None
    assert store.head(report.record).lock_mode == "COMPLIANCE"
    if _on_s3(store):
        # Our clock says expired; the server's says locked for 183 days more. It refuses,
        # the report says so in a second record, and nothing is gone.
        assert report.deleted == {} and "store's clock" in report.refused["old"]
        assert report.record.endswith("-refused.json")
        assert json.loads(store.get(report.record))["refused"].keys() == {"old"}
        assert len(store.list("purges/")) == 2
        assert before <= {i.key for i in store.list("")}
        return
    assert list(report.deleted) == ["old"] and report.refused == {}
    assert [r.run_id for r in list_runs(store)] == ["new", "old-held"]
    assert "old" not in {k.key.rsplit("/", 1)[-1] for k in store.list("index/days/")}
    record = json.loads(store.get(report.record))
    assert sorted(record["deleted"]["old"]) == sorted(
        k for k in before if "/old/" in k or k.endswith("/old")
    )
    hold_run(store, "old-held", False)
    again = purge(store, now=_later())
    assert list(again.deleted) == ["old-held"]
    assert read_run_objects(store, "new").complete


def _touch_run(tmp_path: Path, run_id: str, at: datetime) -> None:
    """``touch -d``: set every object's mtime (the file store's lock) to ``at``."""
    ts = at.timestamp()
    for path in _run_files(tmp_path, run_id):
        os.utime(path, (ts, ts))
    for path in (_objects(tmp_path) / "index" / "days").glob(f"*/{run_id}"):
        os.utime(path, (ts, ts))


def test_touching_the_files_cannot_make_purge_delete_a_fresh_run(tmp_path: Path) -> None:
    # The attack: a run archived minutes ago, its files' mtimes set to 2020, then purge.
    store = open_store(f"file://{tmp_path}", Settings())
    _archive(store, "fresh")
    before = {i.key for i in store.list("")}
    _touch_run(tmp_path, "fresh", datetime(2020, 1, 1, tzinfo=UTC))

    report = purge(store)
    assert report.deleted == {} and report.record is None
    assert "disagree" in report.kept["fresh"] and "runs/fresh/" in report.kept["fresh"]
    assert {i.key for i in store.list("")} == before
    assert read_run_objects(store, "fresh").complete

    (run,) = retention_report(store)
    assert not run.ok
    assert {o.key for o in run.objects if any("disagree" in p for p in o.problems)} == {
        i.key for i in store.list("runs/fresh/")
    }

    result = CliRunner().invoke(tracevault, ["archive", "purge", "--archive", store.url, "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["deleted"] == {}
    assert {i.key for i in store.list("")} == before


def test_editing_a_receipts_retention_as_well_is_caught_by_its_written_at(tmp_path: Path) -> None:
    # A thorough attacker rewrites the receipts too (retain-until and written-at in 2019/2020),
    # then sets the mtimes to match. The store's ctime of the rewritten receipts gives it away.
    store = open_store(f"file://{tmp_path}", Settings())
    _archive(store, "fresh", n=4)
    forged_at, forged_until = "2019-06-01T00:00:00+00:00", "2020-01-01T00:00:00+00:00"
    for path in [p for p in _run_files(tmp_path, "fresh") if p.name.endswith(".json")]:
        path.chmod(0o644)
        receipt = json.loads(path.read_bytes())
        receipt.update(created_at=forged_at, retain_until=forged_until)
        path.write_bytes(json.dumps(receipt, sort_keys=True, separators=(",", ":")).encode())
    _touch_run(tmp_path, "fresh", datetime(2020, 1, 1, tzinfo=UTC))
    report = purge(store)
    assert report.deleted == {} and "disagree" in report.kept["fresh"]
    (run,) = retention_report(store)
    assert any("written at 2019-06-01" in p for p in run.problems)


def _old_receipt(obj: object, drop: str = "retain_until") -> bytes:
    """A version-1 receipt: what archivers before retain-until-in-receipts wrote."""
    d = json.loads(obj.to_json())  # type: ignore[attr-defined]
    del d[drop]
    d["version"] = 1
    return json.dumps(d, sort_keys=True, separators=(",", ":")).encode()


def _write_old_run(store: ObjectStore, run_id: str, days: int) -> datetime:
    """Write a version-1 run locked ``days`` days from now; return its retain-until. Its
    written-at is taken here, at the write, as an archiver takes it: the report compares it
    with the store's own write time (docs/design.md, "Archive")."""
    now = datetime.now(UTC)
    until = now + timedelta(days=days)
    events = sealed_run(run_id, 4)
    data = encode_segment(run_id, 0, [sealed_body(encode_sealed(e)) for e in events])
    key = segment_key(run_id, 0, 3)
    store.put(key, data, retain_until=until)
    created = now.isoformat()
    receipt = SegmentReceipt(
        run_id, key, hashlib.sha256(data).hexdigest(), 0, 3, 4,
        events[0].prev_hash.hex(), events[-1].hash.hex(), created,
    )  # fmt: skip
    store.put(receipt_key(run_id, 0, 3), _old_receipt(receipt), retain_until=until)
    final = FinalReceipt(run_id, 4, 3, events[-1].hash.hex(), [key], created)
    store.put(final_key(run_id), _old_receipt(final), retain_until=until)
    store.put(day_prefix(now.date()) + run_id, b"", retain_until=until)
    return until


def test_old_receipts_without_retain_until_read_and_purge_by_the_safe_rule(
    store: ObjectStore,
) -> None:
    # Rule: a version-1 receipt promises written-at + the configured retention (>= 183 days),
    # as a lower bound; a store lock shorter than that is a disagreement, a longer one holds.
    until = _write_old_run(store, "v1", 183)
    _write_old_run(store, "v1-long", 365)
    run = read_run_objects(store, "v1")
    assert run.complete and run.segments[0].receipt.retain_until == ""
    assert run.final is not None and run.final.version == 1
    assert verify(load_from_archive(store, "v1")).finished  # and they verify as before
    runs = {r.run_id: r for r in retention_report(store)}
    assert runs["v1"].ok, runs["v1"].problems
    assert runs["v1-long"].ok, runs["v1-long"].problems
    assert {o.stated_until for o in runs["v1"].objects} == {until.isoformat()}

    dry = purge(store, now=datetime.now(UTC) + timedelta(days=184), dry_run=True)
    assert list(dry.deleted) == ["v1"]
    assert "retained until" in dry.kept["v1-long"]  # the longer store lock holds


def test_an_old_run_whose_lock_was_shortened_is_refused(tmp_path: Path) -> None:
    store = open_store(f"file://{tmp_path}", Settings())
    _write_old_run(store, "v1", 183)
    _touch_run(tmp_path, "v1", datetime(2020, 1, 1, tzinfo=UTC))
    report = purge(store)
    assert report.deleted == {} and "shortened" in report.kept["v1"]


def test_ls_by_day_and_by_id(store: ObjectStore) -> None:
    _archive(store, "r1")
    _archive(store, "r2", n=4)
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


def test_retention_report_shows_locks_and_agreement(store: ObjectStore) -> None:
    _archive(store, "good")
    (good,) = retention_report(store)
    assert good.ok, good.problems
    assert len(good.objects) == 5
    assert {o.lock_mode for o in good.objects} == {"COMPLIANCE"}
    assert all(o.retention_days is not None and o.retention_days >= 182.99 for o in good.objects)
    assert all(o.stated_until is not None for o in good.objects)
    assert (good.missing, good.extra, good.delete_markers, good.extra_versions) == ([], [], [], [])


def test_retention_report_flags_a_file_whose_lock_was_reset(tmp_path: Path) -> None:
    store = open_store(f"file://{tmp_path}", Settings())
    _archive(store, "r")
    os.utime(_file(tmp_path, "runs/r/final.receipt.json"))  # mtime = now
    (bad,) = retention_report(store)
    assert len(bad.problems) == 1
    assert bad.problems[0].startswith("runs/r/final.receipt.json: the store's lock ends")
    assert "disagree" in bad.problems[0]


def test_a_purge_that_dies_half_way_leaves_no_complete_looking_run(tmp_path: Path) -> None:
    # file:// only: on S3 the server refuses to delete a lock in force, so no purge starts.
    store = open_store(f"file://{tmp_path}", Settings())
    _archive(store, "doomed")
    real_delete = store.delete
    calls = {"n": 0}

    def failing_delete(key: str, *, now: datetime | None = None) -> None:
        calls["n"] += 1
        if calls["n"] == 3:
            raise ServiceUnavailableError("object store went away mid-purge")
        real_delete(key, now=now)

    with (
        mock.patch.object(store, "delete", autospec=True, side_effect=failing_delete),
        pytest.raises(ServiceUnavailableError),
    ):
        purge(store, now=_later())
    assert not list_run(store, "doomed").has_final  # the final receipt went first
    assert len(store.list("purges/")) == 1  # the record was written before deleting
    report = purge(store, now=_later())
    assert list(report.deleted) == ["doomed"]
    assert store.list("runs/") == [] and len(store.list("purges/")) == 2


def test_seconds_of_clock_skew_between_writer_and_store_are_not_short_retention(
    tmp_path: Path,
) -> None:
    # The writer's clock ran 2 s behind the store's: 183 days by the writer's clock are not
    # "under 183", and its written-at is not "disagreeing" with the store's ctime.
    store = open_store(f"file://{tmp_path}", Settings())
    writer = ArchiveWriter(store, clock=lambda: datetime.now(UTC) - timedelta(seconds=2))
    cur = writer.cursor("skew")
    writer.write_segment(cur, [parse_sealed(v) for v in sealed_values("skew", 3)])
    (run,) = retention_report(store)
    assert run.ok, run.problems


def test_a_receipt_stating_a_short_retention_is_flagged(tmp_path: Path) -> None:
    store = open_store(f"file://{tmp_path}", Settings())
    _archive(store, "r", n=4)
    now = datetime.now(UTC)
    short = now + timedelta(days=183, hours=-1)
    fr = FinalReceipt("r", 4, 3, "00" * 32, [], now.isoformat(), short.isoformat())
    store.put("runs/short/final.receipt.json", fr.to_json(), retain_until=short)
    runs = {r.run_id: r for r in retention_report(store)}
    assert any("under 183" in p for p in runs["short"].problems)


# -- the report checks each run against its final receipt and the day index ---------------


def _report_cli(url: str, *extra: str) -> tuple[int, dict[str, dict[str, object]]]:
    result = CliRunner().invoke(
        tracevault, ["archive", "retention-report", "--archive", url, "--json", *extra]
    )
    return result.exit_code, {r["run_id"]: r for r in json.loads(result.stdout)}


def test_report_names_a_deleted_segment_and_exits_1(tmp_path: Path) -> None:
    store = open_store(f"file://{tmp_path}", Settings())
    _archive(store, "ok")
    first, _ = _archive(store, "broken")
    os.remove(_file(tmp_path, first))
    code, runs = _report_cli(store.url)
    assert code == 1
    assert runs["ok"]["ok"] is True
    assert runs["broken"]["ok"] is False and runs["broken"]["missing"] == [first]


def test_report_names_a_run_whose_every_object_was_deleted(tmp_path: Path) -> None:
    store = open_store(f"file://{tmp_path}", Settings())
    _archive(store, "gone")
    for path in _run_files(tmp_path, "gone"):
        path.unlink()
    code, runs = _report_cli(store.url)
    assert code == 1
    assert runs["gone"]["ok"] is False
    assert runs["gone"]["missing"] == [
        "runs/gone/ (every object; the day index still lists the run)"
    ]


def test_report_names_a_deleted_final_receipt_extra_objects_and_a_lost_index_entry(
    tmp_path: Path,
) -> None:
    store = open_store(f"file://{tmp_path}", Settings())
    _archive(store, "r")
    os.remove(_file(tmp_path, final_key("r")))
    store.put("runs/r/stray.bin", b"?", retain_until=datetime.now(UTC) + timedelta(days=183))
    for marker in (_objects(tmp_path) / "index" / "days").glob("*/r"):
        marker.unlink()
    (run,) = retention_report(store)
    assert final_key("r") in run.missing  # the last segment ends in RUN_FINISHED
    assert any("no day-index entry" in m for m in run.missing)
    assert run.extra == ["runs/r/stray.bin"]


def test_report_names_delete_markers_and_later_versions_on_s3(
    s3_bucket_factory: Callable[..., str], s3_endpoint: str
) -> None:
    bucket = s3_bucket_factory()
    url = f"s3://{bucket}/a"
    store = open_store(url, Settings(s3_endpoint_url=s3_endpoint))
    first, second = _archive(store, "r")
    raw = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1")
    raw.delete_object(Bucket=bucket, Key=f"a/{first}")  # a delete marker over the lock
    rkey = receipt_key("r", 6, 11)
    raw.put_object(Bucket=bucket, Key=f"a/{rkey}", Body=store.get(rkey))  # a second version
    code, runs = _report_cli(url, "--s3-endpoint-url", s3_endpoint)
    assert code == 1
    r = runs["r"]
    assert r["ok"] is False
    assert r["delete_markers"] == [first] and r["extra_versions"] == [rkey]
    assert r["missing"] == [first]
    assert second not in r["missing"]


def test_purge_keeps_a_run_with_a_version_over_a_locked_original(
    s3_bucket_factory: Callable[..., str], s3_endpoint: str
) -> None:
    # A later version of a receipt could state anything: purge does not act on it.
    bucket = s3_bucket_factory()
    store = open_store(f"s3://{bucket}/a", Settings(s3_endpoint_url=s3_endpoint))
    _archive(store, "r")
    rkey = receipt_key("r", 0, 5)
    raw = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1")
    raw.put_object(Bucket=bucket, Key=f"a/{rkey}", Body=store.get(rkey))
    report = purge(store, now=_later(), dry_run=True)
    assert report.deleted == {} and rkey in report.kept["r"]


def test_a_shortened_governance_lock_on_s3_is_flagged_and_blocks_purge(
    s3_bucket_factory: Callable[..., str], s3_endpoint: str
) -> None:
    # S3's counterpart of `touch -d`: in GOVERNANCE mode whoever may bypass governance can
    # move a retain-until earlier. The receipts still say 183 days.
    bucket = s3_bucket_factory()
    settings = Settings(s3_endpoint_url=s3_endpoint, lock_mode="GOVERNANCE")
    store = open_store(f"s3://{bucket}/a", settings)
    first, _ = _archive(store, "r")
    raw = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1")
    soon = datetime.now(UTC) + timedelta(days=1)
    raw.put_object_retention(
        Bucket=bucket,
        Key=f"a/{first}",
        Retention={"Mode": "GOVERNANCE", "RetainUntilDate": soon},
        BypassGovernanceRetention=True,
    )
    head = store.head(first).retain_until
    assert head is not None and abs(head - soon) < timedelta(seconds=1)
    (run,) = retention_report(store)
    assert any(p.startswith(f"{first}: the store's lock ends") for p in run.problems)
    report = purge(store, now=soon + timedelta(days=1), dry_run=True)
    assert report.deleted == {} and first in report.kept["r"]
