"""The runtime's transactional commit mode on a real broker: what a step produces and the
offsets it consumed commit together; a failed transaction is aborted (or its producer
replaced), the consumer rewound and the step's partitions handed back, so every record
lands exactly once; a rival with our transactional.id stops the service (FencedError).

The step here copies ``raw`` to ``sealed`` unchanged: the smallest step whose output a
read_committed reader can count.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from typing import Any
from unittest import mock

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer

from tests.services.sequencer.support import wait_until
from tracevault.config import Settings
from tracevault.errors import FencedError
from tracevault.services.runtime import (
    ConsumerRuntime,
    Subscription,
    Transaction,
    Transactions,
)


class _Copy:
    """Copies each consumed record to ``sealed``; aborts its first write when asked."""

    def __init__(self, runtime: ConsumerRuntime, out: str, want: int, *, abort_once: bool) -> None:
        self.runtime = runtime
        self.out = out
        self.want = want
        self.abort_once = abort_once
        self.held: list[Message] = []
        self.copied = 0
        self.aborts: list[KafkaError | None] = []
        self.assigns: list[list[int]] = []

    def restore(self, timeout: float) -> None:
        pass

    def take(self, batch: list[Message]) -> None:
        self.held += [m for m in batch if m.error() is None]

    def flush_due(self, *, caught_up: bool) -> None:
        pass

    def committable(self) -> dict[int, int]:
        return {}

    def release(self, partitions: set[int] | None) -> None:
        self.held.clear()

    def drain(self) -> None:
        pass

    def busy(self) -> bool:
        return bool(self.held)

    def poll_s(self) -> float:
        return 0.05

    def report(self, state: str) -> None:
        pass

    def assigned(self, partitions: list[int]) -> None:
        self.assigns.append(sorted(partitions))

    def pending(self) -> bool:
        return bool(self.held)

    def write(self, txn: Transaction) -> None:
        for m in self.held:
            txn.producer.produce(self.out, m.value(), m.key(), m.partition())
        txn.flush()  # delivered inside the transaction: an abort must still hide them
        if self.abort_once and not self.aborts:
            txn.abort(KafkaError(KafkaError._STATE, "the step refuses this batch once"))

    def committed(self) -> None:
        self.copied += len(self.held)
        self.held.clear()
        if self.copied >= self.want:
            self.runtime.stop()

    def aborted(self, err: KafkaError | None) -> None:
        self.aborts.append(err)
        self.held.clear()

    def lag(self, per_partition: dict[int, int]) -> None:
        pass


def _runtime(settings: Settings, txn_id: str) -> ConsumerRuntime:
    sub = Subscription(
        name="copier",
        topic=settings.topics.raw,
        group_id=f"{settings.topic_prefix}.copier",
        session_timeout_ms=6_000,
        fenced=f"the copier was fenced: another process runs with transactional.id {txn_id}",
        transactional_id=txn_id,
        transaction_timeout_ms=10_000,
        config={"isolation.level": "read_committed"},
        batch=40,
        fill=True,
    )
    return ConsumerRuntime(settings, sub)


def _produce(settings: Settings, values: list[bytes]) -> None:
    p = Producer(settings.kafka_config(**{"log_level": 0}))
    for i, v in enumerate(values):
        p.produce(settings.topics.raw, v, b"k%d" % i, partition=i % settings.partitions)
    assert p.flush(30) == 0


def _copied(settings: Settings) -> list[bytes]:
    """Everything committed to ``sealed`` (read_committed: aborted records are not read)."""
    c = Consumer(
        settings.kafka_config(
            **{
                "group.id": f"reader-{uuid.uuid4().hex[:8]}",
                "isolation.level": "read_committed",
                "auto.offset.reset": "earliest",
                "enable.partition.eof": True,
                "log_level": 0,
            }
        )
    )
    c.subscribe([settings.topics.sealed])
    out: list[bytes] = []
    eof: set[int] = set()
    try:
        wait_until(
            lambda: _read(c, out, eof) >= settings.partitions, timeout=60, what="sealed read"
        )
    finally:
        c.close()
    return out


def _read(c: Consumer, out: list[bytes], eof: set[int]) -> int:
    for m in c.consume(500, timeout=0.5):
        err = m.error()
        if err is not None:
            if err.code() == KafkaError._PARTITION_EOF:
                eof.add(m.partition() or 0)
            continue
        out.append(m.value() or b"")
    return len(eof)


def _run(runtime: ConsumerRuntime, step: _Copy, errors: list[BaseException]) -> None:
    try:
        runtime.run(step)
    except BaseException as exc:  # the test thread asserts on it
        errors.append(exc)


@pytest.mark.parametrize("how", ["step-aborts", "commit-fatal"])
def test_a_failed_transaction_is_redone_and_every_record_lands_once(
    settings_factory: Callable[..., Settings], how: str
) -> None:
    settings = settings_factory(partitions=2)
    values = [f"v{i}".encode() for i in range(120)]
    _produce(settings, values)
    runtime = _runtime(settings, f"{settings.topic_prefix}.copier")
    step = _Copy(runtime, settings.topics.sealed, len(values), abort_once=how == "step-aborts")
    real = Transactions.call
    injected: list[bool] = []

    def flaky(txns: Transactions, what: str, fn: Callable[[float], Any], budget: float,
              **kw: Any) -> Any:  # fmt: skip
        # the first commit_transaction fails with librdkafka's fatal error; the producer is
        # replaced (init_transactions fences the old one) and the batch redone
        if how == "commit-fatal" and not injected and what == "commit_transaction":
            injected.append(True)
            raise KafkaException(KafkaError(KafkaError._FATAL, "injected fatal", fatal=True))
        return real(txns, what, fn, budget, **kw)

    errors: list[BaseException] = []
    with mock.patch.object(Transactions, "call", autospec=True, spec_set=True, side_effect=flaky):
        thread = threading.Thread(target=_run, args=(runtime, step, errors), daemon=True)
        thread.start()
        thread.join(120)
    assert not thread.is_alive(), "the runtime did not stop after copying everything"
    assert not errors, errors
    assert len(step.aborts) == 1
    assert len(step.assigns) >= 2  # the assignment, then the partitions again after the rewind
    copied = _copied(settings)
    assert sorted(copied) == sorted(values)  # each once: the aborted batch hidden, then redone


def test_a_rival_with_our_transactional_id_stops_the_service(
    settings_factory: Callable[..., Settings],
) -> None:
    settings = settings_factory(partitions=1)
    txn_id = f"{settings.topic_prefix}.copier"
    _produce(settings, [b"first"])
    runtime = _runtime(settings, txn_id)
    step = _Copy(runtime, settings.topics.sealed, 10**9, abort_once=False)
    errors: list[BaseException] = []
    thread = threading.Thread(target=_run, args=(runtime, step, errors), daemon=True)
    thread.start()
    try:
        wait_until(lambda: step.copied >= 1 or bool(errors), timeout=60, what="first commit")
        rival = Producer(settings.kafka_config(**{"transactional.id": txn_id, "log_level": 0}))
        rival.init_transactions(30)  # fences the runtime's producer
        _produce(settings, [b"second"])
        thread.join(60)
    finally:
        runtime.stop()
        thread.join(30)
    assert len(errors) == 1 and isinstance(errors[0], FencedError), errors
    assert "another process runs with transactional.id" in str(errors[0])
    assert _copied(settings) == [b"first"]
