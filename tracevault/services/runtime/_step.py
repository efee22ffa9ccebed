"""What a service plugs into :class:`~tracevault.services.runtime.ConsumerRuntime`: its step
(the methods the runtime calls; a step holds its own parts and inherits nothing from here)
and its subscription (the consumer's group, topic and settings; with ``transactional_id``,
the transactional commit mode of ``_transactions``), and the open transaction such a step
writes into."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NoReturn, Protocol

from confluent_kafka import KafkaError, Message, Producer

from tracevault.services.runtime._calls import Stopping

__all__ = ["AbortBatch", "Step", "Subscription", "Transaction", "TransactionalStep"]

_BATCH = 1000
_FLUSH_SLICE_S = 1.0  # one inline flush wait; stop and the session are checked between them


class Step(Protocol):
    """What a service does with what its consumer reads; the runtime does the rest."""

    def restore(self, timeout: float) -> None:
        """At a session's start, before any record: read what the step needs from the
        cluster (``ServiceUnavailableError`` when it does not answer within ``timeout``)."""

    def take(self, batch: list[Message]) -> None:
        """One consumed batch, in offset order per partition (error events included)."""

    def flush_due(self, *, caught_up: bool) -> None:
        """Write what is due (all of it when ``caught_up``: a poll came back empty)."""

    def committable(self) -> dict[int, int]:
        """Per partition, the offset up to which everything read is durably handled."""

    def release(self, partitions: set[int] | None) -> None:
        """Partitions revoked or lost (None: all, the session ends): finish what is being
        written of them and forget the rest; nothing of theirs is written after this."""

    def drain(self) -> None:
        """On stop: write everything held and wait for it."""

    def busy(self) -> bool:
        """Whether anything read is still to be written (idle waits for it)."""

    def poll_s(self) -> float:
        """How long an empty poll may wait now."""

    def report(self, state: str) -> None:
        """Log the step's counters (``state``: archiving, stopped ...)."""


@dataclass(frozen=True, slots=True)
class Subscription:
    """What the runtime's consumer is: its group, topic and the step's own settings."""

    name: str  # the service, in log lines and errors
    topic: str
    group_id: str
    session_timeout_ms: int
    instance_id: str | None = None  # a static member (fast restarts)
    fenced: str = ""  # what to tell the operator when another member has our instance id
    restore_timeout_s: float = 30.0
    commit_deadline_s: float = 15.0  # a commit taking longer ends the session
    commit_every_s: float = 0.5  # a crash re-reads at most this much more
    config: dict[str, Any] = field(default_factory=dict)  # more librdkafka settings
    # the transactional commit mode (docs/kafka-local.md's exactly-once pattern): with a
    # transactional.id the step's output and the consumed offsets commit together
    transactional_id: str | None = None
    transaction_timeout_ms: int = 60_000
    producer_config: dict[str, Any] = field(default_factory=dict)
    batch: int = _BATCH  # records per consume at most
    # True: each consume waits up to step.poll_s() for a full batch (bigger transactions);
    # False: what is queued at once, else wait for one record
    fill: bool = False
    report_every_s: float = 60.0  # an INFO line with the step's counters

    @property
    def service(self) -> str:
        """The service's one word (``name``'s first: "sequencer <instance id>" is the
        sequencer), as metrics (``tracevault_<service>_healthy``) and ``/healthz`` name it."""
        return self.name.split(" ", 1)[0]


class TransactionalStep(Protocol):
    """What a step whose output and consumed offsets commit in one transaction has besides
    the methods of :class:`Step` (a protocol of its own: none extends another here)."""

    def assigned(self, partitions: list[int]) -> None:
        """Partitions now ours (an assignment, or all of them again after a rewind): read
        their state back before any of their records is taken."""

    def pending(self) -> bool:
        """Whether a transaction is due (records consumed, or output made without any)."""

    def write(self, txn: Transaction) -> None:
        """Produce the pending output into the open transaction (``txn.producer``);
        ``txn.flush()`` where the step needs its delivery reports."""

    def committed(self) -> None:
        """The transaction committed: what was written is now the step's state."""

    def aborted(self, err: KafkaError | None) -> None:
        """The transaction failed: forget everything since the last commit (the runtime
        rewinds the consumer, then calls ``assigned`` with every assigned partition)."""

    def lag(self, per_partition: dict[int, int]) -> None:
        """Records not yet consumed per partition (for the step's metrics)."""


class AbortBatch(Exception):
    """A delivery inside the transaction failed (or the step refuses what was delivered):
    abort it and redo the batch. ``args[0]`` is the :class:`KafkaError`."""


class Transaction:
    """One open transaction: its producer, the first delivery failure, and a bounded flush."""

    def __init__(
        self,
        producer: Producer,
        *,
        timeout_s: float,
        stopping: threading.Event,
        check_session: Callable[[], None],
    ) -> None:
        self.producer = producer
        self.error: KafkaError | None = None
        self._timeout_s = timeout_s
        self._stopping = stopping
        self._check_session = check_session

    def failed(self, err: KafkaError) -> None:
        """A delivery callback's failure: the first one aborts the batch."""
        if self.error is None:
            self.error = err

    def abort(self, err: KafkaError) -> NoReturn:
        """Abort the batch now (and redo it from the committed offsets)."""
        self.failed(err)
        raise AbortBatch(err)

    def flush(self) -> None:
        """Every produced record delivered, within the transaction timeout; a delivery error
        aborts the batch. Inline, not through BlockingCalls: flush is librdkafka's own poll
        loop and returns within its timeout; a hand-off per batch cost throughput
        (docs/liveness.md)."""
        flush_end = time.monotonic() + self._timeout_s
        while self.producer.flush(_FLUSH_SLICE_S) > 0:
            if time.monotonic() >= flush_end:
                self.failed(KafkaError(KafkaError._MSG_TIMED_OUT))
                break
            if self._stopping.is_set():
                raise Stopping("flush still waiting for the broker after stop was asked")
            self._check_session()
        if self.error is not None:
            raise AbortBatch(self.error)
