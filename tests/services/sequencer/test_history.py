"""The sequencer's sealed-history reader cannot hold the main thread through an outage.

It reads in the sequencer's main thread (an event resent with an old seq needs the run's
sealed hashes). Before, with the broker gone it waited out its whole 30 s timeout, and the
same consumer, made once per process, was used again after a broker crash. Here the broker is
unreachable (a free port nobody listens on): the read stops as soon as ``abort`` names a
reason, says which run and why, and the next read gets a fresh consumer.
"""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import Message

from tests.kafka_harness import free_port
from tests.services.sequencer.support import raw_event
from tracevault.chain import genesis, link
from tracevault.config import Settings
from tracevault.errors import ServiceUnavailableError
from tracevault.heads import Head
from tracevault.services.runtime import BlockingCalls, KafkaWatch, Restart
from tracevault.services.sequencer import RunBook
from tracevault.services.sequencer._history import SealedHistory
from tracevault.services.sequencer._log import PartitionLogs
from tracevault.services.sequencer._metrics import SequencerMetrics
from tracevault.services.sequencer._step import SequencerStep
from tracevault.transparency import load_signer


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


def test_a_history_read_the_broker_does_not_answer_ends_the_session_not_the_sequencer() -> None:
    """The rules read a restored run's sealed hashes (an old seq sent again) while no broker
    is up: the step ends the session as an outage (``Restart``, and the watch told), for the
    runtime to start a new one. Raised on as it was, the sequencer exited 3 in a broker kill
    (tests/faults/test_outage_all.py, stop 41's pre-landing CI)."""
    settings = Settings(bootstrap_servers=f"127.0.0.1:{free_port()}", topic_prefix="hist")
    watch = KafkaWatch("hist")
    stop = threading.Event()
    step = SequencerStep(
        settings, instance_id="hist", logs=PartitionLogs(settings, load_signer()),
        metrics=SequencerMetrics("hist"), watch=watch, calls=BlockingCalls("hist", stop),
        stopping=stop, on_error=lambda err: None,
    )  # fmt: skip
    step.book = RunBook(raw_topic=settings.topics.raw, partitions=1, sequencer_id="hist",
                        gap_timeout_us=1_000, max_gap=100, history=step.history)  # fmt: skip
    r0, r1 = raw_event("r", 0), raw_event("r", 1)
    h1 = link(link(genesis("r"), r0), r1)
    step.book.restore([Head("r", 2, h1, False, 0, 0, 1)])
    watch.trouble()
    watch.down_since = time.monotonic() - 60  # no broker up for a minute
    resent = Message(topic=settings.topics.raw, partition=0, offset=7, key=b"r", value=r0)
    try:
        with pytest.raises(Restart) as caught:
            step.take([resent])
    finally:
        step.history.close()
    assert "sealed history" in str(caught.value) and "no Kafka broker reachable" in str(
        caught.value
    )
    assert isinstance(caught.value.__cause__, ServiceUnavailableError)
