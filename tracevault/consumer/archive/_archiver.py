"""The archiver: ``<prefix>.sealed`` (read_committed) into segments in an object store.

Loop, per batch of messages:

1. each sealed value is parsed; its run's cursor (what the archive already holds) is loaded
   with one listing the first time the run is seen;
2. an event at or below the archived seq is skipped (it was archived before a crash); the
   next seq is checked against the chain (prev_hash = last hash, hash = link(prev, raw)) and
   buffered; a seq beyond the next one is a hole and stops the archiver loudly;
3. a run's buffer becomes a segment at RUN_FINISHED (plus the final receipt) or when it
   reaches the configured event count, byte size or age;
4. offsets are committed only up to the first event still buffered in each partition, i.e.
   only for events whose objects are durably written.

A SIGKILL anywhere loses only buffered events, which Kafka re-delivers; the cursor skips what
was written. On revocation the buffers of the revoked partitions are dropped for the same
reason: their new owner reads them again from the committed offset.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from tracevault.chain import link
from tracevault.config import Settings
from tracevault.consumer.archive._sealed import Sealed, parse_sealed
from tracevault.consumer.archive._store import ObjectStore, open_store, utc_now
from tracevault.consumer.archive._writer import ArchiveWriter, RunCursor
from tracevault.errors import ArchiveError, ChainError, ServiceUnavailableError

__all__ = ["Archiver", "ArchiverStats"]

log = logging.getLogger(__name__)

_CURSOR_CACHE = 100_000


@dataclass(slots=True)
class ArchiverStats:
    """Counters since start (also logged on shutdown)."""

    events_archived: int = 0
    events_skipped: int = 0
    segments_written: int = 0
    runs_finished: int = 0


@dataclass(slots=True)
class _Buffer:
    cursor: RunCursor
    partition: int
    first_offset: int
    opened: float
    events: list[Sealed] = field(default_factory=list)
    size: int = 0


class Archiver:
    """Consume the sealed topic and archive every run; ``run()`` until ``stop()``."""

    def __init__(
        self,
        settings: Settings,
        *,
        store: ObjectStore | None = None,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self.settings = settings
        self.store = store or open_store(settings.archive_url, settings)
        self.writer = ArchiveWriter(self.store, retention_days=settings.retention_days, clock=clock)
        self.topic = settings.topics.sealed
        self.group_id = settings.archive_group_id or f"tracevault-archiver.{settings.topic_prefix}"
        self.stats = ArchiverStats()
        self._stop = threading.Event()
        self._cursors: OrderedDict[str, RunCursor] = OrderedDict()
        self._buffers: dict[str, _Buffer] = {}
        self._consumed: dict[int, int] = {}  # partition -> next offset after what was read
        self._committed: dict[int, int] = {}
        self._run_partition: dict[str, int] = {}
        self._assigned_at: float | None = None  # idle time counts from the first assignment

    def stop(self) -> None:
        """Ask ``run()`` to flush, commit and return (safe from a signal handler)."""
        self._stop.set()

    # -- Kafka ------------------------------------------------------------------------------

    def _consumer(self) -> Consumer:
        conf: dict[str, Any] = {
            "group.id": self.group_id,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "log_level": 3,
        }
        if self.settings.archive_instance_id:
            conf["group.instance.id"] = self.settings.archive_instance_id
        return Consumer(self.settings.kafka_config(**conf))

    def _on_assign(self, consumer: Consumer, parts: list[TopicPartition]) -> None:
        self._assigned_at = time.monotonic()
        log.info("archiver assigned %s", [p.partition for p in parts])

    def _on_revoke(self, consumer: Consumer, parts: list[TopicPartition]) -> None:
        gone = {p.partition for p in parts}
        # Unwritten events of revoked partitions are not committed: their next owner
        # re-reads them, and its cursor skips whatever we did write.
        for run_id in [r for r, b in self._buffers.items() if b.partition in gone]:
            del self._buffers[run_id]
        for run_id in [r for r, p in self._run_partition.items() if p in gone]:
            self._cursors.pop(run_id, None)
            del self._run_partition[run_id]
        for p in gone:
            self._consumed.pop(p, None)
            self._committed.pop(p, None)
        log.info("archiver revoked %s", sorted(gone))

    def run(self, *, until_idle: float | None = None) -> ArchiverStats:
        """Archive until ``stop()`` (or ``until_idle`` seconds without a message)."""
        consumer = self._consumer()
        consumer.subscribe(
            [self.topic],
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_revoke,
        )
        log.info("archiving %s to %s (group %s)", self.topic, self.store.url, self.group_id)
        last_msg: float | None = None
        try:
            while not self._stop.is_set():
                msgs = consumer.consume(num_messages=5000, timeout=0.2)
                for msg in msgs:
                    err = msg.error()
                    if err is not None:
                        self._kafka_error(err)
                        continue
                    part, off = msg.partition(), msg.offset()
                    if part is None or off is None:
                        continue  # only error events lack a position
                    self._take(part, off, msg.value())
                if msgs:
                    last_msg = time.monotonic()
                self._flush_aged()
                self._commit(consumer)
                since = last_msg or self._assigned_at
                if (
                    until_idle is not None
                    and since is not None
                    and not self._buffers
                    and time.monotonic() - since >= until_idle
                ):
                    break
            for run_id in list(self._buffers):
                self._flush(run_id)
            self._commit(consumer)
        finally:
            consumer.close()
        log.info(
            "archiver stopped: %d events archived, %d skipped, %d segments, %d runs finished",
            self.stats.events_archived,
            self.stats.events_skipped,
            self.stats.segments_written,
            self.stats.runs_finished,
        )
        return self.stats

    def _kafka_error(self, err: KafkaError) -> None:
        if err.fatal():
            raise ServiceUnavailableError(f"Kafka consumer failed: {err.str()}")
        log.warning("Kafka consumer: %s", err.str())

    def _commit(self, consumer: Consumer) -> None:
        first_buffered: dict[int, int] = {}
        for b in self._buffers.values():
            first_buffered[b.partition] = min(
                b.first_offset, first_buffered.get(b.partition, b.first_offset)
            )
        offsets = []
        for p, consumed in self._consumed.items():
            upto = first_buffered.get(p, consumed)
            if self._committed.get(p) != upto:
                offsets.append(TopicPartition(self.topic, p, upto))
        if not offsets:
            return
        try:
            consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:
            kerr = exc.args[0]
            if kerr.retriable() or kerr.code() in (
                KafkaError.REBALANCE_IN_PROGRESS,
                KafkaError.ILLEGAL_GENERATION,
                KafkaError._NO_OFFSET,
            ):
                log.warning("offset commit deferred: %s", kerr.str())
                return
            raise ServiceUnavailableError(f"Kafka offset commit failed: {kerr.str()}") from exc
        for tp in offsets:
            self._committed[tp.partition] = tp.offset

    # -- runs -------------------------------------------------------------------------------

    def _cursor(self, run_id: str, partition: int) -> RunCursor:
        cur = self._cursors.get(run_id)
        if cur is None:
            cur = self.writer.cursor(run_id)
            self._cursors[run_id] = cur
            self._run_partition[run_id] = partition
            if len(self._cursors) > _CURSOR_CACHE:
                self._evict()
        else:
            self._cursors.move_to_end(run_id)
        return cur

    def _evict(self) -> None:
        for run_id in list(self._cursors)[: _CURSOR_CACHE // 10]:
            if run_id not in self._buffers:
                del self._cursors[run_id]
                self._run_partition.pop(run_id, None)

    def _take(self, partition: int, offset: int, value: bytes | None) -> None:
        self._consumed[partition] = offset + 1
        if value is None:
            raise ArchiveError(f"{self.topic}[{partition}]@{offset} has no value")
        ev = parse_sealed(value, what=f"{self.topic}[{partition}]@{offset}")
        buf = self._buffers.get(ev.run_id)
        cur = buf.cursor if buf is not None else self._cursor(ev.run_id, partition)
        expected = cur.next_seq + (len(buf.events) if buf is not None else 0)
        if cur.finished or ev.seq < expected:
            self.stats.events_skipped += 1
            return
        if ev.seq > expected:
            raise ArchiveError(
                f"run {ev.run_id!r}: {self.topic}[{partition}]@{offset} is seq {ev.seq}, but "
                f"seq {expected} was expected; the sealed topic has a hole (retention shorter "
                "than the archiver's lag?). Operator action: find the missing events before "
                "restarting; the archive never skips a seq"
            )
        prev = buf.events[-1].hash if buf is not None and buf.events else cur.last_hash
        if ev.prev_hash != prev or link(prev, ev.raw) != ev.hash:
            raise ChainError(
                f"run {ev.run_id!r} seq {ev.seq} at {self.topic}[{partition}]@{offset} does "
                "not continue the run's hash chain; refusing to archive it",
                seq=ev.seq,
                obj=f"{self.topic}[{partition}]@{offset}",
            )
        if buf is None:
            buf = _Buffer(cur, partition, offset, time.monotonic())
            self._buffers[ev.run_id] = buf
        buf.events.append(ev)
        buf.size += len(ev.body)
        s = self.settings
        if (
            ev.finishes_run
            or len(buf.events) >= s.archive_segment_max_events
            or buf.size >= s.archive_segment_max_bytes
        ):
            self._flush(ev.run_id)

    def _flush_aged(self) -> None:
        deadline = time.monotonic() - self.settings.archive_segment_max_age_s
        for run_id in [r for r, b in self._buffers.items() if b.opened <= deadline]:
            self._flush(run_id)

    def _flush(self, run_id: str) -> None:
        buf = self._buffers.pop(run_id)
        if not buf.events:
            return
        self.writer.write_segment(buf.cursor, buf.events)
        self.stats.events_archived += len(buf.events)
        self.stats.segments_written += 1
        if buf.cursor.finished:
            self.stats.runs_finished += 1
