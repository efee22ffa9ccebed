"""What the sealed topic says the archive must hold: the freshness check's Kafka side.

The archiver commits a sealed partition's offset only after the objects up to it are durably
written (docs/log.md, "Archive"), so the newest checkpoint record *below* the archiver group's
committed offset names a tree size the archive must have reached; an archive smaller than it
was rolled back. The topic's very newest checkpoint is no such proof: the archiver lags it by
a flush. Reading backwards from the committed offset finds that record in one or two small
fetches (the sequencer writes one per transaction). Kafka being down is not a failure here:
the caller says the topic was not compared (docs/log.md, "Freshness").
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from tracevault.config import Settings
from tracevault.errors import LogError
from tracevault.kafka._watermarks import watermarks
from tracevault.transparency import Checkpoint, CheckpointRecord, is_checkpoint_record, split_note

__all__ = ["ArchivedTail", "archived_tails"]

log = logging.getLogger(__name__)

#: records read back from the committed offset at first (doubled until a checkpoint is found)
_BACK = 64
_MAX_BACK = 1 << 16


@dataclass(frozen=True, slots=True)
class ArchivedTail:
    """The newest checkpoint record of a sealed partition the archiver committed past."""

    partition: int
    committed: int  # the archiver group's committed offset (the next it would read)
    origin: str
    size: int
    note: str
    where: str  # topic[partition]@offset of the checkpoint record


def archived_tails(settings: Settings, *, timeout: float = 5.0) -> dict[int, ArchivedTail] | None:
    """Per sealed partition the archiver committed in, its :class:`ArchivedTail`.

    None when Kafka does not answer within ``timeout`` (the caller reports "not compared");
    a partition the archiver never committed in, or whose records before the committed offset
    expired, is absent. Never raises for an unreachable broker."""
    topic = settings.topics.sealed
    consumer = Consumer(
        settings.kafka_config(
            **{
                "group.id": settings.archiver_group_id,  # read its offsets; never joins it
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "fetch.wait.max.ms": 10,  # a few records back from the end: do not linger
                "isolation.level": "read_committed",
                "log_level": 0,
            }
        )
    )
    try:
        md = consumer.list_topics(topic, timeout=timeout)
        tmd = md.topics.get(topic)
        if tmd is None or tmd.error is not None:
            return None
        tps = [TopicPartition(topic, p) for p in sorted(tmd.partitions)]
        committed = consumer.committed(tps, timeout=timeout)
        out: dict[int, ArchivedTail] = {}
        deadline = time.monotonic() + 6 * timeout
        for tp in committed:
            if tp.error is None and tp.offset > 0:
                got = _newest_below(consumer, topic, tp.partition, tp.offset, deadline)
                if got is not None:
                    out[tp.partition] = got
        return out
    except KafkaException as exc:
        log.info("the sealed topic was not compared: Kafka did not answer (%s)", exc)
        return None
    finally:
        consumer.close()


def _newest_below(
    consumer: Consumer, topic: str, partition: int, committed: int, deadline: float
) -> ArchivedTail | None:
    low, _high = watermarks(consumer, TopicPartition(topic, partition), time.monotonic() + 5.0)
    back = _BACK
    while True:
        start = max(low, committed - back)
        found = _scan(consumer, topic, partition, (start, committed), deadline)
        if found is not None:
            return found
        if start <= low or back >= _MAX_BACK or time.monotonic() > deadline:
            return None
        back *= 4


def _scan(
    consumer: Consumer, topic: str, partition: int, span: tuple[int, int], deadline: float
) -> ArchivedTail | None:
    """The last readable checkpoint record at offsets ``span[0]`` .. ``span[1] - 1``."""
    start, end = span
    consumer.assign([TopicPartition(topic, partition, start)])
    newest: ArchivedTail | None = None
    try:
        # poll, not consume(n): a batch call waits out its timeout at the partition's end
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    return newest
                continue
            off = msg.offset() or 0
            if off >= end:
                return newest
            headers = msg.headers()
            if isinstance(headers, list) and is_checkpoint_record(headers):
                where = f"{topic}[{partition}]@{off}"
                try:
                    rec = CheckpointRecord.decode(msg.value() or b"")
                    cp = Checkpoint.parse(split_note(rec.note)[0])
                except LogError as exc:
                    log.warning("checkpoint record %s is unreadable (%s)", where, exc)
                    continue
                newest = ArchivedTail(partition, end, cp.origin, cp.size, rec.note, where)
        return newest
    finally:
        consumer.unassign()
