"""A partition's watermarks, asked again while its leader moves.

``Consumer.get_watermark_offsets`` fails with NOT_LEADER_FOR_PARTITION or
LEADER_NOT_AVAILABLE for a moment after a topic is created or a broker comes back. Every
reader that bounds a read by the watermarks (the heads reader, the heads proof, the
replayer's topic read) asks through :func:`watermarks`, so none fails a whole read on it.
"""

from __future__ import annotations

import threading
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

__all__ = ["watermarks"]

#: Errors that mean "this partition's leader is being elected or moved": retried, not raised.
_LEADER_MOVING = frozenset({KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE})
_PAUSE = threading.Event()  # never set: a bounded wait between two asks


def watermarks(
    consumer: Consumer, tp: TopicPartition, deadline: float, *, min_timeout: float = 0.1
) -> tuple[int, int]:
    """``tp``'s low and high watermarks. A partition whose leader is moving answers
    NOT_LEADER / LEADER_NOT_AVAILABLE for a moment: it is asked again until ``deadline``
    (monotonic), as librdkafka does for fetches, instead of failing the whole read. Each ask
    waits for the broker until ``deadline``, and at least ``min_timeout`` seconds."""
    while True:
        try:
            lo, hi = consumer.get_watermark_offsets(
                tp, timeout=max(min_timeout, deadline - time.monotonic())
            )
            return int(lo), int(hi)
        except KafkaException as exc:
            code = exc.args[0].code() if exc.args else None
            if code not in _LEADER_MOVING or time.monotonic() > deadline:
                raise
            _PAUSE.wait(0.1)
