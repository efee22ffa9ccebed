"""The runtime's transactional commit mode: what a step produced and the offsets it consumed,
committed together (docs/kafka-local.md's exactly-once pattern; docs/design.md, "Sequencer
batch protocol").

A :class:`ConsumerRuntime` whose :class:`Subscription` names a ``transactional_id`` holds one
:class:`Transactions`; per batch it ``begin_transaction``\\ s, lets the step produce into the
open :class:`Transaction` (``step.write``), sends the consumer's positions with its group
metadata (``send_offsets_to_transaction``, so a zombie of an older generation is fenced,
KIP-447) and ``commit_transaction``\\ s. A crash at any instant leaves either the whole batch
and its offsets or none of it.

Errors, as librdkafka classifies them: retriable -> the same call again, in deadline-bounded
slices (:meth:`Transactions.call`); ``txn_requires_abort`` or a failed delivery ->
``abort_transaction``; fatal -> a new producer (``init_transactions`` fences nothing but our
own old session); then the consumer is rewound to the committed offsets and the step
restores its partitions (``step.aborted``, ``step.assigned``: its state is never
half-applied). A fencing is another live process with our id (:class:`FencedError`, exit 5)
unless it follows a broker outage (librdkafka's static member: a new session).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer

from tracevault.config import Settings
from tracevault.kafka import new_transactional_producer
from tracevault.services.runtime._calls import BlockingCalls, CallDeadline, Stopping
from tracevault.services.runtime._health import Health
from tracevault.services.runtime._step import AbortBatch, Transaction, TransactionalStep
from tracevault.services.runtime._supervisor import Sessions, backoff
from tracevault.services.runtime._watch import Broken, KafkaWatch, Restart, is_fenced, is_outage

__all__ = ["Transactions"]

log = logging.getLogger(__name__)

_SLICE_S = 5.0  # one librdkafka wait; retriable timeouts are retried up to the call's budget
_SLACK_S = 3.0  # how much longer than its own timeout a call may take before we give up on it

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


class Transactions:
    """The transactional producer of a runtime's sessions and the commit of each batch."""

    def __init__(
        self,
        settings: Settings,
        *,
        name: str,
        transactional_id: str,
        timeout_ms: int,
        producer_config: dict[str, Any],
        calls: BlockingCalls,
        watch: KafkaWatch,
        health: Health,
        sessions: Sessions,
        stopping: threading.Event,
        on_error: Callable[[KafkaError], None],
        check_session: Callable[[], None],
    ) -> None:
        self.settings = settings
        self.name = name
        self.transactional_id = transactional_id
        self.timeout_s = timeout_ms / 1000.0
        self._timeout_ms = timeout_ms
        self._config = producer_config
        self._calls = calls
        self._watch = watch
        self._health = health
        self._sessions = sessions
        self.stopping = stopping
        self._on_error = on_error
        self.check_session = check_session
        self.producer: Producer | None = None

    # -- the producer of a session -----------------------------------------------------------

    def start(self) -> None:
        """A new transactional producer, ``init_transactions`` done (it fences our own
        older producer and aborts its open transaction)."""
        self.producer = None
        producer = new_transactional_producer(
            self.settings,
            self.transactional_id,
            timeout_ms=self._timeout_ms,
            **{**self._config, **self._watch.client_config()},
        )
        try:
            self.call("init_transactions", producer.init_transactions, self.timeout_s + 30)
        except KafkaException as exc:
            err = exc.args[0]
            self._fenced(err)
            why = (
                f"init_transactions for {self.transactional_id} failed ({err}); check the "
                "broker's transaction state log settings (replication factor 1 on one node)"
            )
            raise (Restart(why) if is_outage(err) else Broken(why)) from exc
        self.producer = producer

    def drop(self) -> None:
        """Forget the producer: the next ``init_transactions`` with our id fences it."""
        self.producer = None

    def call(
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
                self._watch.trouble()
                raise
            except KafkaException as exc:
                err = exc.args[0]
                self._note_answer(what, err, time.monotonic() - start)
                if not err.retriable() or time.monotonic() >= end:
                    raise
                log.info("%s: %s: %s; retrying", self.name, what, err)
                self.check_session()
            else:
                self._health.waiting_on = None
                return result
            if self.stopping.wait(min(backoff(attempt, base=0.1, cap=1.0), _SLICE_S)):
                raise Stopping(f"{what} still failing after stop was asked")
            attempt += 1

    def _note_answer(self, what: str, err: KafkaError, waited_s: float) -> None:
        """A broker's own error code (not a local one, which are negative) means a broker
        answered: the watch hears it, and ``/healthz`` names the wait instead of blaming
        the brokers (issue 30: "no Kafka broker reachable" for 41 s of
        ``CONCURRENT_TRANSACTIONS`` from a broker that was up)."""
        if err.code() < 0:
            return
        self._watch.answered()
        why = _BROKER_WAITS.get(err.code(), "")
        self._health.waiting_on = (
            f"{what}: the broker answers {err.name()} (for {waited_s:.0f}s){why}"
        )

    def _fenced(self, err: KafkaError) -> None:
        if is_fenced(err):
            self._on_error(err)  # a new session after an outage, else FencedError

    # -- one batch ---------------------------------------------------------------------------

    def commit(self, consumer: Consumer, step: TransactionalStep) -> bool:
        """One transaction of the step's pending output and the consumer's positions; on
        failure, abort (or a new producer), rewind and restore. Whether it committed."""
        producer = self.producer
        assert producer is not None  # started with the session
        txn = Transaction(
            producer,
            timeout_s=self.timeout_s,
            stopping=self.stopping,
            check_session=self.check_session,
        )
        try:
            producer.begin_transaction()
            step.write(txn)
            self._send_and_commit(consumer, producer, txn)
        except (KafkaException, AbortBatch) as exc:
            self._recover(consumer, step, exc.args[0] if exc.args else txn.error)
            return False
        except SystemError as exc:
            # confluent-kafka's flush() can return NULL without an exception when the
            # producer turns fatal (seen on fencing) mid-flush; abort_transaction then
            # reports the real cause, and _recover stops or recovers accordingly.
            log.warning("%s: producer call failed (%s)", self.name, exc)
            self._recover(consumer, step, txn.error)
            return False
        self._sessions.progressed()
        self._health.progressed()
        self._watch.progressed()
        step.committed()
        return True

    def _send_and_commit(self, consumer: Consumer, producer: Producer, txn: Transaction) -> None:
        """The consumer's positions into the transaction, and the commit."""
        # The offsets go in after the step's output: their coordinator round trips then
        # overlap its deliveries (sent first, they queue behind the records' partition
        # registration and cost more, measured).
        assignment = consumer.assignment()
        positions = [tp for tp in consumer.position(assignment) if tp.offset >= 0]
        if not positions and assignment:
            # Nothing consumed yet (output of restored state alone): send the committed
            # offsets again, so the group coordinator still checks our generation and fences
            # a zombie.
            positions = [
                tp
                for tp in self.call("committed", lambda t: consumer.committed(assignment, t), 30)
                if tp.offset >= 0
            ]
        if not consumer.memberid():
            # librdkafka drops its member id when a broker outage outlasts the session
            # timeout; offsets sent with that metadata were seen to block for minutes, and the
            # member comes back fenced anyway (docs/liveness.md): start a new session now.
            self._watch.trouble()
            raise Restart("the consumer lost its group session during a broker outage")
        group = consumer.consumer_group_metadata()
        sent = False

        def send_and_commit(t: float) -> None:
            # One hand-off for both (each is a coordinator round trip with its own timeout);
            # a retry after the offsets went in only commits again.
            nonlocal sent
            if not sent:
                producer.send_offsets_to_transaction(positions, group, t)
                sent = True
            producer.commit_transaction(t)

        self.call("commit_transaction", send_and_commit, self.timeout_s, calls=2)
        if txn.error is not None:  # pragma: no cover - commit would have failed
            raise AbortBatch(txn.error)

    def _recover(self, consumer: Consumer, step: TransactionalStep, err: KafkaError | None) -> None:
        """Abort (or recreate the producer), rewind to committed offsets, restore."""
        step.aborted(err)
        if err is not None:
            self._fenced(err)
        producer = self.producer
        assert producer is not None
        fatal = err is not None and err.fatal()
        log.warning(
            "%s: transaction failed (%s); %s",
            self.name,
            err,
            "recreating the producer" if fatal else "aborting and rewinding",
        )
        if not fatal:
            try:
                self.call("abort_transaction", producer.abort_transaction, self.timeout_s)
            except KafkaException as exc:
                abort_err = exc.args[0]
                self._fenced(abort_err)
                fatal = True
                log.warning("abort_transaction failed (%s); recreating the producer", abort_err)
        if fatal:
            self.start()
        self._rewind(consumer, step)

    def _rewind(self, consumer: Consumer, step: TransactionalStep) -> None:
        assignment = consumer.assignment()
        if not assignment:
            return
        committed = self.call(
            "committed", lambda t: consumer.committed(assignment, t), self.timeout_s
        )
        for tp in committed:
            if tp.offset < 0:
                tp.offset = OFFSET_BEGINNING
            consumer.seek(tp)
        step.assigned([tp.partition for tp in assignment])
