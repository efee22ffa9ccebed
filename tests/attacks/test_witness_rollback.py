"""Rollbacks at the witness, signed with the real log key, against the real witness service.

The attacker holds the log key and can write the sealed topic (docs/log.md, "Witness"). It
tries the two rollbacks the witness was silent on:

- **an old note replayed**: an exact copy of the oldest genuine checkpoint record, one the
  witness cosigned, appended after the newest;
- **a smaller size with another root**: 41 leaves, after the witness cosigned 42, built on
  the genuine tree at 40 with another leaf 40, appended while the witness was restarted
  (a deploy), so nothing of the session that saw 42 is left in memory.

Each must be refused with an ALERT line, counted in ``tracevault_witness_refused_total``
and kept as a refusal record holding the signed note; the genuine log is still cosigned.
"""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from confluent_kafka import Producer

from tests.kafka_harness import free_port
from tests.services.archiver.sealed_factory import sealed_run
from tests.services.sequencer.support import wait_until
from tests.transparency.signed_sealed import SignedSealedWriter, fresh_settings, inject
from tests.witness.topiclog import Partition, witness_process
from tracevault.archive import ObjectStore, open_store
from tracevault.config import Settings
from tracevault.services.archiver import Archiver
from tracevault.services.archiver._quarantine import Quarantined
from tracevault.transparency import (
    CHECKPOINT_KEY,
    Checkpoint,
    CheckpointRecord,
    CompactTree,
    CosignatureSigner,
    Ed25519Signer,
    leaf_hash,
    split_note,
    write_private_key,
)
from tracevault.witness._core import checkpoint_key, origin_prefix


class _Witness:
    """The witness service (``tracevault witness run``), startable again on its store."""

    def __init__(self, settings: Settings, log_key: Ed25519Signer, base: Path) -> None:
        self.key_file = base / "w.key"
        write_private_key(self.key_file, CosignatureSigner.generate("w1.test"))
        self.store_url = f"file://{base / 'witness-store'}"
        self.store: ObjectStore = open_store(self.store_url, settings)
        self.env = {
            "TRACEVAULT_LOG_VKEYS": log_key.verifier.vkey,
            "TRACEVAULT_BOOTSTRAP_SERVERS": settings.bootstrap_servers,
            "TRACEVAULT_TOPIC_PREFIX": settings.topic_prefix,
        }
        self.metrics = ""

    @contextmanager
    def running(self) -> Iterator[subprocess.Popen[str]]:
        port = free_port()
        self.metrics = f"http://127.0.0.1:{port}/metrics"
        args = ["-v", "witness", "run", "--key-file", str(self.key_file)]
        args += ["--store", self.store_url, "--metrics-port", str(port)]
        with witness_process(args, **self.env) as proc:
            yield proc

    def refused(self, origin: str, kind: str) -> float:
        body = urllib.request.urlopen(self.metrics, timeout=5).read().decode()
        want = f'tracevault_witness_refused_total{{kind="{kind}",origin="{origin}"}}'
        for line in body.splitlines():
            if line.startswith(want):
                return float(line.rsplit(" ", 1)[1])
        return 0.0


def _has(store: ObjectStore, proc: subprocess.Popen[str], key: str) -> Callable[[], bool]:
    def check() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"the witness exited {proc.returncode}: {proc.communicate()[1]}")
        return bool(store.list(key))

    return check


def _stop(proc: subprocess.Popen[str]) -> str:
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=15)
    assert proc.returncode == 0, err
    return err


def _refusals(store: ObjectStore, origin: str) -> list[dict[str, object]]:
    objs = store.list(f"{origin_prefix(origin)}refusal/")
    return [json.loads(store.get(o.key)) for o in objs]


def _setup(settings_factory: Callable[..., Settings], tmp_path: Path) -> tuple[Partition, _Witness]:
    settings = settings_factory(partitions=1)
    log_key = Ed25519Signer.generate("tv.test/log")
    log = Partition(settings, log_key, Producer(settings.kafka_config()), "genuine")
    return log, _Witness(settings, log_key, tmp_path)


