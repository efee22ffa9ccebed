"""Attacks on the archive, against a real broker, a real file store and moto's S3 over HTTP.

Each attack is really made (a plain producer appends to ``sealed``, an archive is rewritten
and re-signed with another key, objects are deleted or shadowed by a new S3 version) and each
is detected and named (docs/log.md, "Archive").
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from pathlib import Path

import boto3
import pytest
from confluent_kafka import Producer

from tests.services.archiver.helpers import SealedLog, running, wait_for
from tests.services.archiver.sealed_factory import sealed_values
from tracevault.archive import open_store
from tracevault.archive._filestore import FileStore
from tracevault.archive.layout import run_prefix
from tracevault.archive.tlog import log_prefix, parse_run_index_key
from tracevault.config import Settings
from tracevault.errors import ChainError, LogError
from tracevault.replayer.load.archive import load_from_archive
from tracevault.replayer.load.verify import verify
from tracevault.schemas import decode_sealed
from tracevault.services.archiver import Archiver, ArchiverStats
from tracevault.services.archiver._quarantine import Quarantined
from tracevault.transparency import Ed25519Signer


def _archive(settings: Settings, until: Callable[[Archiver], bool]) -> ArchiverStats:
    archiver = Archiver(settings)
    with running(archiver) as out:
        wait_for(lambda: until(archiver), 60, "the archiver")
    stats = out[0]
    assert isinstance(stats, ArchiverStats), stats
    return stats


def _fast(settings_factory: Callable[..., Settings], **kw: object) -> Settings:
    return settings_factory(archive_segment_max_age_s=0.2, partitions=1, **kw)


def _archived(a: Archiver, run_id: str, n: int) -> bool:
    return a.stats.events_archived >= n and bool(a.store.list(run_prefix(run_id)))


def test_a_forged_run_finished_from_a_plain_producer_is_quarantined_not_archived(
    settings_factory: Callable[..., Settings],
) -> None:
    sl = SealedLog(_fast(settings_factory))
    genuine = sealed_values("victim", 6)  # seqs 0..5, RUN_FINISHED at 5
    forged = sealed_values("victim", 4)[3]  # chain-valid RUN_FINISHED at seq 3
    sl.transaction([("victim", v) for v in genuine[:3]])
    plain = Producer(sl.settings.kafka_config())
    plain.produce(sl.settings.topics.sealed, key=b"victim", value=forged, partition=0)
    assert plain.flush(30) == 0
    sl.transaction([("victim", v) for v in genuine[3:]])
    settings = sl.settings_trusting()
    stats = _archive(settings, lambda a: _archived(a, "victim", 6))
    assert stats.quarantined == {"not-in-log": 1}
    store = open_store(settings.archive_url, settings)
    (q,) = store.list("quarantine/")
    record = Quarantined.from_json(store.get(q.key))
    assert (record.reason, record.run_id, record.seq) == ("not-in-log", "victim", 3)
    assert record.value == forged and "not listed by the signed checkpoint" in record.detail
    run = load_from_archive(store, "victim")
    report = verify(run, keys=[sl.signer.verifier], require_finished=True)
    assert report.count == 6 and report.finished
    assert [bytes(r["raw"]) for r in run.records.rows] == [decode_sealed(x).raw for x in genuine]


def test_a_checkpoint_signed_by_an_unknown_key_is_refused(
    settings_factory: Callable[..., Settings],
) -> None:
    settings = _fast(settings_factory)
    sl = SealedLog(settings)
    rogue = SealedLog(settings, Ed25519Signer.generate("test-log"))  # same name, other key
    rogue.transaction([("rogue", v) for v in sealed_values("rogue", 3)])
    sl.transaction([("good", v) for v in sealed_values("good", 2)])
    trusting = sl.settings_trusting()
    stats = _archive(trusting, lambda a: _archived(a, "good", 2))
    assert stats.quarantined.get("bad-checkpoint") == 1
    store = open_store(trusting.archive_url, trusting)
    bad = [
        Quarantined.from_json(store.get(i.key))
        for i in store.list("quarantine/")
        if Quarantined.from_json(store.get(i.key)).reason == "bad-checkpoint"
    ]
    assert "signed by unknown key(s) test-log+" in bad[0].detail
    assert not store.list(run_prefix("rogue"))  # its records were never archived
    # the genuine log starts at leaf 0, so the rogue's three records are not in it either
    assert stats.quarantined.get("not-in-log") == 3


def test_a_consistent_rewrite_signed_with_another_key_fails_l1(
    settings_factory: Callable[..., Settings],
) -> None:
    genuine = SealedLog(_fast(settings_factory))
    genuine.produce({"run-r": sealed_values("run-r", 8)})
    # The attacker rewrites the whole archive: every record, hash, tile, index and
    # checkpoint recomputed by the real tools, signed with a key of their own.
    forged_values = sealed_values("run-r", 8, start=0)
    attacker = SealedLog(_fast(settings_factory), Ed25519Signer.generate("test-log"))
    attacker.produce({"run-r": forged_values})
    forged = attacker.settings_trusting()
    _archive(forged, lambda a: _archived(a, "run-r", 8))
    store = open_store(forged.archive_url, forged)
    run = load_from_archive(store, "run-r")
    assert verify(run, keys=[attacker.signer.verifier]).finished  # consistent in itself
    with pytest.raises(LogError, match="L1 signature") as info:
        verify(run, keys=[genuine.signer.verifier])
    assert "checkpoint/" in str(info.value)


def test_a_deleted_final_index_object_is_named(
    settings_factory: Callable[..., Settings],
) -> None:
    sl = SealedLog(_fast(settings_factory))
    values = sealed_values("run-d", 10)
    sl.transaction([("run-d", v) for v in values[:6]])
    settings = sl.settings_trusting()
    archiver = Archiver(settings)
    with running(archiver):
        wait_for(lambda: archiver.stats.events_archived == 6, 60, "first flush")
        sl.transaction([("run-d", v) for v in values[6:]])
        wait_for(lambda: archiver.stats.events_archived == 10, 60, "second flush")
    store = open_store(settings.archive_url, settings)
    keys = sorted(i.key for i in store.list(run_prefix("run-d")))
    idx = [k for k in keys if parse_run_index_key(k)]
    assert len(idx) == 2
    last = FileStore(Path(settings.archive_url.removeprefix("file://"))).path_of(idx[-1])
    os.chmod(last, 0o600)
    last.unlink()  # the bucket owner removes the run's last index object
    with pytest.raises(ChainError, match="A4 index") as info:
        verify(load_from_archive(store, "run-d"), keys=[sl.signer.verifier])
    assert info.value.seq == 6 and "tile/entries/" in str(info.value.obj)


@pytest.fixture
def s3_archive(s3_endpoint: str) -> Callable[[Settings], Settings]:
    def make(settings: Settings) -> Settings:
        bucket = f"tv-att-{uuid.uuid4().hex[:12]}"
        boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1").create_bucket(
            Bucket=bucket, ObjectLockEnabledForBucket=True
        )
        return settings.model_copy(
            update={"archive_url": f"s3://{bucket}/archive", "s3_endpoint_url": s3_endpoint}
        )

    return make


@pytest.mark.parametrize("what", ["tile/0/", "checkpoint/", "data/", "runs/"])
def test_a_log_object_shadowed_by_a_new_s3_version_is_named(
    settings_factory: Callable[..., Settings],
    s3_archive: Callable[[Settings], Settings],
    s3_endpoint: str,
    what: str,
) -> None:
    sl = SealedLog(s3_archive(_fast(settings_factory)))
    sl.produce({"run-s": sealed_values("run-s", 5)})
    settings = sl.settings_trusting()
    _archive(settings, lambda a: _archived(a, "run-s", 5))
    store = open_store(settings.archive_url, settings)
    assert verify(load_from_archive(store, "run-s"), keys=[sl.signer.verifier]).finished
    log = log_prefix(settings.topic_prefix, 0)
    base = "" if what == "runs/" else log
    key = next(i.key for i in store.list(base + what) if i.key.startswith(base + what))
    bucket = settings.archive_url.removeprefix("s3://").split("/")[0]
    client = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1")
    body = client.get_object(Bucket=bucket, Key=f"archive/{key}")["Body"].read()
    client.put_object(Bucket=bucket, Key=f"archive/{key}", Body=body[:-1] + b"!")
    with pytest.raises(ChainError, match="A0 versions") as info:
        load_from_archive(store, "run-s")
    assert info.value.obj == key
