"""Listing, retention report and purge on runs of the static-log layout (beside legacy ones)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, date, datetime, timedelta

from tests.consumer.archive.sealed_factory import FUTURE, sealed_run, write_segment_objects
from tracevault.archive import ObjectStore, list_runs, purge, retention_report
from tracevault.consumer.archive._logwriter import LeafRecord, PartitionLog
from tracevault.log import (
    CheckpointRecord,
    CompactTree,
    Ed25519Signer,
    leaf_data,
    log_origin,
)
from tracevault.log._merkle import hash_leaf
from tracevault.schemas import encode_sealed


def _write_log_run(store: ObjectStore, run_id: str, n: int) -> None:
    signer = Ed25519Signer.generate("test-log")
    origin = log_origin("tracevault", "pfx", 0)
    plog = PartitionLog.open(store, "pfx", origin, 0, [signer.verifier])
    recs = []
    for ev in sealed_run(run_id, n):
        last = ev.seq == n - 1
        data = leaf_data(run_id, ev.seq, ev.hash)
        recs.append(
            LeafRecord(run_id, ev.seq, ev.hash, last, ev.sealed_at,
                       data, hash_leaf(data), encode_sealed(ev))
        )  # fmt: skip
    rec, _ = CheckpointRecord.build(CompactTree(), [r.leaf_hash for r in recs], origin, signer)
    for r in recs:
        plog.append(r)
    plog.note, plog.note_size = rec.note, n
    with ThreadPoolExecutor(4) as pool:
        plog.flush(FUTURE, pool)


def test_log_runs_are_listed_reported_and_never_purged_alone(store: ObjectStore) -> None:
    _write_log_run(store, "tiled", 7)
    write_segment_objects(store, sealed_run("legacy", 3))
    day = date(2026, 1, 1)
    assert {(r.run_id, r.events, r.complete) for r in list_runs(store, day=day)} == {
        ("tiled", 7, True)
    }
    assert {r.run_id for r in list_runs(store)} == {"tiled", "legacy"}
    (tiled,) = [r for r in retention_report(store) if r.run_id == "tiled"]
    assert not tiled.missing and not tiled.extra
    assert {o.lock_mode for o in tiled.objects} == {store.lock_mode}
    # its objects state no retention of their own and the log is shared: purge keeps it
    report = purge(store, now=datetime.now(UTC) + timedelta(days=400), dry_run=True)
    assert "tiled" in report.kept and "tiled" not in report.deleted
