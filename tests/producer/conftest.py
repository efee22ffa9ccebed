"""Helpers for the producer tests: read events back from a real broker, spawn an agent."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid

from confluent_kafka import Consumer, TopicPartition

from tests.kafka_harness import ROOT
from tracevault.config import Settings
from tracevault.schemas import TraceEvent, decode_event


def read_partition(
    settings: Settings,
    partition: int,
    count: int,
    *,
    key: bytes | None = None,
    timeout: float = 30.0,
) -> list[tuple[bytes, TraceEvent]]:
    """Messages of ``<prefix>.raw[partition]`` (key, event) in offset order.

    Only those with ``key`` when given. Reads until ``count`` arrived or ``timeout`` passed,
    then until a quiet poll, to catch duplicates; fewer than ``count`` is returned as is,
    for the test to assert on.
    """
    consumer = Consumer(
        {
            "bootstrap.servers": settings.bootstrap_servers,
            "group.id": f"producer-test-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "log_level": 0,
        }
    )
    try:
        consumer.assign([TopicPartition(settings.topics.raw, partition, 0)])
        out: list[tuple[bytes, TraceEvent]] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                if len(out) >= count:
                    break  # a quiet poll after the expected count: no trailing duplicates
                continue
            if msg.error():
                continue
            if key is None or msg.key() == key:
                out.append((msg.key(), decode_event(msg.value())))
        return out
    finally:
        consumer.close()


def read_all(settings: Settings, count: int, *, timeout: float = 30.0) -> list[TraceEvent]:
    """Every event of ``<prefix>.raw`` across partitions (order only within a partition)."""
    deadline = time.monotonic() + timeout
    while True:
        events = [
            ev
            for p in range(settings.partitions)
            for _, ev in read_partition(settings, p, 0, timeout=2.0)
        ]
        if len(events) >= count or time.monotonic() >= deadline:
            return events


def spawn_agent(*args: str, stdin: bool = False) -> subprocess.Popen[str]:
    """A real agent process: ``python *args`` from the repository root, stdout piped."""
    return subprocess.Popen(
        [sys.executable, *args],
        stdin=subprocess.PIPE if stdin else None,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