def test_a_replayed_old_checkpoint_is_refused_as_a_rollback(
    settings_factory: Callable[..., Settings], tmp_path: Path
) -> None:
    log, w = _setup(settings_factory, tmp_path)
    with w.running() as proc:
        oldest = log.append(1)
        wait_until(_has(w.store, proc, checkpoint_key(log.origin, 1)), timeout=60, what="cosign @1")
        log.append(20)
        log.append(21)
        wait_until(
            _has(w.store, proc, checkpoint_key(log.origin, 42)), timeout=60, what="cosign @42"
        )

        log.produce(oldest)  # the same bytes, the real key's signature, after the newest
        refusals = f"{origin_prefix(log.origin)}refusal/"
        wait_until(_has(w.store, proc, refusals), timeout=30, what="the replayed note refused")
        assert w.refused(log.origin, "rollback") == 1
        # the genuine log goes on and is cosigned
        log.append(3)
        wait_until(
            _has(w.store, proc, checkpoint_key(log.origin, 45)), timeout=30, what="cosign @45"
        )
        err = _stop(proc)

    [refusal] = _refusals(w.store, log.origin)
    assert refusal["kind"] == "rollback" and refusal["note"] == oldest.note
    assert refusal["witness_size"] == 42
    assert "replayed" in str(refusal["message"]) and f"{log.origin}@1" in str(refusal["message"])
    alerts = [line for line in err.splitlines() if "ALERT" in line]
    assert len(alerts) == 1 and "rollback" in alerts[0] and "@42" in alerts[0], err


def test_a_smaller_checkpoint_with_another_root_is_refused_after_a_restart(
    settings_factory: Callable[..., Settings], tmp_path: Path
) -> None:
    log, w = _setup(settings_factory, tmp_path)
    with w.running() as proc:
        log.append(21)
        log.append(21)
        wait_until(
            _has(w.store, proc, checkpoint_key(log.origin, 42)), timeout=60, what="cosign @42"
        )
        _stop(proc)

    # the key holder's other history: the genuine 40 leaves, then another leaf 40
    evil = log.fork("rolled-back")
    evil.tree = CompactTree()
    evil.tree.extend(log.leaves[:40])
    evil.leaves = list(log.leaves[:40])
    smaller = evil.build(1)
    genuine41 = CompactTree()
    genuine41.extend(log.leaves[:41])
    assert Checkpoint.parse(split_note(smaller.note)[0]).root != genuine41.root()

    with w.running() as proc:
        evil.produce(smaller)
        refusals = f"{origin_prefix(log.origin)}refusal/"
        wait_until(_has(w.store, proc, refusals), timeout=60, what="the smaller checkpoint refused")
        assert w.refused(log.origin, "rollback") == 1
        log.append(2)
        wait_until(
            _has(w.store, proc, checkpoint_key(log.origin, 44)), timeout=30, what="cosign @44"
        )
        err = _stop(proc)

    [refusal] = _refusals(w.store, log.origin)
    assert refusal["kind"] == "rollback" and refusal["note"] == smaller.note
    message = str(refusal["message"])
    assert f"{log.origin}@41" in message and f"{log.origin}@42" in message, message
    assert "record_b64" in refusal  # the record itself, signed by the log key: the proof
    alerts = [line for line in err.splitlines() if "ALERT" in line]
    assert len(alerts) == 1 and "rollback" in alerts[0] and "@41" in alerts[0], err


@pytest.mark.parametrize("stale", ["replayed", "smaller"])
def test_the_archiver_alerts_on_a_stale_checkpoint_in_sealed(
    kafka_bootstrap: str, tmp_path: Path, caplog: pytest.LogCaptureFixture, stale: str
) -> None:
    """The same two attacks read by the archiver: refused ``bad-checkpoint`` with an ALERT
    naming both sizes; the genuine run is archived as ever."""
    settings = fresh_settings(kafka_bootstrap, tmp_path, partitions=1)
    writer = SignedSealedWriter(settings)
    sealed = sealed_run("stale-run", 6)
    writer.publish(sealed, batches=3)
    leaves = [leaf_hash(s.run_id, s.seq, s.hash) for s in sealed]
    if stale == "replayed":  # the first transaction's record again (Ed25519 is deterministic)
        tree, new, size = CompactTree(), leaves[:2], 2
    else:  # 5 leaves, after 6: the genuine 4, then another leaf 4
        tree, new, size = CompactTree(), [leaf_hash("evil", 4, bytes(32))], 5
        tree.extend(leaves[:4])
    rec, _ = CheckpointRecord.build(tree, new, writer.origin(0), writer.signer)
    inject(settings, 0, rec.encode(), CHECKPOINT_KEY)
    caplog.set_level(logging.ERROR)
    stats = Archiver(settings, verifiers=[writer.signer.verifier]).run(until_idle=2)
    assert stats.events_archived == 6, stats
    store = open_store(settings.archive_url, settings)
    refused = [Quarantined.from_json(store.get(i.key)) for i in store.list("quarantine/")]
    assert [q.reason for q in refused] == ["bad-checkpoint"], refused
    origin = writer.origin(0)
    assert f"{origin}@{size}" in refused[0].detail and f"{origin}@6" in refused[0].detail
    alerts = [r.getMessage() for r in caplog.records if "ALERT" in r.getMessage()]
    assert alerts and all("replayed" in a for a in alerts), alerts
