"""The heads contract: the codec round-trips, and locate_run finds a run from its head alone."""

from __future__ import annotations

import logging
import random
import threading
import uuid
from collections.abc import Callable

import pytest
from confluent_kafka import Producer

from tests.services.sequencer.support import (
    assert_chain,
    produce_raw,
    raw_event,
    running,
    sealed_by_run,
    sealed_count,
    wait_until,
)
from tracevault.chain import genesis, link
from tracevault.config import Settings
from tracevault.errors import SchemaError
from tracevault.heads import (
    GapRange,
    Head,
    HeldEvent,
    decode_head,
    encode_head,
    locate_run,
    read_heads,
)
from tracevault.kafka import partition_for
from tracevault.schemas import SealedEvent, encode_sealed
from tracevault.services.sequencer import Sequencer
from tracevault.services.sequencer._log import SignedBatch


def test_head_round_trips_through_avro() -> None:
    head = Head(
        run_id="run-1",
        next_seq=7,
        last_hash=link(genesis("run-1"), b"x"),
        finished=True,
        partition=2,
        first_offset=10,
        last_offset=99,
        gaps=(GapRange(3, 4),),
        held=(HeldEvent(9, b"\xc3\x01raw", 2, 1234, 1_700_000_000_000_000),),
        updated_at=1_700_000_000_000_001,
        sequencer_id="seq-a",
    )
    data = encode_head(head)
    assert data[:2] == b"\xc3\x01"
    assert decode_head(data) == head
    assert head.last_seq == 6
    assert head.in_gap(3) and head.in_gap(4) and not head.in_gap(5)


def test_new_head_starts_at_genesis() -> None:
    head = Head.new("r", 0)
    assert (head.next_seq, head.last_hash, head.finished, head.first_offset) == (
        0,
        genesis("r"),
        False,
        -1,
    )


def test_decode_head_refuses_other_bytes() -> None:
    with pytest.raises(SchemaError):
        decode_head(b"not a head")


def test_locate_run_reads_the_committed_head(settings_factory: Callable[..., Settings]) -> None:
    settings = settings_factory(partitions=3)
    run_id = "run-located"
    part = partition_for(run_id, 3)
    producer = Producer(
        settings.kafka_config(**{"transactional.id": f"{settings.topic_prefix}-t", "log_level": 0})
    )
    producer.init_transactions(30)
    old = Head(run_id, 3, b"\x01" * 32, False, part, first_offset=5, last_offset=8)
    new = Head(run_id, 4, b"\x02" * 32, True, part, first_offset=5, last_offset=12)
    for head in (old, new):
        producer.begin_transaction()
        producer.produce(settings.topics.heads, encode_head(head), run_id.encode(), partition=part)
        producer.commit_transaction(30)
    # An aborted newer head must stay invisible (read_committed).
    producer.begin_transaction()
    aborted = Head(run_id, 99, b"\x03" * 32, True, part, first_offset=5, last_offset=500)
    producer.produce(settings.topics.heads, encode_head(aborted), run_id.encode(), partition=part)
    producer.flush(30)
    producer.abort_transaction(30)

    loc = locate_run(settings, run_id, timeout=20)
    assert loc is not None
    assert (loc.partition, loc.start_offset, loc.end_offset, loc.last_seq, loc.finished) == (
        part,
        5,
        12,
        3,
        True,
    )
    assert locate_run(settings, "no-such-run", timeout=20) is None


@pytest.mark.parametrize(
    "head",
    [
        Head("r", 0, genesis("r"), False, 0),
        Head(
            "run-é🙂" * 20,
            2**40,
            b"\x09" * 32,
            True,
            2**31 - 1,
            2**62,
            2**62 + 5,
            (),
            (),
            2**60,
            "seq-b",
        ),
        Head("x", 64, b"\x00" * 32, False, 63, -1, -1, updated_at=-5, sequencer_id=""),
    ],
)
def test_direct_head_encoding_matches_the_codec(head: Head) -> None:
    from tracevault.heads._record import _encode_head_avro

    assert encode_head(head) == _encode_head_avro(head)
    assert decode_head(encode_head(head)) == head


