"""The archiver's flushes: a partition's verified leaves written in the background, in order.

A flush (``PartitionLog.take_flush``) is handed to a background thread and written after the
partition's previous one, so the checkpoint objects go in order, while the main thread goes on
reading and verifying; offsets follow only once a flush is durable (``Part.durable_offset``,
set here when a written flush is accounted for). Its own object, held by the archiver, the
checkpoint admission and the hole placer: the one place that writes a partition's log.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime, timedelta

from prometheus_client import Histogram

from tracevault.index import IndexStep, IndexWorker
from tracevault.services.archiver._logwriter import FlushJob
from tracevault.services.archiver._state import ArchiverStats, Part

__all__ = ["Flusher"]

_WRITERS = 8  # I/O-bound (fsync, S3 PUT latency): a flush's objects are written in parallel
_FLUSHERS = 4
_BACKLOG = 4  # flushes of a partition taken and not yet written before the archiver waits


class Flusher:
    """Takes a partition's flushes, writes them in the background, accounts for them."""

    def __init__(
        self,
        stats: ArchiverStats,
        timer: Histogram,
        clock: Callable[[], datetime],
        retention: timedelta,
        max_age_s: float,
        *,
        index: IndexStep | IndexWorker | None = None,
    ) -> None:
        self._stats = stats
        # the investigator's index, written with each flush (docs/index.md, "Writing")
        self._index = index
        self._timer = timer
        self._clock = clock
        self._retention = retention
        self._max_age_s = max_age_s
        self._pool = ThreadPoolExecutor(_WRITERS, thread_name_prefix="archive-put")
        self._flusher = ThreadPoolExecutor(_FLUSHERS, thread_name_prefix="archive-flush")

    @property
    def index(self) -> IndexStep | IndexWorker | None:
        """The index step this flusher runs, if any: its CPU counters are what
        bench/archiver_throughput.py reports as the index's write cost."""
        return self._index

    def shutdown(self) -> None:
        self._flusher.shutdown(wait=True)
        self._pool.shutdown(wait=True)
        if isinstance(self._index, IndexWorker):
            self._index.close()  # its child, once no flush can ask it anything

    def due(self, parts: Iterable[Part], *, caught_up: bool) -> None:
        """Flush what is old enough, or everything once a poll came back empty: the
        archiver has caught up with the topic, and waiting longer only adds latency; then
        account for the flushes written meanwhile."""
        deadline = time.monotonic() - self._max_age_s
        parts = list(parts)
        for part in parts:
            if part.log.unflushed and (caught_up or part.opened <= deadline):
                self.flush(part)
        for part in parts:
            while part.flights and part.flights[0][0].done():
                self._wait_oldest(part)

    def flush(self, part: Part) -> None:
        """Hand the partition's verified leaves to a background flush, written after the
        partition's previous one (the checkpoint objects go in order).

        The main thread does not wait for the previous one to be written (on a disk where
        creating files is dear that wait was a fifth of the archiver's time), only when
        ``_BACKLOG`` flushes of the partition are already queued. A flush is taken at the
        same points as when it waited, so a flush redone after a crash ends at the same
        size and writes the same objects."""
        plog = part.log
        if not plog.unflushed:
            return
        while len(part.flights) >= _BACKLOG:
            self._wait_oldest(part)
        index = self._index.take(plog) if self._index is not None else None
        job = plog.take_flush(self._clock() + self._retention)
        job.index = index
        before = part.flights[-1][0] if part.flights else None
        fut = self._flusher.submit(_after, before, job, self._pool, self._timer)
        part.flights.append((fut, job, part.ready_offset))

    def wait(self, part: Part) -> None:
        """Wait for every flush of the partition taken so far (an error is raised)."""
        while part.flights:
            self._wait_oldest(part)

    def _wait_oldest(self, part: Part) -> None:
        """Wait for the partition's oldest flush in flight; account for it."""
        fut, job, offset = part.flights[0]
        try:
            objects, written_at = fut.result()
        except BaseException:
            part.flights.clear()  # the later ones failed with it (_after)
            raise
        part.flights.pop(0)
        done = not part.log.unflushed and not part.flights
        part.durable_offset = part.ready_offset if done else offset
        st = self._stats
        st.events_archived += job.leaves
        st.segments_written += 1
        st.objects_written += objects
        st.runs_finished += job.finished
        st.last_write_at = written_at


def _after(
    before: Future[tuple[int, float]] | None,
    job: FlushJob,
    pool: ThreadPoolExecutor,
    timer: Histogram,
) -> tuple[int, float]:
    """Write ``job`` once the partition's previous flush is written (its error stops this
    one too, before any of its objects: the checkpoints never skip one); the objects
    written and when the last one was (``last_write_at``: not when the main thread next
    looks)."""
    if before is not None:
        before.result()
    started = time.monotonic()
    objects = job.write(pool)
    done = time.monotonic()
    timer.observe(done - started)  # the write alone, not the wait for the one before
    return objects, done
