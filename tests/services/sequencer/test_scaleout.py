"""Two instances in one group split the partitions; a zombie with our transactional id stops."""

from __future__ import annotations

import threading
from collections.abc import Callable

from confluent_kafka import Producer

from tests.services.sequencer.support import (
    assert_chain,
    assert_signed_log,
    interleaved_runs,
    produce_raw,
    read_all,
    running,
    sealed_by_run,
    sealed_count,
    wait_until,
)
from tests.services.sequencer.support import producer as raw_producer
from tracevault.config import Settings
from tracevault.errors import FencedError
from tracevault.transparency import Ed25519Signer


def _expected(items: list[tuple[str, bytes]]) -> dict[str, list[bytes]]:
    out: dict[str, list[bytes]] = {}
    for run, value in items:
        out.setdefault(run, []).append(value)
    return out


def _verify(settings: Settings, items: list[tuple[str, bytes]]) -> None:
    expected = _expected(items)
    runs = sealed_by_run(settings)
    assert sum(len(v) for v in runs.values()) == len(items), "each event sealed exactly once"
    assert set(runs) == set(expected)
    for run_id, recs in runs.items():
        assert_chain(run_id, [ev for _, ev in recs], expected[run_id])
    assert read_all(settings, settings.topics.dlq) == []
    # partitions moved between instances (or a zombie was fenced): each partition's log still
    # grows by consistent, signed checkpoints covering every sealed event
    assert settings.log_key is not None
    signer = Ed25519Signer.from_skey(settings.log_key.get_secret_value())
    assert_signed_log(settings, [signer.verifier])


def test_two_instances_with_a_rebalance_mid_stream(seq_settings: Callable[..., Settings]) -> None:
    settings = seq_settings(partitions=4, sequencer_batch_size=100)
    items = interleaved_runs(60, 50, seed=3, stem="scale")
    b_assigned = threading.Event()
    failures: list[BaseException] = []

    def stream() -> None:
        # Paced chunks; the last third waits until b owns partitions, so both have work.
        try:
            p = raw_producer(settings)
            for i in range(0, len(items), 100):
                if i >= 2 * len(items) // 3:
                    assert b_assigned.wait(60), "b never got partitions"
                for run, value in items[i : i + 100]:
                    p.produce(settings.topics.raw, value, run)
                assert p.flush(30) == 0
                b_assigned.wait(0.05)  # pacing only
        except BaseException as exc:
            failures.append(exc)

    with running(settings, "a") as (a, a_errors):
        producer = threading.Thread(target=stream, daemon=True)
        producer.start()
        wait_until(lambda: sealed_count(settings) > 0, timeout=60, what="instance a to seal")
        # b joins while a is working: the group rebalances and b restores its partitions' heads
        with running(settings, "b") as (b, b_errors):
            wait_until(
                lambda: b.metrics.snapshot()["tracevault_sequencer_rebalances_total"] >= 1,
                timeout=60,
                what="b to get partitions",
                every=0.1,
            )
            b_assigned.set()
            producer.join(60)
            assert not failures, failures
            wait_until(lambda: sealed_count(settings) >= len(items), timeout=90, what="all sealed")
            assert not a_errors and not b_errors
    _verify(settings, items)
    sa = a.metrics.snapshot()["tracevault_sequencer_sealed_total"]
    sb = b.metrics.snapshot()["tracevault_sequencer_sealed_total"]
    assert sa > 0 and sb > 0, "both instances sealed part of the stream"
    assert sa + sb == len(items)
    assert a.metrics.snapshot()["tracevault_sequencer_rebalances_total"] >= 3  # assign/revoke


def test_a_zombie_with_the_same_instance_id_is_fenced(
    seq_settings: Callable[..., Settings],
) -> None:
    settings = seq_settings(partitions=2, sequencer_batch_size=100)
    items = interleaved_runs(20, 40, seed=5, stem="zombie")
    half = len(items) // 2
    with running(settings, "z") as (old, old_errors):
        produce_raw(settings, items[:half])
        wait_until(lambda: sealed_count(settings) > 0, timeout=60, what="the first z to seal")
        # A second process with the same id: its init_transactions fences the first.
        with running(settings, "z") as (new, new_errors):
            wait_until(
                lambda: bool(old_errors), timeout=60, what="the old instance to stop, fenced"
            )
            assert isinstance(old_errors[0], FencedError), old_errors
            produce_raw(settings, items[half:])
            wait_until(lambda: sealed_count(settings) >= len(items), timeout=90, what="all sealed")
            assert not new_errors
    _verify(settings, items)
    assert new.metrics.snapshot()["tracevault_sequencer_sealed_total"] > 0
    assert old is not new


def test_a_producer_taking_our_transactional_id_fences_the_sequencer(
    seq_settings: Callable[..., Settings],
) -> None:
    settings = seq_settings(partitions=2, sequencer_batch_size=100)
    items = interleaved_runs(10, 30, seed=9, stem="txid")
    third = len(items) // 3
    with running(settings, "y") as (old, old_errors):
        produce_raw(settings, items[:third])
        wait_until(lambda: sealed_count(settings) >= third, timeout=60, what="first third")
        # Only the transactional id is shared (not the group member): producer fencing.
        thief = Producer(
            settings.kafka_config(**{"transactional.id": old.transactional_id, "log_level": 0})
        )
        thief.init_transactions(30)
        produce_raw(settings, items[third : 2 * third])
        wait_until(lambda: bool(old_errors), timeout=60, what="the fenced sequencer to stop")
        assert isinstance(old_errors[0], FencedError), old_errors
        assert "fenced" in str(old_errors[0])
    assert sealed_count(settings) == third, "nothing the fenced instance wrote became visible"
    produce_raw(settings, items[2 * third :])
    with running(settings, "y") as (_, errors):  # the restart fences the thief in turn
        wait_until(lambda: sealed_count(settings) >= len(items), timeout=90, what="all sealed")
        assert not errors
    _verify(settings, items)
