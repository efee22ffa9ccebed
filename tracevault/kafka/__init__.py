"""The thin typed layer between tracevault and confluent-kafka: partitioning, topics and
watermarks."""

from tracevault.kafka._archived_tail import ArchivedTail, archived_tails
from tracevault.kafka._clients import (
    new_consumer,
    new_producer,
    new_reader,
    new_transactional_producer,
)
from tracevault.kafka._generation import sealed_generation
from tracevault.kafka._partitioner import murmur2, partition_for
from tracevault.kafka._topics import (
    TopicReport,
    describe_topics,
    ensure_topics,
    partition_counts,
    topic_specs,
)
from tracevault.kafka._watermarks import watermarks

__all__ = [
    "ArchivedTail",
    "archived_tails",
    "sealed_generation",
    "TopicReport",
    "describe_topics",
    "ensure_topics",
    "murmur2",
    "new_consumer",
    "new_producer",
    "new_reader",
    "new_transactional_producer",
    "partition_counts",
    "partition_for",
    "topic_specs",
    "watermarks",
]
