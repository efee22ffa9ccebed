"""Transaction failures: an abortable error rewinds, a fatal one recreates the producer.

One failure is injected into the commit step (the service runtime's ``Transactions.call``,
patched with autospec, raises librdkafka's own error type once); the rest is the real
broker. Afterwards every event is sealed exactly once: the aborted batch was re-read from the
committed offsets and the run book restored from the heads topic.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from unittest import mock

import pytest
from confluent_kafka import KafkaError, KafkaException

from tests.services.sequencer.support import (
    assert_chain,
    assert_signed_log,
    interleaved_runs,
    produce_raw,
    running,
    sealed_by_run,
    sealed_count,
    wait_until,
)
from tracevault.config import Settings
from tracevault.services.runtime import Transactions
from tracevault.transparency import Ed25519Signer


@pytest.mark.parametrize(
    "error",
    [
        KafkaError(KafkaError._STATE, "injected abortable", txn_requires_abort=True),
        KafkaError(KafkaError._FATAL, "injected fatal", fatal=True),
    ],
    ids=["abortable", "fatal"],
)
def test_failed_commit_is_redone_without_duplicates(
    seq_settings: Callable[..., Settings], error: KafkaError, log_signer: Ed25519Signer
) -> None:
    settings = seq_settings(partitions=2, sequencer_batch_size=50)
    items = interleaved_runs(8, 25, seed=13, stem="abort")
    real = Transactions.call
    injected: list[bool] = []

    def flaky(
        txns: Transactions, what: str, fn: Callable[[float], Any], budget: float, **kw: Any
    ) -> Any:
        # fail the first commit_transaction; every other call goes to the real producer
        if not injected and what == "commit_transaction":
            injected.append(True)
            raise KafkaException(error)
        return real(txns, what, fn, budget, **kw)

    with mock.patch.object(Transactions, "call", autospec=True, spec_set=True, side_effect=flaky):
        produce_raw(settings, items)
        with running(settings, "ab") as (seq, errors):
            wait_until(lambda: sealed_count(settings) >= len(items), timeout=60, what="sealed")
            assert not errors
    assert injected
    assert seq.metrics.snapshot()["tracevault_sequencer_transactions_total{outcome=aborted}"] == 1
    runs = sealed_by_run(settings)
    assert sum(len(v) for v in runs.values()) == len(items)
    expected: dict[str, list[bytes]] = {}
    for run, value in items:
        expected.setdefault(run, []).append(value)
    for run_id, recs in runs.items():
        assert_chain(run_id, [ev for _, ev in recs], expected[run_id])
    # the aborted transaction's checkpoint is gone with it; the redo signed from the tree the
    # heads topic had (not from one advanced by the aborted batch)
    assert_signed_log(settings, [log_signer.verifier])
