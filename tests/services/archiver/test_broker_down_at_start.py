"""The archiver started while its broker is down waits for it, archives once it is up, and
exits 0 on SIGTERM (docs/liveness.md): the service runtime's sessions, as the sequencer's.

One private broker (never the shared one), stopped before the archiver starts, and the real
archiver as a subprocess. The archiver must have met the broker away (a session ended and
was replaced: ``session_restarts`` on /healthz) before the broker comes back; then sealed runs
are written and must reach the archive to their end.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import unique_name
from tests.faults.test_outage import STOP_BOUND_S, Service, wait_for
from tests.kafka_harness import LocalBroker
from tests.services.archiver.helpers import SealedLog, finished_runs
from tests.services.archiver.sealed_factory import sealed_values
from tracevault.archive import open_store
from tracevault.config import Settings
from tracevault.kafka import ensure_topics
from tracevault.transparency import Ed25519Signer

pytestmark = pytest.mark.slow


def test_an_archiver_started_with_the_broker_down_archives_once_it_is_up(
    local_broker_factory: Callable[[], LocalBroker], tmp_path: Path
) -> None:
    broker = local_broker_factory()
    settings = Settings(
        bootstrap_servers=broker.bootstrap,
        topic_prefix=unique_name("arcdown"),
        partitions=2,
        archive_url=f"file://{tmp_path / 'archive'}",
    )
    ensure_topics(settings)
    broker.stop()
    signer = Ed25519Signer.generate("test-log")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRACEVAULT_")}
    env["TRACEVAULT_LOG_VKEYS"] = signer.verifier.vkey
    arc = Service(
        "archiver",
        [
            *("--bootstrap-servers", settings.bootstrap_servers, "--prefix", settings.topic_prefix),
            *("archiver", "--archive", settings.archive_url, "--segment-max-age", "0.5"),
        ],
        env,
        tmp_path / "archiver.log",
    )
    try:
        arc.wait_met_broker_away()
        assert arc.health()[1]["state"] != "running", arc.tail()
        broker.start(keep_data=True)
        sl = SealedLog(settings, signer)
        runs = {f"down-{i}": sealed_values(f"down-{i}", 6) for i in range(4)}
        sl.produce(runs, batch=8)
        store = open_store(settings.archive_url, settings)
        wait_for(
            lambda: finished_runs(store, list(runs)) == len(runs),
            120,
            "the runs in the archive",
            arc.tail,
        )
        arc.proc.send_signal(signal.SIGTERM)
        t0 = time.monotonic()
        code = arc.proc.wait(STOP_BOUND_S + 10)
        took = time.monotonic() - t0
        assert code == 0, arc.tail()
        assert took <= STOP_BOUND_S, f"{took:.1f}s\n{arc.tail()}"
    finally:
        if arc.alive():
            arc.proc.kill()
        arc.proc.wait(30)
