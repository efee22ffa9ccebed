"""Shared helpers of the archive tests: put sealed values on the topic, wait on conditions."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from itertools import zip_longest

from confluent_kafka import Producer

from tracevault.archive import ObjectStore, list_run
from tracevault.config import Settings
from tracevault.consumer.archive import Archiver, ArchiverStats


def produce_sealed(settings: Settings, runs: dict[str, list[bytes]]) -> int:
    """Write each run's sealed values to ``<prefix>.sealed``, runs interleaved, key = run id."""
    producer = Producer(
        settings.kafka_config(
            **{"partitioner": "murmur2_random", "enable.idempotence": True, "linger.ms": 20}
        )
    )
    n = 0
    for row in zip_longest(*[[(r, v) for v in vals] for r, vals in runs.items()]):
        for item in row:
            if item is None:
                continue
            run_id, value = item
            while True:
                try:
                    producer.produce(settings.topics.sealed, key=run_id.encode(), value=value)
                    break
                except BufferError:
                    producer.poll(0.1)
            n += 1
    assert producer.flush(60) == 0
    return n


def wait_for(cond: Callable[[], bool], timeout: float, what: str) -> None:
    """Return once ``cond()`` holds; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        pause.wait(0.05)


def finished_runs(store: ObjectStore, run_ids: list[str]) -> int:
    return sum(1 for r in run_ids if list_run(store, r).has_final)


@contextmanager
def running(archiver: Archiver) -> Iterator[list[ArchiverStats | BaseException]]:
    """Run ``archiver`` in a thread; stop it (flush + commit) when the block ends."""
    out: list[ArchiverStats | BaseException] = []

    def target() -> None:
        try:
            out.append(archiver.run())
        except BaseException as exc:
            out.append(exc)

    t = threading.Thread(target=target, name="archiver", daemon=True)
    t.start()
    try:
        yield out
    finally:
        archiver.stop()
        t.join(60)
        assert not t.is_alive(), "archiver did not stop"