def test_each_head_carries_its_runs_first_and_last_sealed_offsets(
    seq_settings: Callable[..., Settings],
) -> None:
    """Heads name the exact sealed offsets of each run's seq 0 and latest event (the history
    reader and the replayer read that range): many runs interleaved, several events of a run
    in one transaction, runs starting in the middle of a batch, and a second wave sealed by
    later transactions (its heads keep the first offset and move the last)."""
    settings = seq_settings(sequencer_batch_size=25)
    runs = [f"offsets-{i:02d}-{uuid.uuid4().hex[:6]}" for i in range(40)]
    rng = random.Random(11)

    def wave(seqs: range) -> list[tuple[str | bytes | None, bytes | None]]:
        items: list[tuple[str | bytes | None, bytes | None]] = []
        pos = {r: seqs.start for r in runs}
        live = list(runs)
        while live:
            r = rng.choice(live)
            items.append((r, raw_event(r, pos[r])))
            pos[r] += 1
            if pos[r] == seqs.stop:
                live.remove(r)
        return items

    with running(settings) as (_seq, errors):
        for n, seqs in enumerate((range(0, 6), range(6, 12)), start=1):
            produce_raw(settings, wave(seqs))
            wait_until(
                lambda n=n: sealed_count(settings) >= n * 6 * len(runs),
                timeout=60,
                what=f"wave {n} sealed",
            )
        assert not errors, errors
    heads = read_heads(settings, range(settings.partitions))
    sealed = sealed_by_run(settings)
    for r in runs:
        offsets = {ev.seq: rec.offset for rec, ev in sealed[r]}
        assert sorted(offsets) == list(range(12)), r
        head = heads[r]
        assert head.next_seq == 12
        assert (head.first_offset, head.last_offset) == (offsets[0], offsets[11]), r


def test_a_record_of_another_producer_inside_a_transaction_is_seen_and_the_batch_redone(
    seq_settings: Callable[..., Settings], caplog: pytest.LogCaptureFixture
) -> None:
    """Heads' offsets come from two delivery reports per partition, checked by their distance.
    A plain producer really writes to ``sealed`` between this transaction's events and its
    checkpoint: the sequencer notices, aborts that batch and redoes it with a report per
    record, and every head still names its run's exact offsets."""
    settings = seq_settings(sequencer_batch_size=25)
    runs = [f"intrude-{i}-{uuid.uuid4().hex[:6]}" for i in range(10)]
    produce_raw(settings, [(r, raw_event(r, s)) for s in range(6) for r in runs])
    intruder = Producer(settings.kafka_config(**{"log_level": 0}))
    raw = raw_event("intruder", 0)
    g = genesis("intruder")
    forged = encode_sealed(SealedEvent("intruder", 0, g, link(g, raw), raw, 0, 0, 0, "intruder"))
    seq = Sequencer(settings, instance_id="t1")
    injected: list[int] = []
    sign = seq.logs.sign

    def sign_after_an_intrusion(leaves: dict[int, list[bytes]]) -> SignedBatch:
        if not injected:  # once: our events of this transaction are placed, then a stranger's
            producer = seq.runtime.txn.producer if seq.runtime.txn else None
            assert producer is not None and producer.flush(10) == 0
            part = next(iter(leaves))
            intruder.produce(settings.topics.sealed, forged, b"intruder", part)
            assert intruder.flush(10) == 0
            injected.append(part)
        return sign(leaves)

    seq.logs.sign = sign_after_an_intrusion  # type: ignore[method-assign]
    errors: list[BaseException] = []
    thread = threading.Thread(target=lambda: _run(seq, errors), daemon=True)
    with caplog.at_level(logging.WARNING, logger="tracevault.services.sequencer._loop"):
        thread.start()
        try:
            wait_until(lambda: sealed_count(settings) >= 61, timeout=60, what="all sealed")
        finally:
            seq.stop()
            thread.join(60)
    assert not errors, errors
    assert injected and seq.step.writer.per_record
    assert "another producer wrote to it" in caplog.text
    sealed = sealed_by_run(settings)
    assert [ev.seq for _rec, ev in sealed["intruder"]] == [0]  # only the stranger's record
    heads = read_heads(settings, range(settings.partitions))
    for r in runs:
        assert_chain(r, [ev for _rec, ev in sealed[r]], [raw_event(r, s) for s in range(6)])
        offsets = {ev.seq: rec.offset for rec, ev in sealed[r]}
        assert (heads[r].first_offset, heads[r].last_offset) == (offsets[0], offsets[5]), r


def _run(seq: Sequencer, errors: list[BaseException]) -> None:
    try:
        seq.run()
    except BaseException as exc:
        errors.append(exc)
