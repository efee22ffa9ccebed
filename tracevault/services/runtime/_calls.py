"""Blocking librdkafka calls under a deadline the caller enforces (docs/liveness.md).

librdkafka does not always honour its own timeout (after a broker outage
``send_offsets_to_transaction`` blocked for minutes), and a main thread blocked in C never
runs Python's signal handlers. :class:`BlockingCalls` runs each call in a daemon worker and
waits at most a deadline; a call past it raises :class:`CallDeadline` and its client is
abandoned. Its own module: the one place a service's thread model is decided, beneath the
supervisor (``_supervisor``) that turns a missed deadline into a new session.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from confluent_kafka import KafkaException

__all__ = [
    "BlockingCalls",
    "CallDeadline",
    "Stopping",
    "close_quietly",
]

log = logging.getLogger(__name__)

T = TypeVar("T")


class CallDeadline(Exception):
    """A client call did not return within its deadline; its client must be abandoned."""


class Stopping(Exception):
    """``stop()`` was asked while a client call was still running past the stop grace."""


@dataclass(slots=True)
class _Job:
    fn: Callable[[], Any]
    done: threading.Event = field(default_factory=threading.Event)
    result: Any = None
    error: BaseException | None = None


class _Worker:
    """One daemon thread running jobs in order; abandoned (never joined) once a job is stuck."""

    def __init__(self, name: str) -> None:
        self.jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while True:
            job = self.jobs.get()
            if job is None:
                return
            try:
                job.result = job.fn()
            except BaseException as exc:
                job.error = exc
            finally:
                job.fn = _done  # drop the client reference held by the closure
                job.done.set()


def _done() -> None:
    return None


class BlockingCalls:
    """Blocking client calls with a deadline the caller enforces, and prompt ``stop()``.

    ``stop`` is the service's stop event: once set, a running call gets ``stop_grace_s`` more
    seconds (the current transaction may still commit), then :class:`Stopping` is raised.
    """

    def __init__(self, name: str, stop: threading.Event, *, stop_grace_s: float = 4.0) -> None:
        self._name = name
        self._stop = stop
        self._grace = stop_grace_s
        self._worker: _Worker | None = None
        self._abandoned = 0

    def call(self, what: str, fn: Callable[[], T], deadline_s: float) -> T:
        worker = self._worker
        if worker is None:
            worker = self._worker = _Worker(f"{self._name}-calls-{self._abandoned}")
        job = _Job(fn)
        worker.jobs.put(job)
        limit = time.monotonic() + deadline_s
        stop_limit: float | None = None
        while not job.done.wait(0.1):
            now = time.monotonic()
            if self._stop.is_set():
                stop_limit = stop_limit or now + self._grace
                if now >= stop_limit:
                    self._abandon()
                    raise Stopping(f"{what} still running after stop was asked")
            if now >= limit:
                self._abandon()
                raise CallDeadline(f"{what} did not return within {deadline_s:.0f}s")
        if job.error is not None:
            raise job.error
        result: T = job.result
        return result

    def _abandon(self) -> None:
        """Leave the stuck worker to finish (or not) on its own; the next call gets a new one."""
        if self._worker is not None:
            self._worker.jobs.put(None)  # it exits after the stuck call, if that ever returns
        self._worker = None
        self._abandoned += 1

    def close(self) -> None:
        if self._worker is not None:
            self._worker.jobs.put(None)
            self._worker = None


def close_quietly(
    calls: BlockingCalls, what: str, close: Callable[[], None], limit_s: float
) -> None:
    """``close()`` within ``limit_s`` or abandoned; a failure is only logged (the client is
    dropped either way)."""
    try:
        calls.call(what, close, limit_s)
    except (KafkaException, RuntimeError, CallDeadline, Stopping) as exc:
        log.info("%s: %s", what, exc)
