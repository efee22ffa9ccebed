"""The Kafka clients the services run on, built in one place from the settings.

The service runtime (``tracevault.services.runtime``) asks for its consumer here rather than
constructing ``confluent_kafka.Consumer`` itself, so what every client carries (bootstrap
servers, security, the settings' overrides) is added once. Building a client opens no
connection: librdkafka connects on the first call that needs the broker.
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import Consumer

from tracevault.config import Settings

__all__ = ["new_consumer"]


def new_consumer(settings: Settings, **conf: Any) -> Consumer:
    """A consumer with ``conf`` over the settings' client configuration."""
    return Consumer(settings.kafka_config(**conf))
