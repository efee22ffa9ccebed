"""Legal holds on runs of the tiled log cover what reading and verifying them needs.

A run's events live in shared log objects (data and entry bundles, hash tiles, checkpoints),
so a hold on its run index objects alone would let the evidence go once its retention
expired. Both stores: ``file://`` and moto's S3 over HTTP.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from tests.services.archiver.helpers import wait_for
from tests.services.archiver.sealed_factory import LogWriter, RecordingStore, sealed_run
from tracevault.archive import ObjectStore, hold_run
from tracevault.archive._store import utc_now
from tracevault.archive.tlog import RunIndex, checkpoint_key, parse_run_index_key
from tracevault.errors import ArchiveError, NotFoundError, RetentionError
from tracevault.replayer.load.archive import load_from_archive
from tracevault.replayer.load.verify import verify
from tracevault.transparency import Ed25519Signer


def _verified_reads(store: ObjectStore, run_id: str, signer: Ed25519Signer) -> set[str]:
    reads = RecordingStore(store)
    assert verify(load_from_archive(reads, run_id), keys=[signer.verifier]).finished
    return reads.keys


def _refused(store: ObjectStore, key: str, at: datetime) -> bool:
    try:
        store.delete(key, now=at)
    except RetentionError as exc:
        assert "legal hold" in str(exc), exc
        return True
    return False


def test_a_hold_protects_the_log_objects_a_run_needs_and_release_keeps_what_others_need(
    store: ObjectStore,
) -> None:
    signer = Ed25519Signer.generate("test-log")
    until = utc_now() + timedelta(seconds=3)  # short: deleting after release must succeed
    w = LogWriter(store, signer, until=until)
    w.add(sealed_run("bulk", 300))  # a full first bundle and a level-1 tile under the rest
    w.flush()
    w.add(sealed_run("a", 3, finish=False))
    w.add(sealed_run("other", 3))
    w.flush()
    w.add(sealed_run("a", 3, start=3))
    w.add(sealed_run("b", 4))
    w.flush()
    w.add(sealed_run("late", 3))
    w.flush()
    a_reads = _verified_reads(store, "a", signer)
    b_reads = _verified_reads(store, "b", signer)

    held = hold_run(store, "a", True)
    wait_for(lambda: utc_now() > until + timedelta(seconds=1), 30, "retain-until to pass")
    later = utc_now() + timedelta(days=1)
    assert [k for k in sorted(a_reads) if not _refused(store, k, later)] == []

    assert a_reads <= set(held.objects) and not held.missing
    assert all(store.head(k).legal_hold for k in held.objects)
    a_index = [RunIndex.from_json(store.get(k), k) for k in a_reads if parse_run_index_key(k)]
    log = a_index[0].log
    named = {checkpoint_key(log, i.size) for i in a_index}
    assert named <= set(held.objects) and len(named) == 2
    # the data and entry bundles of its leaves, hash tiles at levels 0 and 1
    assert any(k.startswith(log + "tile/entries/001") for k in held.objects)
    assert any(k.startswith(log + "data/001") for k in held.objects)
    assert any(k.startswith(log + "tile/1/") for k in held.objects)

    hold_run(store, "b", True)
    released = hold_run(store, "a", False)
    shared = a_reads & b_reads
    assert shared and set(released.kept) >= shared
    assert all(runs == ["b"] for runs in released.kept.values())
    assert not set(released.objects) & shared
    # what only "a" needed can go now; what "b" needs is still refused
    only_a = sorted(a_reads - b_reads)
    assert only_a and [k for k in only_a if _refused(store, k, later)] == []
    assert not {i.key for i in store.list("")} & set(only_a)
    assert [k for k in sorted(shared) if not _refused(store, k, later)] == []

    hold_run(store, "b", False)
    assert [k for k in sorted(b_reads) if _refused(store, k, later)] == []


def test_release_of_a_run_no_record_holds_clears_its_own_objects(store: ObjectStore) -> None:
    signer = Ed25519Signer.generate("test-log")
    w = LogWriter(store, signer)
    w.add(sealed_run("solo", 4))
    w.flush()
    for info in store.list("runs/solo/"):  # a hold placed by an older tracevault
        store.set_legal_hold(info.key, True)
    released = hold_run(store, "solo", False)
    assert released.objects == [i.key for i in store.list("runs/solo/")]
    assert not any(store.head(k).legal_hold for k in released.objects)


def test_holding_an_unknown_run_is_not_found_and_records_nothing(store: ObjectStore) -> None:
    with pytest.raises(NotFoundError, match="missing-run"):
        hold_run(store, "missing-run", True)
    assert store.list("legal-holds/") == []


def test_an_unreadable_hold_record_stops_a_release_naming_it(store: ObjectStore) -> None:
    w = LogWriter(store, Ed25519Signer.generate("test-log"))
    w.add(sealed_run("r", 2))
    w.flush()
    hold_run(store, "r", True)
    bad = "legal-holds/someone/20260101T000000000000Z-x.json"
    store.put(bad, b"not json", retain_until=utc_now() + timedelta(days=1))
    with pytest.raises(ArchiveError, match=bad):
        hold_run(store, "r", False)
    assert store.head(store.list("runs/r/")[0].key).legal_hold  # nothing was released
