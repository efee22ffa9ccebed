"""Which incarnation of the sealed topic this is: the generation in every log origin.

A log's origin must change when the Kafka cluster is rebuilt or the topic is created again
over the same archive; otherwise the new log, starting again at leaf 0 under the old name,
looks like a fork of the archived one (docs/log.md, "A new cluster is a new log"). Kafka
already names both (the cluster id and the topic id), so every service derives the same
generation from them and nothing has to be stored.
"""

from __future__ import annotations

from confluent_kafka import KafkaException, TopicCollection
from confluent_kafka.admin import AdminClient

from tracevault.config import Settings
from tracevault.errors import ServiceUnavailableError
from tracevault.transparency import log_generation

__all__ = ["sealed_generation"]


def sealed_generation(settings: Settings, timeout: float = 30.0) -> str:
    """The generation of ``<prefix>.sealed`` on the cluster ``settings`` names."""
    topic = settings.topics.sealed
    admin = AdminClient(settings.kafka_config(log_level=0))
    try:
        md = admin.list_topics(topic=topic, timeout=timeout)
        (desc,) = [
            f.result(timeout) for f in admin.describe_topics(TopicCollection([topic])).values()
        ]
    except KafkaException as exc:
        raise ServiceUnavailableError(
            f"Kafka at {settings.bootstrap_servers} did not describe {topic} ({exc}); the log's "
            "origin names the topic's incarnation, so nothing is signed or archived without it"
        ) from exc
    cluster: object = md.cluster_id
    if not cluster:
        raise ServiceUnavailableError(
            f"Kafka at {settings.bootstrap_servers} gave no cluster id for {topic}"
        )
    return log_generation(str(cluster), str(desc.topic_id))
