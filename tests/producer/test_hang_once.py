"""A broker that hangs with events in flight: each still reaches raw exactly once.

Issue 33's stress failure (``test_fault.py`` under two CPU burners: 41 events twice on raw)
had this cause: when no acknowledgement came for ``spool_after_ms`` (a broker slow after its
restart, or one that hangs), the Publisher purged what librdkafka held and spooled it; the
broker then wrote the purged requests it had already received ("possibly persisted" in
librdkafka's words), and the spool's drain sent them a second time. A SIGSTOPped broker
makes this deterministic: the produce request sits in its socket, unanswered, while the
Publisher spools, and is written when the broker continues.
"""

from __future__ import annotations

import os
import signal
import threading
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.kafka_harness import LocalBroker
from tests.producer.conftest import read_partition
from tracevault.config import Settings
from tracevault.kafka import ensure_topics, partition_for
from tracevault.producer import Publisher, Recorder


def wait_until(cond: Callable[[], bool], timeout: float, what: str) -> None:
    done = threading.Event()
    for _ in range(int(timeout / 0.05)):
        if cond():
            return
        done.wait(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def test_events_in_flight_when_the_broker_hangs_are_not_sent_again_from_the_spool(
    local_broker_factory: Callable[[], LocalBroker], tmp_path: Path
) -> None:
    broker = local_broker_factory()
    settings = Settings(
        bootstrap_servers=broker.bootstrap,
        topic_prefix=f"hang-{uuid.uuid4().hex[:8]}",
        partitions=1,
        spool_dir=str(tmp_path / "spool"),
        archive_url=f"file://{tmp_path / 'archive'}",
        spool_after_ms=500,
    )
    ensure_topics(settings)
    publisher = Publisher(settings)

    def lookup(args: Any) -> Any:
        return {"i": args["i"]}

    stopped = False
    try:
        with Recorder(
            publisher=publisher,
            agent_id="hang-bot",
            agent_version="1",
            tools={"lookup": lookup},
            input={"task": "hang"},
        ) as edges:
            for i in range(20):
                edges.tool("lookup", {"i": i})
            assert publisher.flush(60), "broker up: the first events are delivered"

            os.kill(broker.pid(), signal.SIGSTOP)
            stopped = True
            # Handed to librdkafka and sent: the request waits, unread, in the broker's socket.
            for i in range(20, 120):
                edges.tool("lookup", {"i": i})
            wait_until(
                lambda: publisher.stats().spooling, 60, "no acknowledgement: the spool starts"
            )
            for i in range(120, 170):  # straight to the spool
                edges.tool("lookup", {"i": i})
            wait_until(lambda: publisher.stats().spooled >= 50, 30, "the later events spooled")

            os.kill(broker.pid(), signal.SIGCONT)
            stopped = False
            for i in range(170, 190):
                edges.tool("lookup", {"i": i})
            edges.finish({"done": True})
        assert publisher.flush(120), publisher.stats()
    finally:
        if stopped:
            os.kill(broker.pid(), signal.SIGCONT)
    report = publisher.close(timeout=30)
    assert report.ok, report
    assert not list((tmp_path / "spool").glob("*.tvspool"))

    total = 1 + 190 + 1
    part = partition_for(edges.run_id, settings.partitions)
    got = read_partition(settings, part, total, key=edges.run_id.encode(), timeout=60)
    seqs = [ev.seq for _, ev in got]
    twice = sorted(s for s, n in Counter(seqs).items() if n > 1)
    assert not twice, f"{len(twice)} events twice on raw, e.g. seqs {twice[:5]}"
    assert seqs == list(range(total)), "each event exactly once, in seq order"
