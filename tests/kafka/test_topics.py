"""``tracevault topics``: idempotent creation, description, and mismatches reported."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from click.testing import CliRunner
from confluent_kafka.admin import AdminClient, NewTopic

from tests.conftest import unique_name
from tracevault.cli import tracevault
from tracevault.config import Settings
from tracevault.errors import TopicMismatchError
from tracevault.kafka import describe_topics, ensure_topics


def _cli(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(tracevault, list(args), catch_exceptions=False)
    return res.exit_code, res.output


def test_create_twice_then_describe_shows_four_topics(kafka_bootstrap: str) -> None:
    prefix = unique_name("tv")
    common = ["--bootstrap-servers", kafka_bootstrap, "--prefix", prefix]
    code, out = _cli(*common, "topics", "create", "--partitions", "4", "--json")
    assert code == 0, out
    first = json.loads(out)
    assert [t["status"] for t in first] == ["created"] * 4

    code, out = _cli(*common, "topics", "create", "--partitions", "4", "--json")
    assert code == 0, out
    assert [t["status"] for t in json.loads(out)] == ["exists"] * 4

    code, out = _cli(*common, "topics", "describe", "--json")
    assert code == 0, out
    topics = {t["topic"]: t for t in json.loads(out)}
    assert sorted(topics) == sorted(f"{prefix}.{r}" for r in ("raw", "sealed", "heads", "dlq"))
    assert topics[f"{prefix}.heads"]["config"]["cleanup.policy"] == "compact"
    assert topics[f"{prefix}.raw"]["config"]["cleanup.policy"] == "delete"
    assert {t["partitions"] for t in topics.values()} == {4}

    code, out = _cli(*common, "topics", "describe")
    assert code == 0
    assert "compact" in out and "heads" in out


def test_heads_that_is_not_compacted_is_reported(kafka_bootstrap: str) -> None:
    settings = Settings(
        bootstrap_servers=kafka_bootstrap, topic_prefix=unique_name("tv"), partitions=2
    )
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics(
        [NewTopic(settings.topics.heads, 2, 1, config={"cleanup.policy": "delete"})]
    )[settings.topics.heads].result(30)
    with pytest.raises(TopicMismatchError, match=r"heads.*cleanup.policy=delete, expected compact"):
        ensure_topics(settings)
    report = {r.role: r for r in describe_topics(settings)}
    assert report["heads"].status == "mismatch"
    code, _ = _cli(
        "--bootstrap-servers",
        kafka_bootstrap,
        "--prefix",
        settings.topic_prefix,
        "topics",
        "describe",
    )
    assert code == 1


def test_partition_count_mismatch_is_reported(
    kafka_bootstrap: str, topic_factory: Callable[..., str]
) -> None:
    settings = Settings(
        bootstrap_servers=kafka_bootstrap, topic_prefix=unique_name("tv"), partitions=3
    )
    ensure_topics(settings)
    wider = settings.model_copy(update={"partitions": 5})
    with pytest.raises(TopicMismatchError, match="co-partitioned"):
        ensure_topics(wider)


def test_unreachable_broker_exits_3() -> None:
    # --timeout bounds the wait: the default 15 s proves nothing more than 2 s does
    code, out = _cli("--bootstrap-servers", "127.0.0.1:1", "topics", "describe", "--timeout", "2")
    assert code == 3, out
    code, out = _cli("--bootstrap-servers", "127.0.0.1:1", "topics", "create", "--timeout", "2")
    assert code == 3, out
