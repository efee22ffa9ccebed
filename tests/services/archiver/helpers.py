"""Shared helpers of the archive tests: put sealed values on the topic, wait on conditions."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from itertools import zip_longest
from pathlib import Path

from confluent_kafka import Producer

from tracevault.archive import ObjectStore, archived_run
from tracevault.archive.tlog import checkpoint_prefix, log_prefix
from tracevault.config import Settings
from tracevault.schemas import decode_sealed
from tracevault.services.archiver import Archiver, ArchiverStats
from tracevault.transparency import (
    CHECKPOINT_KEY,
    RECORD_HEADER,
    RECORD_HEADER_CHECKPOINT,
    CheckpointRecord,
    CompactTree,
    Ed25519Signer,
    leaf_hash,
    log_origin,
)


def produce_sealed(settings: Settings, runs: dict[str, list[bytes]]) -> int:
    """Write each run's sealed values to ``<prefix>.sealed``, runs interleaved, key = run id."""
    producer = Producer(
        settings.kafka_config(
            **{"partitioner": "murmur2_random", "enable.idempotence": True, "linger.ms": 20}
        )
    )
    n = 0
    for row in zip_longest(*[[(r, v) for v in vals] for r, vals in runs.items()]):
        for item in row:
            if item is None:
                continue
            run_id, value = item
            while True:
                try:
                    producer.produce(settings.topics.sealed, key=run_id.encode(), value=value)
                    break
                except BufferError:
                    producer.poll(0.1)
            n += 1
    assert producer.flush(60) == 0
    return n


def wait_for(cond: Callable[[], bool], timeout: float, what: str) -> None:
    """Return once ``cond()`` holds; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        pause.wait(0.05)


def finished_runs(store: ObjectStore, run_ids: list[str]) -> int:
    """How many of ``run_ids`` are archived to their end (either archive layout)."""
    return sum(1 for r in run_ids if (got := archived_run(store, r)) is not None and got[0])


@contextmanager
def running(archiver: Archiver) -> Iterator[list[ArchiverStats | BaseException]]:
    """Run ``archiver`` in a thread; stop it (flush + commit) when the block ends."""
    out: list[ArchiverStats | BaseException] = []

    def target() -> None:
        try:
            out.append(archiver.run())
        except BaseException as exc:
            out.append(exc)

    t = threading.Thread(target=target, name="archiver", daemon=True)
    t.start()
    try:
        yield out
    finally:
        archiver.stop()
        t.join(60)
        assert not t.is_alive(), "archiver did not stop"


class SealedLog:
    """Plays the sequencer's part of the contract (docs/log.md): sealed event records and, in
    the same Kafka transaction, one signed CheckpointRecord per partition written to.

    Until the sequencer writes them itself the archive tests make their sealed partitions
    here; the format is the sequencer's. ``partition_of`` routes a run (default: crc32 of the
    run id modulo the topic's partitions).
    """

    def __init__(self, settings: Settings, signer: Ed25519Signer | None = None) -> None:
        self.settings = settings
        self.signer = signer or Ed25519Signer.generate("test-log")
        self.trees: dict[int, CompactTree] = {}
        self.producer = Producer(
            settings.kafka_config(
                **{"transactional.id": f"{settings.topic_prefix}-sealedlog-{uuid.uuid4().hex}"}
            )
        )
        self.producer.init_transactions(30)
        meta = self.producer.list_topics(settings.topics.sealed, timeout=30)
        self.partitions = len(meta.topics[settings.topics.sealed].partitions)

    @property
    def vkey(self) -> str:
        return self.signer.verifier.vkey

    def partition_of(self, run_id: str) -> int:
        return zlib.crc32(run_id.encode()) % self.partitions

    def origin(self, partition: int) -> str:
        return log_origin(self.settings.log_origin, self.settings.topic_prefix, partition)

    def checkpoint(self, partition: int, leaves: list[bytes]) -> bytes:
        """The checkpoint record value that adds ``leaves`` to the partition's tree."""
        tree = self.trees.get(partition, CompactTree())
        rec, self.trees[partition] = CheckpointRecord.build(
            tree, leaves, self.origin(partition), self.signer
        )
        return rec.encode()

    def produce_checkpoint(self, partition: int, value: bytes) -> None:
        self.producer.produce(
            self.settings.topics.sealed,
            key=CHECKPOINT_KEY,
            value=value,
            partition=partition,
            headers=[(RECORD_HEADER, RECORD_HEADER_CHECKPOINT)],
        )

    def transaction(self, items: list[tuple[str, bytes]], *, checkpoint: bool = True) -> None:
        """One transaction: the values (run id, sealed value) and a checkpoint per partition."""
        self.producer.begin_transaction()
        leaves: dict[int, list[bytes]] = {}
        for run_id, value in items:
            p = self.partition_of(run_id)
            ev = decode_sealed(value)
            leaves.setdefault(p, []).append(leaf_hash(ev.run_id, ev.seq, ev.hash))
            self.producer.produce(
                self.settings.topics.sealed, key=run_id.encode(), value=value, partition=p
            )
        if checkpoint:
            for p, hs in sorted(leaves.items()):
                self.produce_checkpoint(p, self.checkpoint(p, hs))
        self.producer.commit_transaction(60)

    def produce(self, runs: dict[str, list[bytes]], batch: int = 200) -> int:
        """Every run's values, runs interleaved, ``batch`` records per transaction."""
        items = [
            item
            for row in zip_longest(*[[(r, v) for v in vals] for r, vals in runs.items()])
            for item in row
            if item is not None
        ]
        for i in range(0, len(items), batch):
            self.transaction(items[i : i + batch])
        return len(items)

    def settings_trusting(self) -> Settings:
        return self.settings.model_copy(update={"log_vkeys": self.vkey})


def produce_sealed_logged(settings: Settings, runs: dict[str, list[bytes]]) -> Settings:
    """Produce ``runs`` as the sequencer would (with checkpoints); settings that trust its key."""
    sl = SealedLog(settings)
    sl.produce(runs)
    return sl.settings_trusting()


def start_archiver(
    settings: Settings, vkey: str, log: Path, instance: str, max_events: int
) -> subprocess.Popen[bytes]:
    """``tracevault archiver`` as its own process (static member ``instance``), flushing every
    ``max_events`` leaves or 0.3 s, its output appended to ``log``."""
    env = {
        **os.environ,
        "TRACEVAULT_BOOTSTRAP_SERVERS": settings.bootstrap_servers,
        "TRACEVAULT_TOPIC_PREFIX": settings.topic_prefix,
        "TRACEVAULT_ARCHIVE_URL": settings.archive_url,
        "TRACEVAULT_LOG_VKEYS": vkey,
    }
    cmd = [
        sys.executable, "-m", "tracevault", "archiver",
        "--segment-max-events", str(max_events), "--segment-max-age", "0.3",
        "--instance-id", f"{instance}-{settings.topic_prefix}",
    ]  # fmt: skip
    with open(log, "ab") as out:
        return subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)


def archived_size(store: ObjectStore, settings: Settings, p: int) -> int:
    """The size of partition ``p``'s newest archived checkpoint (0: none)."""
    cps = store.list(checkpoint_prefix(log_prefix(settings.topic_prefix, p)))
    return int(cps[-1].key.rsplit("/", 1)[1]) if cps else 0
