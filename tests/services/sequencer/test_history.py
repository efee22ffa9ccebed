"""The sequencer's sealed-history reader cannot hold the main thread through an outage.

It reads in the sequencer's main thread (an event resent with an old seq needs the run's
sealed hashes). Before, with the broker gone it waited out its whole 30 s timeout, and the
same consumer, made once per process, was used again after a broker crash. Here the broker is
unreachable (a free port nobody listens on): the read stops as soon as ``abort`` names a
reason, says which run and why, and the next read gets a fresh consumer.
"""

from __future__ import annotations

import time

import pytest

from tests.kafka_harness import free_port
from tracevault.config import Settings
from tracevault.errors import ServiceUnavailableError
from tracevault.services.sequencer._history import SealedHistory


def test_a_history_read_stops_when_the_brokers_are_away_and_starts_afresh() -> None:
    settings = Settings(bootstrap_servers=f"127.0.0.1:{free_port()}", topic_prefix="hist")
    reasons: list[str | None] = [None, None, "no Kafka broker reachable for 3s"]

    def abort() -> str | None:
        return reasons.pop(0) if len(reasons) > 1 else reasons[0]

    history = SealedHistory(settings, timeout=30.0, abort=abort)
    t0 = time.monotonic()
    with pytest.raises(ServiceUnavailableError) as caught:
        history("run-a", 1, 40, 49)
    took = time.monotonic() - t0
    assert took < 5, f"the read went on {took:.1f}s after abort named a reason"
    assert "run run-a" in str(caught.value) and "hist.sealed[1]" in str(caught.value)
    assert "no Kafka broker reachable for 3s" in str(caught.value)
    assert history._consumer is None  # closed: the next read starts on a fresh consumer
    with pytest.raises(ServiceUnavailableError):
        history("run-a", 1, 40, 49)
    history.close()
