"""The broker the tests run on really does exactly-once, and our murmur2 matches librdkafka's."""

from __future__ import annotations

import uuid
from collections.abc import Callable

from confluent_kafka import Consumer, Producer

from tracevault.kafka import murmur2, partition_for


def _read_all(bootstrap: str, topic: str, isolation: str, expect: int) -> list[bytes]:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )
    c.subscribe([topic])
    out: list[bytes] = []
    empty = 0
    try:
        # Stop after the expected count, or after ~5 s of silence once something was seen.
        while len(out) < expect and empty < 10:
            msg = c.poll(0.5)
            if msg is None:
                empty += 1 if out else 0
                continue
            assert msg.error() is None, msg.error()
            out.append(msg.value())
    finally:
        c.close()
    return out


def test_transactions_commit_and_abort_on_this_broker(
    kafka_bootstrap: str, topic_factory: Callable[..., str]
) -> None:
    topic = topic_factory("eos")
    p = Producer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "transactional.id": f"tx-{uuid.uuid4().hex}",
            "enable.idempotence": True,
        }
    )
    p.init_transactions(60)
    p.begin_transaction()
    p.produce(topic, b"committed-1")
    p.commit_transaction(30)
    p.begin_transaction()
    p.produce(topic, b"aborted")
    p.flush(30)
    p.abort_transaction(30)
    p.begin_transaction()
    p.produce(topic, b"committed-2")
    p.commit_transaction(30)

    committed = _read_all(kafka_bootstrap, topic, "read_committed", expect=2)
    assert committed == [b"committed-1", b"committed-2"]
    # The aborted record really reached the log: an uncommitted reader sees it.
    uncommitted = _read_all(kafka_bootstrap, topic, "read_uncommitted", expect=3)
    assert b"aborted" in uncommitted


def test_murmur2_known_values() -> None:
    # Values from Kafka's own UtilsTest.testMurmur2 (Java ints, shown unsigned here).
    cases = {
        b"21": -973932308,
        b"foobar": -790332482,
        b"a-little-bit-long-string": -985981536,
        b"a-little-bit-longer-string": -1486304829,
        b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
        b"abc": 479470107,
    }
    for data, java_int in cases.items():
        assert murmur2(data) == java_int & 0xFFFFFFFF, data


def test_partition_for_matches_librdkafka_murmur2_random(
    kafka_bootstrap: str, topic_factory: Callable[..., str]
) -> None:
    topic = topic_factory("part", partitions=7)
    p = Producer({"bootstrap.servers": kafka_bootstrap, "partitioner": "murmur2_random"})
    landed: dict[str, int] = {}

    def on_delivery(err: object, msg: object) -> None:
        assert err is None
        landed[msg.key().decode()] = msg.partition()  # type: ignore[attr-defined]

    keys = [str(uuid.uuid4()) for _ in range(200)]
    for k in keys:
        p.produce(topic, b"x", key=k, on_delivery=on_delivery)
    assert p.flush(30) == 0
    assert len(landed) == len(keys)
    assert {k: partition_for(k, 7) for k in keys} == landed
    assert len(set(landed.values())) == 7  # the keys really spread over every partition
