"""The Kafka clients the services run on, built in one place from the settings.

The service runtime (``tracevault.services.runtime``) asks for its consumer and, in its
transactional commit mode, its transactional producer here rather than constructing
``confluent_kafka`` clients itself, so what every client carries (bootstrap servers,
security, the settings' overrides) is added once. Building a client opens no connection:
librdkafka connects on the first call that needs the broker (``init_transactions`` is the
caller's, under its deadline: docs/liveness.md).
"""

from __future__ import annotations

import uuid
from typing import Any

from confluent_kafka import Consumer, Producer

from tracevault.config import Settings

__all__ = ["new_consumer", "new_producer", "new_reader", "new_transactional_producer"]


def new_consumer(settings: Settings, **conf: Any) -> Consumer:
    """A consumer with ``conf`` over the settings' client configuration."""
    return Consumer(settings.kafka_config(**conf))


def new_reader(settings: Settings, name: str, **conf: Any) -> Consumer:
    """A consumer for a tool that reads a topic without touching the services' groups: a
    group of its own (``tracevault-<name>-<random>``), nothing committed, committed records
    only (``read_committed``), from the earliest, reporting partition ends; ``conf`` over
    that (a caller that reads a group's offsets passes its ``group.id``)."""
    return new_consumer(
        settings,
        **{
            "group.id": f"tracevault-{name}-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "log_level": 0,
            **conf,
        },
    )


def new_producer(settings: Settings, **conf: Any) -> Producer:
    """A plain producer with ``conf`` over the settings' client configuration."""
    return Producer(settings.kafka_config(**conf))


def new_transactional_producer(
    settings: Settings, transactional_id: str, *, timeout_ms: int, **conf: Any
) -> Producer:
    """An idempotent producer with ``transactional.id`` (its transactions fence an older
    producer with the same id once ``init_transactions`` runs) and ``conf`` over the
    settings' client configuration."""
    return Producer(
        settings.kafka_config(
            **{
                "transactional.id": transactional_id,
                "enable.idempotence": True,
                "transaction.timeout.ms": timeout_ms,
                **conf,
            }
        )
    )
