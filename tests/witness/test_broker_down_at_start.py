"""The witness started while its broker is down waits for it, cosigns once it is up, and
exits 0 on SIGTERM (docs/liveness.md), as the sequencer and the archiver do.

One private broker (never the shared one), stopped before the witness starts; the real
witness and sequencer as subprocesses (tests/faults/test_outage_all.py's stack). The
witness must have met the broker away (a session ended and was replaced:
``session_restarts`` on /healthz) before the broker comes back; then a sequencer seals a
stream and the witness must cosign its checkpoints.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.faults.test_outage import STOP_BOUND_S, wait_for
from tests.faults.test_outage_all import has_cosigned, stack
from tests.kafka_harness import LocalBroker

pytestmark = pytest.mark.slow


def test_a_witness_started_with_the_broker_down_cosigns_once_it_is_up(
    local_broker_factory: Callable[[], LocalBroker], tmp_path: Path
) -> None:
    broker = local_broker_factory()
    with stack(broker, tmp_path) as (start, _settings, feed):
        broker.stop()
        wit = start("witness")
        wit.wait_met_broker_away()
        code, body = wit.health()
        assert code == 503 and body["state"] != "following", (code, body, wit.tail())
        broker.start(keep_data=True)
        seq = start("sequencer")
        feed.thread.start()

        def diag() -> str:
            return "".join(f"\n--- {s.name}\n{s.tail()}" for s in (wit, seq))

        wait_for(has_cosigned(wit), 120, "the witness's first cosignature", diag)
        assert wit.health()[0] == 200, diag()
        wit.proc.send_signal(signal.SIGTERM)
        t0 = time.monotonic()
        exit_code = wit.proc.wait(STOP_BOUND_S + 10)
        took = time.monotonic() - t0
        assert exit_code == 0, wit.tail()
        assert took <= STOP_BOUND_S, f"{took:.1f}s\n{wit.tail()}"
