"""Producer settings and the delivery accounting the Publisher reports."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tracevault.config import Settings, kafka_log

__all__ = ["CloseReport", "PublisherStats", "producer_config"]

#: The agent's librdkafka lines under their own name (an agent may quiet them apart from its
#: services'), deduplicated like every client's: a broker that is away is one line a minute,
#: not twenty a second.
_LIBRDKAFKA_LOG = kafka_log("tracevault.producer.librdkafka")


def producer_config(settings: Settings, **extra: Any) -> dict[str, Any]:
    """The librdkafka settings every tracevault event producer uses (docs/design.md)."""
    return settings.kafka_config(
        **{
            "enable.idempotence": True,
            "acks": "all",
            "compression.type": "zstd",
            "linger.ms": settings.producer_linger_ms,
            "partitioner": "murmur2_random",
            # Never expire a message: an expiry could let a later event of the same run land
            # first. Outages are handled by spooling, which purges in order.
            "message.timeout.ms": 0,
            # Only failures come back to Python: a success costs no callback. Acknowledged =
            # produced - failed - still inside librdkafka.
            "delivery.report.only.error": True,
            "logger": _LIBRDKAFKA_LOG,
            **extra,
        }
    )


@dataclass(frozen=True, slots=True)
class PublisherStats:
    """Counters since the Publisher started (events = Kafka messages).

    ``published`` were handed over by recorders, ``delivered`` acknowledged by Kafka
    directly, ``spooled`` written to the local spool, ``drained`` sent from the spool and
    acknowledged (including segments adopted from dead processes), ``queued`` not yet taken
    by the background thread, ``in_flight`` inside the Kafka client. ``held`` counts the
    recorder calls that waited for the background thread to catch up (it was not getting
    the CPU, and the queue was about to outlive the spool's bound) and ``held_s`` their
    seconds of waiting in all (docs/design.md, "The spool").
    """

    published: int
    delivered: int
    spooled: int
    drained: int
    queued: int
    in_flight: int
    spooling: bool
    lost: int
    held: int = 0
    held_s: float = 0.0


@dataclass(frozen=True, slots=True)
class CloseReport:
    """What ``close`` left behind: ``undelivered`` events wait in ``spool_files``.

    ``lost`` counts events that could be neither delivered nor written to the spool (a full
    or unwritable disk); it is logged as an error and should be zero.
    """

    delivered: int
    drained: int
    spooled: int
    undelivered: int
    lost: int
    spool_files: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return self.undelivered == 0 and self.lost == 0
