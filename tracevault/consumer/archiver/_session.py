"""The archiver's Kafka session: its consumer, the poll loop, rebalances and offset commits.

Liveness (docs/liveness.md): offset commits run with a deadline and transient commit errors
are retried with backoff. A commit past its deadline, a fatal consumer error, or a fencing
right after a broker outage ends the Kafka session: every partition's unflushed state is
forgotten as on a revocation, and a new consumer resumes from the committed offsets.

Split from ``_archiver`` so that a newcomer finds the client handling in one room and the
archiver's own per-batch work (take, verify, flush) in another. A mixin of
:class:`~tracevault.consumer.archiver._archiver.Archiver`, which sets the state declared here
in its ``__init__`` (``Archiver.run`` hands the session methods to the shared supervisor).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from tracevault.config import Settings
from tracevault.consumer.archiver._state import ArchiverStats
from tracevault.consumer.archiver._state import Part as _Part
from tracevault.errors import ServiceUnavailableError
from tracevault.kafka import sealed_generation
from tracevault.runtime.liveness import (
    BlockingCalls,
    Health,
    KafkaWatch,
    LagReader,
    OffsetCommits,
    Restart,
    Sessions,
    close_quietly,
    raise_for,
)

__all__ = ["KafkaSession"]

# the archiver logs under one name wherever its code sits (log filters)
log = logging.getLogger("tracevault.consumer.archiver._archiver")

_REPORT_EVERY_S = 60.0  # an INFO line with the counters, for operators tailing the log
_GENERATION_S = 30.0  # the sealed topic's metadata, when a session starts
_CLOSE_S = 3.0  # on stop; a session being replaced waits longer
_REPLACE_CLOSE_S = 10.0  # a consumer still alive after this may rejoin and fence the new one
_LAG_EVERY_S = 1.0


class KafkaSession:
    """The archiver's Kafka client handling; the archiver provides what is declared here."""

    settings: Settings
    topic: str
    group_id: str
    stats: ArchiverStats
    watch: KafkaWatch
    health: Health
    _stop: threading.Event
    _parts: dict[int, _Part]
    _consumed: dict[int, int]  # partition -> next offset after what was read
    _committed: dict[int, int]
    _calls: BlockingCalls
    _sessions: Sessions
    _commits: OffsetCommits
    _live: Consumer | None
    _assigned: bool  # an assignment (maybe empty) came in this session
    _lost: bool
    _session_started: float
    _lag_reader: LagReader  # per session: the committed offsets it remembers
    _generation: str  # of the sealed topic (the log origins'), learnt per session
    _assigned_at: float | None  # idle time counts from the first assignment

    def _take_all(self, msgs: list[Message]) -> None:
        raise NotImplementedError

    def _flush_due(self, *, caught_up: bool = False) -> None:
        raise NotImplementedError

    def _flush(self, part: _Part) -> None:
        raise NotImplementedError

    def _reap(self) -> None:
        raise NotImplementedError

    def _wait(self, part: _Part) -> None:
        raise NotImplementedError

    def _poll_s(self) -> float:
        raise NotImplementedError

    def _log_stats(self, state: str) -> None:
        raise NotImplementedError

    def _consumer(self) -> Consumer:
        conf: dict[str, Any] = {
            "group.id": self.group_id,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            # Bigger fetches: segments are written in bulk, and librdkafka's 1 MiB default
            # per partition made fetch round trips the archiver's bottleneck.
            "max.partition.fetch.bytes": 8 * 1024 * 1024,
            "session.timeout.ms": self.settings.archive_session_timeout_ms,
            "log_level": 3,
            **self.watch.client_config(),
        }
        if self.settings.archive_instance_id:
            conf["group.instance.id"] = self.settings.archive_instance_id
        return Consumer(self.settings.kafka_config(**conf))

    def _on_assign(self, consumer: Consumer, parts: list[TopicPartition]) -> None:
        self._assigned_at = time.monotonic()
        self._assigned = consumer is self._live
        log.info("archiver assigned %s", [p.partition for p in parts])

    def _on_revoke(self, consumer: Consumer, parts: list[TopicPartition]) -> None:
        if consumer is not self._live:
            return  # an abandoned session's consumer closing late: its state is gone already
        self._forget({p.partition for p in parts})

    def _on_lost(self, consumer: Consumer, parts: list[TopicPartition]) -> None:
        if consumer is not self._live:
            return
        self._forget({p.partition for p in parts})
        # The group session expired (a broker outage): a static member would come back
        # fenced and its commits were seen to hang; the session loop starts a new consumer.
        self._lost = True
        self.watch.trouble()

    def _forget(self, gone: set[int] | None) -> None:
        """Drop what was read of ``gone`` (None: every partition); flushes are synchronous,
        so nothing of ours is written after this. Unflushed and pending records are not
        committed: the next owner re-reads them and resumes from the archive's checkpoint."""
        if gone is None:
            gone = set(self._parts) | set(self._consumed)
        for p in gone:
            part = self._parts.get(p)
            if part is not None:
                self._wait(part)  # nothing of ours is written after the partition moves on
        for p in gone:
            self._parts.pop(p, None)
            self._consumed.pop(p, None)
            self._committed.pop(p, None)
        log.info("archiver revoked %s", sorted(gone))

    def _start_session(self) -> Consumer:
        consumer = self._live = self._consumer()
        consumer.subscribe(
            [self.topic],
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_lost,
        )
        self._lost = self._assigned = False
        self._session_started = time.monotonic()
        self._lag_reader = LagReader()
        return consumer

    def _end_session(self, consumer: Consumer) -> None:
        self._live = None
        self._close_consumer(consumer)

    def _session(self, consumer: Consumer, until_idle: float | None) -> None:
        try:
            # on the calls' worker: a broker away blocks this metadata call up to its timeout,
            # and a SIGTERM must still stop the archiver within its bound (docs/liveness.md)
            self._generation = self._calls.call(
                "describing the sealed topic",
                lambda: sealed_generation(self.settings, timeout=_GENERATION_S),
                _GENERATION_S + 5.0,
            )
        except ServiceUnavailableError as exc:
            raise Restart(str(exc)) from exc
        self.health.state = "running"
        last_msg: float | None = None
        next_report = time.monotonic() + _REPORT_EVERY_S
        next_lag = 0.0
        while not self._stop.is_set():
            try:
                # What is queued, at once; only when nothing is, wait (up to _poll_s) for
                # the first record: a batch short of 1000 does not wait out the timeout,
                # and a poll is still empty only after that long without any record.
                msgs = consumer.consume(num_messages=1000, timeout=0)
                if not msgs:
                    msgs = consumer.consume(num_messages=1, timeout=self._poll_s())
            except KafkaException as exc:
                self._kafka_error(exc.args[0])
                log.warning("Kafka consumer: %s", exc.args[0].str())
                msgs = []
            if self._lost:
                raise Restart("the consumer lost its partitions (group session expired)")
            self.watch.check_session(
                self._session_started, self.settings.archive_session_timeout_ms
            )
            if msgs and self.stats.first_message_at is None:
                self.stats.first_message_at = time.monotonic()
            if msgs:
                self._take_all(msgs)
                last_msg = time.monotonic()
                self.health.progressed()
                self._sessions.progressed()
            self._flush_due(caught_up=not msgs)
            self._reap()
            self._commit(consumer)
            now = time.monotonic()
            if now >= next_lag:
                next_lag = now + _LAG_EVERY_S
                self._update_lag(consumer)
            if now >= next_report:
                next_report = now + _REPORT_EVERY_S
                self._log_stats("archiving")
            if until_idle is not None and self._idle(consumer, last_msg, until_idle):
                break
        for part in self._parts.values():
            self._flush(part)
        for part in self._parts.values():
            self._wait(part)
        self._commit(consumer, final=True)

    def _close_consumer(self, consumer: Consumer) -> None:
        close_s = _CLOSE_S if self._stop.is_set() else _REPLACE_CLOSE_S
        close_quietly(self._calls, "archiver consumer close", consumer.close, close_s)

    def _update_lag(self, consumer: Consumer) -> None:
        try:
            self.health.set_lag(self._lag_reader.total(consumer, self._assigned))
        except KafkaException as exc:
            log.debug("lag not updated: %s", exc)

    def _idle(self, consumer: Consumer, last_msg: float | None, until_idle: float) -> bool:
        """Nothing unflushed, no message for ``until_idle`` s, and every assigned partition
        fetched at least once (so a slow first fetch is not taken for idleness). Pending
        records (no checkpoint yet) do not keep it busy: only a checkpoint resolves them."""
        since = last_msg or self._assigned_at
        if since is None or time.monotonic() - since < until_idle:
            return False
        if any(p.log.unflushed or p.flights for p in self._parts.values()):
            return False
        for tp in consumer.assignment():
            _low, high = consumer.get_watermark_offsets(tp, cached=True)
            if high < 0:
                return False
        return True

    def _kafka_error(self, err: KafkaError) -> None:
        """A fencing or fatal error ends the session (or stops: a rival); others are logged
        (a commit error is logged once, where it is deferred)."""
        raise_for(
            err,
            self.watch,
            max(60.0, 3 * self.settings.archive_session_timeout_ms / 1000.0),
            f"the archiver was fenced: another archiver runs with --instance-id "
            f"{self.settings.archive_instance_id}; this one stopped. Give each archiver its "
            "own --instance-id",
        )

    def _commit(self, consumer: Consumer, *, final: bool = False) -> None:
        offsets = []
        for p, consumed in self._consumed.items():
            part = self._parts.get(p)
            upto: int | None = consumed
            if part is not None and (part.pending or part.log.unflushed or part.flights):
                upto = part.durable_offset
            if upto is not None and self._committed.get(p) != upto:
                offsets.append(TopicPartition(self.topic, p, upto))
        if not offsets or not self._commits.commit(consumer, offsets, final=final):
            return
        self.health.progressed()
        self._sessions.progressed()
        for tp in offsets:
            self._committed[tp.partition] = tp.offset
