"""Writing sealed records and a run's head to Kafka the way the sequencer commits them.

One Kafka transaction: the records to ``<prefix>.sealed`` (key = run id, the run's
murmur2 partition), then the head to ``<prefix>.heads`` with the exact offsets the delivery
reports gave. ``head_of`` describes what the sequencer sealed (the honest records), so a
test can write damaged records under an honest head, as a tampered broker would present them.
"""

from __future__ import annotations

import uuid

from confluent_kafka import Producer

from tracevault.config import Settings
from tracevault.heads import Head, encode_head
from tracevault.kafka import partition_for
from tracevault.schemas import EventKind, SealedEvent, decode_event, encode_sealed


def publish(
    settings: Settings,
    written: list[SealedEvent],
    *,
    honest: list[SealedEvent] | None = None,
    run_id: str | None = None,
) -> Head:
    """Write ``written`` and the head of ``honest`` (default: ``written``) in one transaction."""
    honest = written if honest is None else honest
    rid = run_id or honest[0].run_id
    part = partition_for(rid, settings.partitions)
    producer = Producer(
        settings.kafka_config(
            **{
                "transactional.id": f"test-replayer-{uuid.uuid4().hex[:8]}",
                "enable.idempotence": True,
                "partitioner": "murmur2_random",
                "log_level": 0,
            }
        )
    )
    offsets: list[int] = []

    def on_delivery(err, msg) -> None:
        assert err is None, err
        offsets.append(msg.offset())

    producer.init_transactions(30)
    producer.begin_transaction()
    for s in written:
        producer.produce(
            settings.topics.sealed, encode_sealed(s), rid.encode(), partition=part,
            on_delivery=on_delivery,
        )  # fmt: skip
    producer.flush(30)
    last = honest[-1]
    head = Head(
        run_id=rid,
        next_seq=last.seq + 1,
        last_hash=last.hash,
        finished=decode_event(last.raw).kind is EventKind.RUN_FINISHED,
        partition=part,
        first_offset=min(offsets),
        last_offset=max(offsets),
    )
    producer.produce(settings.topics.heads, encode_head(head), rid.encode(), partition=part)
    producer.commit_transaction(30)
    return head
