"""Sending spooled events back to Kafka, in order, committing a durable cursor as they land.

Used by the Publisher's background thread (its own spool and segments left by dead
processes) and by ``tracevault spool drain``. Protocol for one batch:

1. read up to ``batch`` intact records after the segment's cursor;
2. produce them in file order (idempotent producer, so Kafka keeps that order);
3. serve delivery reports until all are acknowledged, or the drainer gives up: ``timeout``
   passes with none arriving (each acknowledgement restarts the wait), or, with
   ``timeout=None`` (the Publisher's own drain), only when ``give_up()`` says so (it closes);
4. on giving up purge what is left, so nothing of this batch can land later, out of order;
5. commit the cursor past the longest acknowledged prefix (a purged record after an
   acknowledged one is sent again next time).

A purged record may have been written by the broker all the same (its request sent, the
acknowledgement not yet back: librdkafka calls it "possibly persisted"), and sending it
again puts it on ``raw`` twice. So the Publisher never purges a batch while it lives: its
idempotent producer retries without a deadline and delivers each record exactly once, in
order, when the broker comes back (a broker away for hours only keeps the batch in memory,
the records are in the segment anyway). Only ``tracevault spool drain``, which must end,
purges after ``timeout`` without progress, and a Publisher that closes before its batch is
acknowledged; then a record can reach ``raw`` twice, the same bytes, which the sequencer
drops (docs/design.md, "The spool").

``between`` (the Publisher's spooling of the agent's new events) runs every ``SERVE_EVERY``
records in steps 1 and 2 and every 10 ms in step 3: on a saturated CPU, reading and producing
a batch of 5,000 takes longer than the spool's 100 ms bound.

An event recorded longer ago than ``spool_max_age_s`` is not sent: the sequencer forgets a
finished run after a bounded horizon, and could not tell such a late resend from a new run
(docs/fleet.md). It is appended to the spool's ``rejected/`` folder (the same segment format,
never drained), counted and logged as an error: refused and reported, never dropped.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, Producer

from tracevault.config import Settings
from tracevault.producer._spool import SpoolRecord, SpoolSegment, SpoolWriter
from tracevault.schemas import decode_event
from tracevault.schemas.fast import event_time

__all__ = ["SERVE_EVERY", "BatchResult", "TooOld", "drain_batch", "rejected_sink"]

logger = logging.getLogger(__name__)

#: Records read or produced between two calls of ``between`` (a few ms of work unloaded).
SERVE_EVERY = 256


def _nothing() -> None:
    return None


@dataclass(frozen=True, slots=True)
class BatchResult:
    """What one batch did: the new cursor, records delivered, and whether any are left."""

    offset: int
    delivered: int
    read: int
    complete: bool
    reached_end: bool
    error: str | None = None
    rejected: int = 0


@dataclass(slots=True)
class TooOld:
    """Where events older than ``max_age_us`` go instead of Kafka, and how many went."""

    max_age_us: int
    writer: SpoolWriter
    count: int = 0

    def split(
        self, records: list[SpoolRecord], now_us: int, between: Callable[[], None] = _nothing
    ) -> list[SpoolRecord]:
        """The records young enough to send; the others are written to ``writer``."""
        cutoff = now_us - self.max_age_us
        keep: list[SpoolRecord] = []
        old: list[SpoolRecord] = []
        for i, rec in enumerate(records, 1):
            if i % SERVE_EVERY == 0:
                between()
            at = event_time(rec.value)
            if at is None:
                try:
                    at = decode_event(rec.value, check_json=False).at
                except Exception:
                    at = now_us
            (old if at < cutoff else keep).append(rec)
        if old:
            self.writer.append([(r.key, r.value) for r in old])
            self.count += len(old)
            logger.error(
                "spool: %d event(s) recorded more than %.0fs ago (spool_max_age_s) were not sent: "
                "the sequencer may have forgotten their runs; kept in %s for inspection",
                len(old),
                self.max_age_us / 1e6,
                self.writer.path,
            )
        return keep


def rejected_sink(settings: Settings, topic: str) -> TooOld:
    """Where a drain puts events older than ``spool_max_age_s``: ``<spool>/rejected/``."""
    writer = SpoolWriter(Path(settings.spool_dir) / "rejected", topic)
    return TooOld(int(settings.spool_max_age_s * 1_000_000), writer)


def _never() -> bool:
    return False


def _settle(
    producer: Producer,
    timeout: float | None,
    between: Callable[[], None],
    give_up: Callable[[], bool] = _never,
) -> bool:
    """Wait for the batch's delivery reports; purge what stays unacknowledged ``timeout``
    after the last progress, or (``timeout=None``) once ``give_up()``. True when every
    report is in (the queue is empty).

    The producer holds nothing but this batch (the Publisher drains only while spooling,
    once everything it produced directly is acknowledged), so an empty queue means every
    report is in. ``timeout`` is patience without progress, not a budget for the batch: a
    purge of a record Kafka wrote but had not acknowledged yet is what makes a resend a
    duplicate, so never purge while acknowledgements are still arriving (a broker that has
    just come back can take seconds for the first ones).
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    left = len(producer)
    while left > 0 and not give_up() and (deadline is None or time.monotonic() < deadline):
        producer.poll(0.01)  # and serve ``between`` (the Publisher's spool) every 10 ms
        between()
        now_left = len(producer)
        if now_left < left and timeout is not None:
            deadline = time.monotonic() + timeout
        left = now_left
    if len(producer) > 0:
        producer.purge(in_queue=True, in_flight=True)
        purge_deadline = time.monotonic() + 5.0
        while len(producer) > 0 and time.monotonic() < purge_deadline:
            producer.poll(0.01)
            between()
    producer.poll(0)
    return len(producer) == 0


