"""A broker that hangs with events in flight: each still reaches raw exactly once.

Issue 33's stress failure (``test_fault.py`` under two CPU burners: 41 events twice on raw)
had this cause: when no acknowledgement came for ``spool_after_ms`` (a broker slow after its
restart, or one that hangs), the Publisher purged what librdkafka held and spooled it; the
broker then wrote the purged requests it had already received ("possibly persisted" in
librdkafka's words), and the spool's drain sent them a second time. A SIGSTOPped broker
makes this deterministic: the produce request sits in its socket, unanswered, while the
Publisher spools, and is written when the broker continues. The same held for a drain batch:
unacknowledged for 5 s, it was purged, written when the broker continued, and sent again.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

from tests.kafka_harness import LocalBroker, free_port
from tests.producer.conftest import read_partition
from tests.services.sequencer.support import wait_until
from tracevault.config import Settings
from tracevault.kafka import ensure_topics, partition_for
from tracevault.producer import Publisher, Recorder


def _settings(broker: LocalBroker, tmp_path: Path) -> Settings:
    """One partition (the run's), topics created, spooling after 0.5 s without an ack."""
    settings = Settings(
        bootstrap_servers=broker.bootstrap,
        topic_prefix=f"hang-{uuid.uuid4().hex[:8]}",
        partitions=1,
        spool_dir=str(tmp_path / "spool"),
        archive_url=f"file://{tmp_path / 'archive'}",
        spool_after_ms=500,
    )
    ensure_topics(settings)
    return settings


@contextlib.contextmanager
def _hanging(broker: LocalBroker) -> Iterator[None]:
    """The broker SIGSTOPped for the block: connections stay open, nothing is answered, and
    a request already in its socket is written when it continues."""
    os.kill(broker.pid(), signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(broker.pid(), signal.SIGCONT)


def _assert_once_in_order(settings: Settings, run_id: str, total: int) -> None:
    part = partition_for(run_id, settings.partitions)
    got = read_partition(settings, part, total, key=run_id.encode(), timeout=120)
    seqs = [ev.seq for _, ev in got]
    twice = sorted(s for s, n in Counter(seqs).items() if n > 1)
    assert not twice, f"{len(twice)} events twice on raw, e.g. seqs {twice[:5]}"
    assert seqs == list(range(total)), "each event exactly once, in seq order"


def test_events_in_flight_when_the_broker_hangs_are_not_sent_again_from_the_spool(
    local_broker_factory: Callable[[], LocalBroker], tmp_path: Path
) -> None:
    broker = local_broker_factory()
    settings = _settings(broker, tmp_path)
    publisher = Publisher(settings)
    with Recorder(publisher=publisher, agent_id="hang", agent_version="1", input=None) as edges:
        for i in range(20):
            edges.decision("step", i)
        assert publisher.flush(60), "broker up: the first events are delivered"

        with _hanging(broker):
            # Handed to librdkafka and sent: the request waits, unread, in the broker's socket.
            for i in range(20, 120):
                edges.decision("step", i)
            wait_until(
                lambda: publisher.stats().spooling,
                timeout=60,
                what="no acknowledgement: the spool starts",
                every=0.05,
            )
            for i in range(120, 170):  # straight to the spool
                edges.decision("step", i)
            wait_until(
                lambda: publisher.stats().spooled >= 50, timeout=30, what="the later events spooled"
            )
        for i in range(170, 190):
            edges.decision("step", i)
    assert publisher.flush(120), publisher.stats()
    report = publisher.close(timeout=30)
    assert report.ok, report
    assert not list((tmp_path / "spool").glob("*.tvspool"))
    _assert_once_in_order(settings, edges.run_id, 1 + 190 + 1)


def _spool_a_dead_run(settings: Settings, steps: int) -> str:
    """A dead process's spool: a run recorded while Kafka was unreachable, left on disk."""
    dead = settings.model_copy(
        update={"bootstrap_servers": f"127.0.0.1:{free_port()}", "spool_after_ms": 100}
    )
    publisher = Publisher(dead)
    with Recorder(publisher=publisher, agent_id="old", agent_version="1", input=None) as rec:
        for i in range(steps):
            rec.decision("step", i)
    report = publisher.close(timeout=5.0)
    assert report.spooled == steps + 2 and report.lost == 0, report
    return rec.run_id


def test_a_drain_batch_the_hung_broker_writes_late_is_not_sent_again(
    local_broker_factory: Callable[[], LocalBroker], tmp_path: Path
) -> None:
    broker = local_broker_factory()
    settings = _settings(broker, tmp_path)
    steps = 20_000  # four drain batches of 5,000: the broker hangs during one of them
    old_run = _spool_a_dead_run(settings, steps)

    publisher = Publisher(settings)
    with Recorder(publisher=publisher, agent_id="new", agent_version="1", input=None) as rec:
        wait_until(
            lambda: publisher.stats().drained > 0,
            timeout=120,
            what="the adopted spool to drain",
            every=0.05,
        )
        with _hanging(broker):
            # The fault itself lasts 8 s: longer than the 5 s the drain waited before purging.
            threading.Event().wait(8.0)
        rec.decision("after", 1)
    assert publisher.flush(300), publisher.stats()
    report = publisher.close(timeout=30)
    assert report.ok, report
    _assert_once_in_order(settings, old_run, steps + 2)
