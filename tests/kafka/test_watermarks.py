"""``tracevault.kafka.watermarks``: the one way a read asks a partition's watermarks.

A partition whose leader is moving (a topic just created, a broker just back) answers
NOT_LEADER / LEADER_NOT_AVAILABLE for a moment; a bare ``get_watermark_offsets`` fails the
whole read on it. Every read that bounds itself by the watermarks asks through the helper,
which asks again until its deadline; only the cached form (no broker round trip) is left to
call directly.
"""

from __future__ import annotations

import ast
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from tests.conftest import unique_name
from tracevault.config import Settings
from tracevault.kafka import ensure_topics, watermarks

PACKAGE = Path(__file__).resolve().parents[2] / "tracevault"
HELPER = PACKAGE / "kafka" / "_watermarks.py"


def _bare_calls() -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == HELPER:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "get_watermark_offsets"
            ):
                continue
            cached = any(
                k.arg == "cached" and isinstance(k.value, ast.Constant) and k.value.value is True
                for k in node.keywords
            )
            if not cached:
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    return found


def test_every_watermark_read_asks_through_the_retrying_helper() -> None:
    assert _bare_calls() == [], "use tracevault.kafka.watermarks (it retries a moving leader)"


def _consumer(bootstrap: str) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": unique_name("wm"),
                     "log_level": 0})  # fmt: skip


def test_watermarks_of_a_fresh_topic_are_its_records(kafka_bootstrap: str) -> None:
    settings = Settings(bootstrap_servers=kafka_bootstrap, topic_prefix=unique_name("wm"),
                        partitions=1)  # fmt: skip
    ensure_topics(settings)
    p = Producer({"bootstrap.servers": kafka_bootstrap, "log_level": 0})
    for i in range(3):
        p.produce(settings.topics.raw, b"v", str(i))
    assert p.flush(30) == 0
    c = _consumer(kafka_bootstrap)
    try:  # asked at once after the topic was made: a moving leader is asked again
        got = watermarks(c, TopicPartition(settings.topics.raw, 0), time.monotonic() + 30)
    finally:
        c.close()
    assert got == (0, 3)


def test_a_partition_that_does_not_exist_fails_at_once(kafka_bootstrap: str) -> None:
    settings = Settings(bootstrap_servers=kafka_bootstrap, topic_prefix=unique_name("wm"),
                        partitions=1)  # fmt: skip
    ensure_topics(settings)
    c = _consumer(kafka_bootstrap)
    t0 = time.monotonic()
    try:
        with pytest.raises(KafkaException):  # not a moving leader: not asked again
            watermarks(c, TopicPartition(settings.topics.raw, 7), time.monotonic() + 20)
    finally:
        c.close()
    assert time.monotonic() - t0 < 15
