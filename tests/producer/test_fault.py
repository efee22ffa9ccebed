"""Fault test: the broker stops in the middle of a run and comes back; nothing is lost.

Uses a private broker (``local_broker_factory``) so the shared one is never touched.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.kafka_harness import LocalBroker
from tests.producer.conftest import read_partition
from tracevault.config import Settings
from tracevault.kafka import ensure_topics, partition_for
from tracevault.producer import Publisher, Recorder
from tracevault.schemas import EventKind


def wait_until(cond: Callable[[], bool], timeout: float, what: str) -> None:
    done = threading.Event()
    for _ in range(int(timeout / 0.05)):
        if cond():
            return
        done.wait(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def test_broker_stops_mid_run_and_every_event_arrives_once_in_order(
    local_broker_factory: Callable[[], LocalBroker], tmp_path: Path
) -> None:
    broker = local_broker_factory()
    settings = Settings(
        bootstrap_servers=broker.bootstrap,
        topic_prefix=f"fault-{uuid.uuid4().hex[:8]}",
        partitions=3,
        spool_dir=str(tmp_path / "spool"),
        archive_url=f"file://{tmp_path / 'archive'}",
        spool_after_ms=1000,
    )
    ensure_topics(settings)
    publisher = Publisher(settings)
    calls: list[int] = []

    def lookup(args: Any) -> Any:
        calls.append(args["i"])
        return {"i": args["i"], "pad": "x" * 500}

    with Recorder(
        publisher=publisher,
        agent_id="fault-bot",
        agent_version="1",
        tools={"lookup": lookup},
        input={"task": "fault"},
    ) as edges:
        for i in range(40):
            edges.tool("lookup", {"i": i})
        assert publisher.flush(60), "broker up: the first events are delivered"

        broker.stop()
        # The agent keeps going with the broker down: every call returns (nothing waits on
        # the network), first into librdkafka's queue, then into the spool.
        for i in range(40, 240):
            edges.tool("lookup", {"i": i})
            edges.clock()
        wait_until(lambda: publisher.stats().spooled > 0, 60, "events to reach the spool")
        for i in range(240, 300):
            edges.tool("lookup", {"i": i})
        wait_until(lambda: publisher.stats().spooled >= 260, 30, "the later events to be spooled")
        stats = publisher.stats()
        assert stats.spooling and stats.delivered < 300

        broker.start(keep_data=True)
        for i in range(300, 340):
            edges.tool("lookup", {"i": i})
        edges.finish({"done": len(calls)})

    assert publisher.flush(120), publisher.stats()
    report = publisher.close(timeout=30)
    assert report.ok, report
    assert not list((tmp_path / "spool").glob("*.tvspool"))

    total = 1 + 340 + 200 + 1
    part = partition_for(edges.run_id, settings.partitions)
    got = read_partition(settings, part, total, key=edges.run_id.encode(), timeout=60)
    seqs = [ev.seq for _, ev in got]
    assert len(seqs) == total, f"{len(seqs)} events, {total - len(set(seqs))} missing"
    assert seqs == list(range(total)), "each event exactly once, in seq order"
    assert got[-1][1].kind is EventKind.RUN_FINISHED
    # Nothing of this run went to another partition.
    for other in set(range(settings.partitions)) - {part}:
        assert read_partition(settings, other, 0, key=edges.run_id.encode(), timeout=3) == []
