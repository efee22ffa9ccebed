"""The one consumer session loop a service's step runs in (docs/liveness.md).

:class:`ConsumerRuntime` owns everything a consuming service does with Kafka, so a step only
says what a batch means: it builds the consumer (through :mod:`tracevault.kafka`), subscribes
and follows assignment, revocation and loss, polls, commits offsets at a cadence under a
deadline, reads the lag, logs a report, stops on idle or on ``stop()``, and hands a session
that cannot go on to :class:`Sessions`, which starts a new one with backoff (a broker that is
down when the service starts is such a session: it waits for it). The step is any object
with the methods of :class:`Step`; it holds its own parts and inherits nothing from here.

A session, numbered as it runs:

1. a consumer is built and subscribed; ``step.restore`` reads what the step needs from the
   cluster before it consumes (under a deadline; a broker away ends the session);
2. loop until stop: consume a batch (what is queued at once, else wait ``step.poll_s()`` for
   one record), ``step.take(batch)``, ``step.flush_due(caught_up=not batch)``, commit
   ``step.committable()`` when due, read the lag every second, report every minute;
3. on stop (or idle): ``step.drain()`` writes what it holds, then a final commit;
4. a revocation or loss calls ``step.release(partitions)``; a session that ends with
   :class:`Restart` calls ``step.release(None)``: nothing read and unwritten is committed,
   the next owner (or session) re-reads it from the committed offsets.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, cast

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from tracevault.config import Settings
from tracevault.errors import ServiceUnavailableError
from tracevault.kafka import new_consumer
from tracevault.services.runtime._calls import BlockingCalls, close_quietly
from tracevault.services.runtime._health import Health
from tracevault.services.runtime._step import Step, Subscription, TransactionalStep
from tracevault.services.runtime._supervisor import LagReader, OffsetCommits, Sessions
from tracevault.services.runtime._transactions import Transactions
from tracevault.services.runtime._watch import KafkaWatch, Restart, raise_for

__all__ = ["ConsumerRuntime"]

log = logging.getLogger(__name__)

_CLOSE_S = 3.0  # on stop; a session being replaced waits longer
_REPLACE_CLOSE_S = 10.0  # a consumer still alive after this may rejoin and fence the new one
_LAG_EVERY_S = 1.0


class ConsumerRuntime:
    """One consuming service's Kafka sessions, one after another until ``stop()``."""

    def __init__(self, settings: Settings, sub: Subscription) -> None:
        self.settings = settings
        self.sub = sub
        self.stopping = threading.Event()
        self.calls = BlockingCalls(sub.name, self.stopping)
        self.watch = KafkaWatch(sub.name)
        self.health = Health(sub.service, settings.health_stall_s)
        self.health.watch = self.watch
        self.sessions = Sessions(sub.name, self.stopping, self.health)
        self.commits = OffsetCommits(
            sub.name,
            self.calls,
            self.watch,
            self.kafka_error,
            deadline_s=sub.commit_deadline_s,
            every_s=sub.commit_every_s,
        )
        self._live: Consumer | None = None
        self._step: Step | None = None
        self.committed: dict[int, int] = {}
        self._assigned = False  # an assignment (maybe empty) came in this session
        self._assigned_at: float | None = None  # idle time counts from the first assignment
        self._lost = False
        self._started = 0.0
        self._lag = LagReader()
        # the transactional commit mode (``_transactions``): with a transactional.id
        self.txn: Transactions | None = None
        if sub.transactional_id is not None:
            self.txn = Transactions(
                settings,
                name=sub.name,
                transactional_id=sub.transactional_id,
                timeout_ms=sub.transaction_timeout_ms,
                producer_config=sub.producer_config,
                calls=self.calls,
                watch=self.watch,
                health=self.health,
                sessions=self.sessions,
                stopping=self.stopping,
                on_error=self.kafka_error,
                check_session=self.check_session,
            )

    def check_session(self) -> None:
        """:class:`Restart` once the brokers were away past the session timeout."""
        self.watch.check_session(self._started, self.sub.session_timeout_ms)

    def stop(self) -> None:
        """Ask ``run()`` to drain, commit and return (safe from a signal handler)."""
        self.health.state = "stopping"
        self.stopping.set()

    def run(self, step: Step, *, until_idle: float | None = None) -> None:
        """Run ``step`` until ``stop()`` (or ``until_idle`` seconds without a record)."""
        self._step = step

        def restart() -> None:  # the new consumer resumes from the committed offsets
            step.release(None)
            self.committed.clear()

        try:
            self.sessions.run(
                self._start, lambda c: self._session(c, step, until_idle), self._end, restart
            )
        finally:
            self.calls.close()

    def kafka_error(self, err: KafkaError) -> None:
        """A fencing or fatal error ends the session (or stops: a rival); others are the
        caller's to log."""
        raise_for(
            err,
            self.watch,
            max(60.0, 3 * self.sub.session_timeout_ms / 1000.0),
            self.sub.fenced or f"the {self.sub.name} was fenced by another member",
        )

    # -- a session ----------------------------------------------------------------------------

    def _consumer(self) -> Consumer:
        conf: dict[str, Any] = {
            "group.id": self.sub.group_id,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": self.sub.session_timeout_ms,
            "log_level": 3,
            **self.sub.config,
            **self.watch.client_config(),
        }
        if self.sub.instance_id:
            conf["group.instance.id"] = self.sub.instance_id
        return new_consumer(self.settings, **conf)

    def _start(self) -> Consumer:
        consumer = self._live = self._consumer()
        consumer.subscribe(
            [self.sub.topic],
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_lost,
        )
        self._lost = self._assigned = False
        self._started = time.monotonic()
        self._lag = LagReader()
        return consumer

    def _end(self, consumer: Consumer) -> None:
        self._live = None
        if self.txn is not None:
            self.txn.drop()
        close_s = _CLOSE_S if self.stopping.is_set() else _REPLACE_CLOSE_S
        close_quietly(self.calls, f"{self.sub.name} consumer close", consumer.close, close_s)

    def _on_assign(self, consumer: Consumer, parts: list[TopicPartition]) -> None:
        self._assigned_at = time.monotonic()
        self._assigned = consumer is self._live
        log.info("%s assigned %s", self.sub.name, [p.partition for p in parts])
        if self.txn is not None and consumer is self._live:
            # between batches (librdkafka calls this from consume): no transaction is open
            cast(TransactionalStep, self._step).assigned([p.partition for p in parts])

    def _on_revoke(self, consumer: Consumer, parts: list[TopicPartition]) -> None:
        if consumer is not self._live:
            return  # an abandoned session's consumer closing late: its state is gone already
        self._release({p.partition for p in parts})

    def _on_lost(self, consumer: Consumer, parts: list[TopicPartition]) -> None:
        if consumer is not self._live:
            return
        self._release({p.partition for p in parts})
        # The group session expired (a broker outage): a static member would come back
        # fenced and its commits were seen to hang; the session loop starts a new consumer.
        self._lost = True
        self.watch.trouble()

    def _release(self, gone: set[int]) -> None:
        assert self._step is not None  # callbacks come only from a running session
        self._step.release(gone)
        for p in gone:
            self.committed.pop(p, None)
        log.info("%s revoked %s", self.sub.name, sorted(gone))

    def _session(self, consumer: Consumer, step: Step, until_idle: float | None) -> None:
        timeout = self.sub.restore_timeout_s
        try:
            # on the calls' worker: a broker away blocks a metadata call up to its timeout,
            # and a SIGTERM must still stop the service within its bound (docs/liveness.md)
            self.calls.call(f"restoring the {self.sub.name}", lambda: step.restore(timeout),
                            timeout + 5.0)  # fmt: skip
            if self.txn is not None:
                self.txn.start()
        except ServiceUnavailableError as exc:
            raise Restart(str(exc)) from exc
        self.health.state = "running"
        log.info("%s started", self.sub.name)  # restored and, if transactional, initialised
        last: float | None = None
        next_report = time.monotonic() + self.sub.report_every_s
        next_lag = 0.0
        while not self.stopping.is_set():
            try:
                batch = self._consume(consumer, step)
            except ServiceUnavailableError as exc:  # a restore on assignment did not finish
                self.watch.trouble()
                raise Restart(str(exc)) from exc
            if self._lost:
                raise Restart("the consumer lost its partitions (group session expired)")
            self.check_session()
            if batch:
                step.take(batch)
                last = time.monotonic()
                self.health.progressed()
                self.sessions.progressed()
            step.flush_due(caught_up=not batch)
            if self.txn is not None:
                tstep = cast(TransactionalStep, step)
                if tstep.pending():
                    self.txn.commit(consumer, tstep)
            else:
                self._commit(consumer, step)
            now = time.monotonic()
            if now >= next_lag:
                next_lag = now + _LAG_EVERY_S
                self._update_lag(consumer, step)
            if now >= next_report:
                next_report = now + self.sub.report_every_s
                step.report("running")
            if until_idle is not None and self._idle(consumer, step, last, until_idle):
                break
        step.drain()
        if self.txn is None:
            self._commit(consumer, step, final=True)

    def _consume(self, consumer: Consumer, step: Step) -> list[Message]:
        """What is queued, at once; only when nothing is, wait (up to the step's poll time)
        for the first record: a batch short of ``_BATCH`` does not wait out the timeout, and
        a poll is empty only after that long without any record."""
        try:
            if self.sub.fill:  # a full batch, or what came within the step's wait
                return list(consumer.consume(num_messages=self.sub.batch, timeout=step.poll_s()))
            batch: list[Message] = consumer.consume(num_messages=self.sub.batch, timeout=0)
            if not batch:
                batch = consumer.consume(num_messages=1, timeout=step.poll_s())
        except KafkaException as exc:
            self.kafka_error(exc.args[0])
            log.warning("Kafka consumer: %s", exc.args[0].str())
            return []
        return batch

    def _update_lag(self, consumer: Consumer, step: Step) -> None:
        try:
            if self.txn is not None:
                lag = self._lag.partitions(consumer)
                cast(TransactionalStep, step).lag(lag)
                idle = not consumer.assignment() and self._assigned
                self.health.set_lag(sum(lag.values()) if lag or idle else None)
                return
            self.health.set_lag(self._lag.total(consumer, self._assigned))
        except KafkaException as exc:
            log.debug("lag not updated: %s", exc)

    def _idle(self, consumer: Consumer, step: Step, last: float | None, idle_s: float) -> bool:
        """Nothing left to write, no record for ``idle_s``, and every assigned partition
        fetched at least once (so a slow first fetch is not taken for idleness)."""
        since = last or self._assigned_at
        if since is None or time.monotonic() - since < idle_s or step.busy():
            return False
        for tp in consumer.assignment():
            _low, high = consumer.get_watermark_offsets(tp, cached=True)
            if high < 0:
                return False
        return True

    def _commit(self, consumer: Consumer, step: Step, *, final: bool = False) -> None:
        offsets = [
            TopicPartition(self.sub.topic, p, upto)
            for p, upto in step.committable().items()
            if self.committed.get(p) != upto
        ]
        if not offsets or not self.commits.commit(consumer, offsets, final=final):
            return
        self.health.progressed()
        self.sessions.progressed()
        for tp in offsets:
            self.committed[tp.partition] = tp.offset
