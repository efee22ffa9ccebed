"""The archiver against a real broker: the signed log in, a tiled static log out, nothing twice."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import date, datetime
from typing import Any, cast

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.services.archiver.helpers import SealedLog, running, wait_for
from tests.services.archiver.sealed_factory import sealed_run, sealed_values
from tracevault.archive import ObjectStore, list_runs, open_store
from tracevault.archive.layout import run_prefix
from tracevault.archive.tlog import (
    RunIndex,
    checkpoint_prefix,
    data_key,
    decode_values,
    entries_key,
    log_prefix,
    parse_run_index_key,
)
from tracevault.config import Settings
from tracevault.errors import ConfigError
from tracevault.index import parse_index_key
from tracevault.replayer.load.archive import load_from_archive
from tracevault.replayer.load.verify import verify
from tracevault.services.archiver import Archiver, ArchiverStats
from tracevault.services.archiver._quarantine import Quarantined
from tracevault.transparency import decode_bundle, leaf_data, leaf_hash, tile_width


def _archive(settings: Settings, until: Callable[[Archiver], bool]) -> ArchiverStats:
    archiver = Archiver(settings)
    with running(archiver) as out:
        wait_for(lambda: until(archiver), 60, "the archiver")
    stats = out[0]
    assert isinstance(stats, ArchiverStats), stats
    return stats


def _indexes(store: ObjectStore, run_id: str) -> list[RunIndex]:
    keys = [i.key for i in store.list(run_prefix(run_id)) if parse_run_index_key(i.key)]
    return [RunIndex.from_json(store.get(k), k) for k in keys]


def test_runs_become_a_tiled_log_whose_bundles_hold_the_exact_records(
    settings_factory: Callable[..., Settings],
) -> None:
    sl = SealedLog(settings_factory(archive_segment_max_events=100, archive_segment_max_age_s=0.3))
    runs = {f"run-{i}": sealed_values(f"run-{i}", 20 + i) for i in range(12)}
    n = sl.produce(runs, batch=70)
    settings = sl.settings_trusting()
    stats = _archive(settings, lambda a: a.stats.events_archived == n)
    assert stats.events_quarantined == 0 and stats.runs_finished == 12
    store = open_store(settings.archive_url, settings)
    for p, tree in sl.trees.items():
        log = log_prefix(settings.topic_prefix, p)
        cps = [i.key for i in store.list(checkpoint_prefix(log))]
        assert cps[-1].endswith(f"{tree.size:020d}")
    for run_id, values in runs.items():
        idx = _indexes(store, run_id)
        assert idx[-1].finished and not any(i.finished for i in idx[:-1])
        leaves = [leaf for i in idx for leaf in i.leaves]
        assert [s for _, s in leaves] == list(range(len(values)))
        log, size = idx[-1].log, max(i.size for i in idx)
        for (leaf, seq), value in zip(leaves, values, strict=True):
            n_ = leaf // 256
            w = tile_width(0, n_, size)
            # the data bundle holds the exact sealed value, the entry bundle its leaf data
            assert decode_values(store.get(data_key(log, n_, w)), "d")[leaf % 256] == value
            ev = sealed_run(run_id, len(values))[seq]
            assert decode_bundle(store.get(entries_key(log, n_, w)))[leaf % 256] == leaf_data(
                run_id, seq, ev.hash
            )
        report = verify(load_from_archive(store, run_id), keys=[sl.signer.verifier])
        assert report.count == len(values) and report.finished
        assert report.checks[:4] and report.checks[0].startswith("L1")
    day = list_runs(store, day=date(2026, 1, 1))  # from the per-flush day batches
    assert sorted(r.run_id for r in day) == sorted(runs)
    assert all(r.complete for r in day)


def test_a_second_archiver_from_offset_zero_archives_nothing_twice(
    settings_factory: Callable[..., Settings],
) -> None:
    sl = SealedLog(settings_factory(archive_segment_max_events=25, archive_segment_max_age_s=0.3))
    first = sealed_values("r", 120)
    sl.produce({"r": first[:60]}, batch=20)
    settings = sl.settings_trusting()
    _archive(settings, lambda a: a.stats.events_archived == 60)
    sl.produce({"r": first[60:]}, batch=20)
    # A fresh group re-reads the topic from offset 0: the archive's checkpoint says what is done.
    again = settings.model_copy(update={"archive_group_id": "another-group"})
    stats = _archive(again, lambda a: a.stats.events_archived == 60)
    assert stats.events_skipped == 60 and stats.events_quarantined == 0
    store = open_store(settings.archive_url, settings)
    report = verify(load_from_archive(store, "r"), keys=[sl.signer.verifier])
    assert report.count == 120 and report.finished


def test_an_open_run_is_written_when_its_flush_ages_and_verifies_unfinished(
    settings_factory: Callable[..., Settings],
) -> None:
    sl = SealedLog(settings_factory(archive_segment_max_age_s=0.3))
    sl.produce({"open": sealed_values("open", 30, finish=False)})
    settings = sl.settings_trusting()
    _archive(settings, lambda a: a.stats.events_archived == 30)
    store = open_store(settings.archive_url, settings)
    assert not any(i.finished for i in _indexes(store, "open"))
    report = verify(load_from_archive(store, "open"), keys=[sl.signer.verifier])
    assert report.count == 30 and not report.finished


def test_records_after_the_last_checkpoint_stay_pending_and_uncommitted(
    settings_factory: Callable[..., Settings],
) -> None:
    sl = SealedLog(settings_factory(partitions=1, archive_segment_max_age_s=0.2))
    values = sealed_values("late", 8)
    sl.transaction([("late", v) for v in values[:4]])
    sl.transaction([("late", v) for v in values[4:]], checkpoint=False)  # no checkpoint yet
    settings = sl.settings_trusting()
    archiver = Archiver(settings)
    with running(archiver):
        wait_for(lambda: archiver.stats.events_archived == 4, 60, "the checkpointed half")
        wait_for(lambda: archiver.runtime.committed.get(0) is not None, 30, "a commit")
    assert archiver.stats.events_archived == 4
    assert [s for i in _indexes(archiver.store, "late") for _, s in i.leaves] == [0, 1, 2, 3]
    # committed just after the checkpoint record (offsets: 4 records, checkpoint, a
    # transaction marker): the pending records will be read again
    c = Consumer(settings.kafka_config(**{"group.id": settings.archiver_group_id}))
    (tp,) = c.committed([TopicPartition(settings.topics.sealed, 0)], timeout=30)
    c.close()
    assert tp.offset == 5
    # the checkpoint arrives later: a restarted archiver resolves and archives them
    leaves = [leaf_hash("late", e.seq, e.hash) for e in sealed_run("late", 8)[4:]]
    sl.producer.begin_transaction()
    sl.produce_checkpoint(0, sl.checkpoint(0, leaves))
    sl.producer.commit_transaction(30)
    stats = _archive(settings, lambda a: a.stats.events_archived == 4)
    assert stats.events_quarantined == 0
    report = verify(load_from_archive(archiver.store, "late"), keys=[sl.signer.verifier])
    assert report.count == 8 and report.finished


def test_an_unreadable_record_is_quarantined_and_the_archiver_goes_on(
    settings_factory: Callable[..., Settings],
) -> None:
    sl = SealedLog(settings_factory(partitions=1, archive_segment_max_age_s=0.2))
    plain = Producer(sl.settings.kafka_config())
    plain.produce(sl.settings.topics.sealed, key=b"junk", value=b"\xc3\x01junk", partition=0)
    assert plain.flush(30) == 0
    sl.produce({"good": sealed_values("good", 10)})
    stats = _archive(sl.settings_trusting(), lambda a: a.stats.events_archived == 10)
    assert stats.quarantined == {"undecodable": 1}
    store = open_store(sl.settings.archive_url, sl.settings)
    (q,) = store.list("quarantine/")
    assert Quarantined.from_json(store.get(q.key)).value == b"\xc3\x01junk"


def test_flushes_rotate_at_the_byte_bound(settings_factory: Callable[..., Settings]) -> None:
    sl = SealedLog(settings_factory(partitions=1, archive_segment_max_bytes=4096))
    sl.produce({"big": sealed_values("big", 60)}, batch=5)
    settings = sl.settings_trusting()
    stats = _archive(settings, lambda a: a.stats.events_archived >= 50)
    assert stats.segments_written > 2
    store = open_store(settings.archive_url, settings)
    assert verify(load_from_archive(store, "big"), keys=[sl.signer.verifier]).count == 60


def test_the_archiver_writes_to_s3_with_object_lock(
    settings_factory: Callable[..., Settings],
    s3_bucket_factory: Callable[..., str],
    s3_endpoint: str,
) -> None:
    sl = SealedLog(settings_factory(
        archive_url=f"s3://{s3_bucket_factory()}/tv", s3_endpoint_url=s3_endpoint,
        archive_segment_max_events=30, archive_segment_max_age_s=0.3,
    ))  # fmt: skip
    runs = {f"s3-{i}": sealed_values(f"s3-{i}", 70) for i in range(3)}
    n = sl.produce(runs)
    settings = sl.settings_trusting()
    _archive(settings, lambda a: a.stats.events_archived == n)
    store = open_store(settings.archive_url, settings)
    for run_id in runs:
        assert verify(load_from_archive(store, run_id), keys=[sl.signer.verifier]).finished
    keys = [i.key for i in store.list("")]
    assert any("/tile/0/" in k for k in keys) and any("/checkpoint/" in k for k in keys)
    # the record locked; the investigator's index (derived, rebuildable) written unlocked
    derived = {k for k in keys if parse_index_key(k) is not None}
    assert derived and {store.head(k).lock_mode for k in derived} == {None}
    assert {store.head(k).lock_mode for k in keys if k not in derived} == {"COMPLIANCE"}


def test_the_archiver_refuses_to_start_without_trusted_keys(
    settings_factory: Callable[..., Settings],
) -> None:
    with pytest.raises(ConfigError, match="TRACEVAULT_LOG_VKEYS"):
        Archiver(settings_factory(create=False, log_vkeys=""))


class _SlowCheckpoints:
    """A file store whose checkpoint objects wait for ``gate``: a flush still being written."""

    def __init__(self, store: ObjectStore, gate: threading.Event) -> None:
        self._store, self._gate = store, gate

    def put(self, key: str, data: bytes, *, retain_until: datetime) -> None:
        if "/checkpoint/" in key:
            assert self._gate.wait(60), "the test never opened the gate"
        self._store.put(key, data, retain_until=retain_until)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def test_verifying_goes_on_while_a_partitions_flush_is_written(
    settings_factory: Callable[..., Settings],
) -> None:
    # the next flush waits for the one being written, the main thread does not (on main it
    # blocked at the second checkpoint until the first flush was durable)
    sl = SealedLog(settings_factory(partitions=1, archive_segment_max_events=4))
    values = sealed_values("slow", 12)
    for i in range(0, 12, 4):
        sl.transaction([("slow", v) for v in values[i : i + 4]])
    settings = sl.settings_trusting()
    gate = threading.Event()
    store = _SlowCheckpoints(open_store(settings.archive_url, settings), gate)
    archiver = Archiver(settings, store=cast(ObjectStore, store))
    with running(archiver):
        wait_for(lambda: archiver.stats.checkpoints_verified == 3, 30, "all three checkpoints")
        assert archiver.stats.events_archived == 0  # the first flush is still being written
        gate.set()
        wait_for(lambda: archiver.stats.events_archived == 12, 60, "every flush")
    report = verify(load_from_archive(store, "slow"), keys=[sl.signer.verifier])
    assert report.count == 12 and report.finished
