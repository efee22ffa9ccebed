"""The sequencer's Kafka session: its two clients, every call that can hang, and fencing.

Split from ``_loop`` so that the loop reads as the batch protocol alone: this base class holds
what a *session* needs (docs/liveness.md) — the transactional producer and the consumer with
their ids, ``_call`` (a librdkafka call in deadline-bounded slices, retried while retriable),
the outage check that ends a session, the topic check, what a fencing means, and how clients
are dropped. :class:`~tracevault.consumer.sequencer._loop.Sequencer` sets the state declared
here in its ``__init__``; nothing here runs per event.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer

from tracevault.config import Settings
from tracevault.consumer.sequencer._history import SealedHistory
from tracevault.errors import (
    FencedError,
    ServiceUnavailableError,
    TopicMismatchError,
)
from tracevault.runtime.liveness import (
    BlockingCalls,
    Broken,
    CallDeadline,
    Health,
    KafkaWatch,
    Restart,
    Stopping,
    backoff,
    close_quietly,
    is_fenced,
    is_outage,
)

__all__ = ["SessionClients"]

# the sequencer logs under one name wherever its code sits (log filters, tests)
log = logging.getLogger("tracevault.consumer.sequencer._loop")

_SLICE_S = 5.0  # one librdkafka wait; retriable timeouts are retried up to the call's budget
_HISTORY_AWAY_S = 3.0  # a sealed-history read stops once no broker was up for this long
_SLACK_S = 3.0  # how much longer than its own timeout a call may take before we give up on it
_CLOSE_S = 3.0  # on stop; a session being replaced waits longer (_loop._REPLACE_CLOSE_S)


# what a broker's retriable answer means, for /healthz (docs/liveness.md, "Health")
_BROKER_WAITS = {
    KafkaError.CONCURRENT_TRANSACTIONS: (
        ": the transaction coordinator is still completing an earlier transaction of this "
        "transactional.id (its markers wait on a partition without a leader, or a "
        "coordinator that is loading)"
    ),
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS: ": the coordinator is loading its state",
    KafkaError.NOT_ENOUGH_REPLICAS: ": fewer in-sync replicas than min.insync.replicas",
}


class SessionClients:
    """The clients of one Kafka session and the calls on them (the sequencer's base)."""

    settings: Settings
    instance_id: str
    watch: KafkaWatch
    health: Health
    _stop: threading.Event
    _calls: BlockingCalls
    _history: SealedHistory
    _producer: Producer | None
    _consumer: Consumer | None
    _established: bool  # a session got going once: later failures restart, not exit
    _session_started: float

    @property
    def transactional_id(self) -> str:
        return f"{self.settings.topic_prefix}.sequencer.{self.instance_id}"

    @property
    def group_id(self) -> str:
        return self.settings.sequencer_group_id

    @property
    def _txn_timeout_s(self) -> float:
        return self.settings.sequencer_transaction_timeout_ms / 1000.0

    @property
    def _outage_window_s(self) -> float:
        """How long after an outage a fencing is taken for librdkafka's, not a rival's."""
        return max(60.0, 3 * self.settings.sequencer_session_timeout_ms / 1000.0)

    def _history_abort(self) -> str | None:
        """Why a sealed-history read should stop now (it runs in the main thread), or None."""
        if self._stop.is_set():
            return "stop was asked"
        down = self.watch.down_since
        if down is not None and time.monotonic() - down > _HISTORY_AWAY_S:
            return f"no Kafka broker reachable for {time.monotonic() - down:.0f}s"
        return None

    def _check_session(self) -> None:
        """A broker outage longer than the session timeout ends this session: its static
        member would come back fenced, and calls with its metadata were seen to block."""
        away = self.watch.outage_since(self._session_started)
        if away * 1000 > self.settings.sequencer_session_timeout_ms:
            raise Restart(f"the brokers were away {away:.0f}s, past the session timeout")

    def _call(
        self, what: str, fn: Callable[[float], Any], budget_s: float, *, calls: int = 1
    ) -> Any:
        """``fn(timeout)`` in slices of at most _SLICE_S while librdkafka says the error is
        retriable, for at most ``budget_s``; each slice's deadline is enforced (``calls``:
        how many librdkafka calls ``fn`` makes, each with that timeout)."""
        start = time.monotonic()
        end = start + budget_s
        attempt = 0
        while True:
            t = max(0.5, min(_SLICE_S, end - time.monotonic()))
            try:
                result = self._calls.call(what, functools.partial(fn, t), calls * t + _SLACK_S)
            except CallDeadline:
                self.watch.trouble()
                raise
            except KafkaException as exc:
                err = exc.args[0]
                self._note_answer(what, err, time.monotonic() - start)
                if not err.retriable() or time.monotonic() >= end:
                    raise
                log.info("sequencer %s: %s: %s; retrying", self.instance_id, what, err)
                self._check_session()
            else:
                self.health.waiting_on = None
                return result
            if self._stop.wait(min(backoff(attempt, base=0.1, cap=1.0), _SLICE_S)):
                raise Stopping(f"{what} still failing after stop was asked")
            attempt += 1

    def _note_answer(self, what: str, err: KafkaError, waited_s: float) -> None:
        """A broker's own error code (not a local one, which are negative) means a broker
        answered: the watch hears it, and ``/healthz`` names the wait instead of blaming
        the brokers (issue 30: "no Kafka broker reachable" for 41 s of
        ``CONCURRENT_TRANSACTIONS`` from a broker that was up)."""
        if err.code() < 0:
            return
        self.watch.answered()
        why = _BROKER_WAITS.get(err.code(), "")
        self.health.waiting_on = (
            f"{what}: the broker answers {err.name()} (for {waited_s:.0f}s){why}"
        )

    def _new_producer(self) -> Producer:
        s = self.settings
        producer = Producer(
            s.kafka_config(
                **{
                    "transactional.id": self.transactional_id,
                    "enable.idempotence": True,
                    "transaction.timeout.ms": s.sequencer_transaction_timeout_ms,
                    "partitioner": "murmur2_random",
                    "linger.ms": 2,
                    "queue.buffering.max.messages": max(100_000, 4 * s.sequencer_batch_size),
                    "log_level": 3,
                    **self.watch.client_config(),
                }
            )
        )
        try:
            self._call("init_transactions", producer.init_transactions, self._txn_timeout_s + 30)
            return producer
        except KafkaException as exc:
            err = exc.args[0]
            self._raise_if_fenced(err)
            if self._established:
                why = f"init_transactions failed ({err})"
                raise (Restart(why) if is_outage(err) else Broken(why)) from exc
            raise ServiceUnavailableError(
                f"init_transactions for {self.transactional_id} failed ({err}); check the "
                "broker's transaction state log settings (replication factor 1 on one node)"
            ) from exc

    def _new_consumer(self) -> Consumer:
        s = self.settings
        return Consumer(
            s.kafka_config(
                **{
                    "group.id": self.group_id,
                    "group.instance.id": self.instance_id,
                    "enable.auto.commit": False,
                    "enable.auto.offset.store": False,
                    "isolation.level": "read_committed",
                    "auto.offset.reset": "earliest",
                    "session.timeout.ms": s.sequencer_session_timeout_ms,
                    "log_level": 3,
                    **self.watch.client_config(),
                }
            )
        )

    def _check_topics(self, consumer: Consumer) -> int:
        names = self.settings.topics
        try:
            md = self._calls.call("list_topics", lambda: consumer.list_topics(timeout=15), 20)
        except (KafkaException, CallDeadline) as exc:
            raise ServiceUnavailableError(
                f"Kafka at {self.settings.bootstrap_servers} did not answer ({exc})"
            ) from exc
        counts: dict[str, int] = {}
        for topic in names.all():
            t = md.topics.get(topic)
            if t is None or t.error is not None:
                raise self.settings.missing_topic(topic)
            counts[topic] = len(t.partitions)
        if len(set(counts.values())) != 1:
            raise TopicMismatchError(
                f"raw, sealed, heads and dlq must have the same partition count, found {counts}; "
                "recreate them or use a new --prefix"
            )
        return counts[names.raw]

    def _raise_if_fenced(self, err: KafkaError) -> None:
        if not is_fenced(err):
            return
        if self.watch.excuse_fencing(self._outage_window_s):
            # After an outage longer than the session timeout librdkafka's static member
            # calls itself fenced although no one else has our id (docs/liveness.md).
            raise Restart(f"fenced after a broker outage ({err.str()})")
        raise FencedError(
            f"sequencer {self.instance_id} was fenced ({err.str()}): another process runs "
            f"with transactional.id {self.transactional_id} or group.instance.id "
            f"{self.instance_id}; this one stopped. Give each instance its own "
            "--instance-id"
        )

    def _drop_clients(self, close_s: float = _CLOSE_S) -> None:
        """Close the consumer within _CLOSE_S or abandon it; drop the producer (a new
        ``init_transactions`` with our id fences it and aborts its open transaction)."""
        consumer, self._consumer, self._producer = self._consumer, None, None
        name = f"sequencer {self.instance_id}"
        if consumer is not None:
            close_quietly(self._calls, f"{name} consumer close", consumer.close, close_s)
        # the next session reads history on a fresh consumer too
        close_quietly(self._calls, f"{name} history close", self._history.close, _CLOSE_S)

    def _close(self) -> None:
        self._drop_clients()
        self._calls.close()
        log.info("sequencer %s stopped", self.instance_id)
