"""Taking over partitions waits for the previous owner's open transaction to finish.

The previous owner's last transaction (its heads and its consumer offsets) may still be
committing when another instance restores those partitions. Restoring the heads from before
that commit while the consumer offsets come from after it would put the run book behind the
offsets; the restore therefore waits until no transaction is open on the heads partition.
"""

from __future__ import annotations

from collections.abc import Callable

from confluent_kafka import Producer

from tests.conftest import NOW_US
from tests.services.sequencer.support import (
    produce_raw,
    raw_event,
    running,
    sealed_by_run,
    wait_until,
)
from tracevault.chain import genesis, link
from tracevault.config import Settings
from tracevault.heads import Head, encode_head
from tracevault.schemas import SealedEvent, encode_sealed


def test_restore_waits_for_the_previous_owners_open_transaction(
    seq_settings: Callable[..., Settings],
) -> None:
    settings = seq_settings(partitions=1)
    previous = Producer(
        settings.kafka_config(
            **{"transactional.id": f"{settings.topic_prefix}.previous", "log_level": 0}
        )
    )
    previous.init_transactions(30)
    previous.begin_transaction()
    # the previous owner's last transaction: seqs 0..4 sealed (offsets 0..4) and their head,
    # which the restore proves against them (docs/design.md, "Sequencer rules")
    last_hash = genesis("t")
    for s in range(5):
        raw = raw_event("t", s)
        ev = SealedEvent("t", s, last_hash, link(last_hash, raw), raw, NOW_US, 0, s, "previous")
        last_hash = ev.hash
        previous.produce(settings.topics.sealed, encode_sealed(ev), b"t", partition=0)
    head = Head("t", 5, last_hash, False, 0, first_offset=0, last_offset=4)
    previous.produce(settings.topics.heads, encode_head(head), b"t", partition=0)
    assert previous.flush(30) == 0
    produce_raw(settings, [("t", raw_event("t", 5, last=5))])
    with running(settings, "t1") as (seq, errors):
        wait_until(
            lambda: seq.metrics.snapshot()["tracevault_sequencer_rebalances_total"] >= 1,
            timeout=30,
            what="the sequencer to start restoring its partition",
            every=0.05,
        )
        previous.commit_transaction(30)
        # wait for seq 5 itself: the previous owner's seqs 0..4, committed just above, are
        # already on the sealed topic, so "any event of t" is true before the restore ends
        wait_until(
            lambda: any(ev.seq == 5 for _, ev in sealed_by_run(settings).get("t", [])),
            timeout=60,
            what="seq 5 sealed",
        )
        assert not errors
    *_, (_, sealed) = sealed_by_run(settings)["t"]
    assert (sealed.seq, sealed.prev_hash) == (5, last_hash), "continued from the committed head"
