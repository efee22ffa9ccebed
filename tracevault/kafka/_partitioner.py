"""Kafka's murmur2 partitioner, so Python code can find the partition a run lives in.

librdkafka's ``murmur2_random`` and Java's default partitioner both use
``(murmur2(key) & 0x7fffffff) % partitions``; the replayer uses this to seek straight to a
run's partition instead of scanning the topic.
"""

from __future__ import annotations

__all__ = ["murmur2", "partition_for"]

_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (``org.apache.kafka.common.utils.Utils.murmur2``) as an unsigned int."""
    length = len(data)
    h = (0x9747B28C ^ length) & _MASK
    end = length & ~3
    for i in range(0, end, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = (h * _M) & _MASK
        h ^= k
    rem = length & 3
    if rem == 3:
        h ^= data[end + 2] << 16
    if rem >= 2:
        h ^= data[end + 1] << 8
    if rem >= 1:
        h ^= data[end]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h


def partition_for(key: str | bytes, partitions: int) -> int:
    """The partition Kafka's murmur2 partitioners choose for ``key``."""
    data = key.encode("utf-8") if isinstance(key, str) else key
    return (murmur2(data) & 0x7FFFFFFF) % partitions