def drain_batch(
    producer: Producer,
    segment: SpoolSegment,
    *,
    start: int,
    end: int | None = None,
    batch: int = 5000,
    timeout: float | None = 5.0,
    between: Callable[[], None] = _nothing,
    too_old: TooOld | None = None,
    give_up: Callable[[], bool] = _never,
) -> BatchResult:
    """Send one batch of ``segment`` from byte ``start``; see the module docstring."""
    records: list[SpoolRecord] = []
    for rec in segment.records(start, end, limit=batch):
        records.append(rec)
        if len(records) % SERVE_EVERY == 0:
            between()
    reached_end = len(records) < batch
    if not records:
        return BatchResult(start, 0, 0, True, True)
    rejected = 0
    last_end = records[-1].end
    if too_old is not None:
        young = too_old.split(records, time.time_ns() // 1000, between)
        rejected = len(records) - len(young)
        if not young:  # all too old, and kept in rejected/: the cursor moves past them
            segment.commit(last_end)
            return BatchResult(last_end, 0, len(records), True, reached_end, None, rejected)
        # A batch cut short is read again from the cursor: its too-old records are then
        # kept in rejected/ a second time (never lost; `spool status` counts files).
        records = young
    failed = [False] * len(records)
    last_error: list[str] = []

    def on_failure(i: int) -> Callable[[Any, Any], None]:
        # With delivery.report.only.error only failures (purges included) call back.
        def cb(err: KafkaError | None, _msg: Any) -> None:
            if err is None:
                return
            failed[i] = True
            if err.code() not in (KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT):
                last_error[:] = [err.str()]

        return cb

    produced = 0
    for i, rec in enumerate(records):
        try:
            producer.produce(segment.topic, rec.value, rec.key, on_delivery=on_failure(i))
        except BufferError:
            break  # the local queue is full: what was produced is this batch
        produced += 1
        if produced % SERVE_EVERY == 0:
            between()
    settled = _settle(producer, timeout, between, give_up)
    prefix = 0
    while settled and prefix < produced and not failed[prefix]:
        prefix += 1
    offset = records[prefix - 1].end if prefix else start
    complete = prefix == len(records)
    if complete and rejected:
        offset = max(offset, last_end)
    if prefix or (complete and rejected):
        segment.commit(offset)
    error = None
    if not complete:
        waited = "before the drainer gave up" if timeout is None else f"within {timeout:g}s"
        error = last_error[0] if last_error else f"no acknowledgement {waited}"
        logger.info(
            "spool %s: %s of %s records delivered (%s)", segment.path, prefix, len(records), error
        )
    return BatchResult(
        offset, prefix, len(records), complete, reached_end and complete, error, rejected
    )
