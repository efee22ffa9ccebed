"""Attacks on the witness, against the real service following a real sealed topic.

The attacker here is the one a witness exists for: the holder of the log key, who signs a
second history (a fork) or an older, smaller one (a rollback) and appends its checkpoint
record to the sealed partition, where the witness reads. The witness, a separate process
with its own key and store, must refuse both, say ALERT, count them in /metrics and keep a
refusal record; and a verifier requiring one witness must fail on the log's own signature
and pass on the checkpoint the witness cosigned.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Producer

from tests.kafka_harness import free_port
from tests.services.sequencer.support import wait_until
from tests.witness.topiclog import RUN, Partition, witness_process
from tests.witness.topiclog import chain as _chain
from tracevault.archive import ObjectStore, open_store
from tracevault.config import Settings
from tracevault.errors import LogError
from tracevault.transparency import (
    CosignatureSigner,
    Ed25519Signer,
    LeafProof,
    RunEvent,
    RunLogEvidence,
    check_run_log,
    inclusion_proof,
    list_source,
    load_witness_verifiers,
    write_private_key,
)
from tracevault.witness._core import checkpoint_key, origin_prefix


@dataclass
class Running:
    proc: subprocess.Popen[str]
    store: ObjectStore
    metrics: str
    witness_vkey: str
    log: Partition

    def has(self, key_prefix: str) -> bool:
        if self.proc.poll() is not None:  # died: fail now, with what it said
            _, err = self.proc.communicate(timeout=10)
            raise AssertionError(f"the witness exited with {self.proc.returncode}: {err}")
        return bool(self.store.list(key_prefix))

    def sample(self, kind: str) -> float:
        body = urllib.request.urlopen(self.metrics + "/metrics", timeout=5).read().decode()
        want = f'tracevault_witness_refused_total{{kind="{kind}",origin="{self.log.origin}"}}'
        for line in body.splitlines():
            if line.startswith(want):
                return float(line.rsplit(" ", 1)[1])
        return 0.0


@pytest.fixture
def witness(settings_factory: Callable[..., Settings], tmp_path: Path) -> Iterator[Running]:
    settings = settings_factory(partitions=1)
    log_key = Ed25519Signer.generate("tv.test/log")
    wkey = CosignatureSigner.generate("w1.test")
    write_private_key(tmp_path / "w.key", wkey)
    store_url = f"file://{tmp_path / 'witness-store'}"
    port = free_port()
    env = {
        "TRACEVAULT_LOG_VKEYS": log_key.verifier.vkey,
        "TRACEVAULT_BOOTSTRAP_SERVERS": settings.bootstrap_servers,
        "TRACEVAULT_TOPIC_PREFIX": settings.topic_prefix,
    }
    args = ["-v", "witness", "run", "--key-file", str(tmp_path / "w.key"), "--store", store_url]
    with witness_process([*args, "--metrics-port", str(port)], **env) as proc:
        producer = Producer(settings.kafka_config())
        log = Partition(settings, log_key, producer, "genuine")
        store = open_store(store_url, settings)
        yield Running(proc, store, f"http://127.0.0.1:{port}", wkey.verifier.vkey, log)


def _evidence(p: Partition, note: str) -> tuple[list[RunEvent], RunLogEvidence]:
    n = p.tree.size
    src = list_source(p.leaves)
    events = [RunEvent(s, _chain(s, p.tag), finishes=s == n - 1) for s in range(n)]
    proofs = tuple(LeafProof(s, s, tuple(inclusion_proof(s, n, src))) for s in range(n))
    return events, RunLogEvidence(p.origin, note, proofs)


def test_witness_refuses_fork_and_rollback_and_cosigns_the_genuine_log(witness: Running) -> None:
    log, store = witness.log, witness.store
    cp = f"{origin_prefix(log.origin)}checkpoint/"
    refusals = f"{origin_prefix(log.origin)}refusal/"
    log.append(3)
    log.append(2)
    wait_until(lambda: witness.has(checkpoint_key(log.origin, 5)), timeout=60, what="cosign @5")

    # fork: the key holder signs another tree of the same size
    log.fork("forked").append(5)
    wait_until(lambda: witness.has(refusals), timeout=30, what="the fork refused")
    # rollback: an older, smaller tree, never cosigned
    log.fork("rolled-back").append(4)
    wait_until(
        lambda: witness.has(refusals) and len(store.list(refusals)) == 2,
        timeout=30,
        what="the rollback refused",
    )
    # the genuine log goes on and is still cosigned
    last = log.append(2)
    wait_until(lambda: witness.has(checkpoint_key(log.origin, 7)), timeout=30, what="cosign @7")

    kinds = sorted(json.loads(store.get(o.key))["kind"] for o in store.list(refusals))
    assert kinds == ["fork", "rollback"]
    sizes = [int(o.key.rsplit("/", 1)[1]) for o in store.list(cp)]
    assert sizes[-2:] == [5, 7] and set(sizes) <= {3, 5, 7}  # 3 and 5 may come in one poll
    assert witness.sample("fork") == 1 and witness.sample("rollback") == 1
    health = urllib.request.urlopen(witness.metrics + "/healthz", timeout=5)
    assert health.status == 200

    # verify with a witness required: the log's own signature is not enough ...
    trusted = [log.signer.verifier]
    witnesses = load_witness_verifiers([witness.witness_vkey])
    events, bare = _evidence(log, last.note)
    with pytest.raises(LogError, match="0 trusted witness cosignature"):
        check_run_log(RUN, events, bare, trusted, witnesses=witnesses, min_witnesses=1)
    # ... the checkpoint the witness cosigned passes
    cosigned = store.get(checkpoint_key(log.origin, 7)).decode()
    _, good = _evidence(log, cosigned)
    check_run_log(RUN, events, good, trusted, witnesses=witnesses, min_witnesses=1)

    # SIGTERM: it stops promptly, and its log named both attacks as ALERTs
    t0 = time.monotonic()
    witness.proc.send_signal(signal.SIGTERM)
    _, err = witness.proc.communicate(timeout=15)
    assert witness.proc.returncode == 0, err
    assert time.monotonic() - t0 < 10
    alerts = [line for line in err.splitlines() if "ALERT" in line]
    assert len(alerts) == 2, err
    assert "fork" in alerts[0] and "rollback" in alerts[1]
