"""Loading a run from ``<prefix>.sealed``: straight to its partition and offsets, no scan.

1. The run's committed head is read from its one ``<prefix>.heads`` partition
   (``partition_for(run_id, partitions)``, see ``tracevault.heads``).
2. The sealed partition is assigned at the head's ``first_offset`` (seq 0), read with
   ``read_committed``, keeping records keyed by the run id, until the head's ``last_offset``
   (or the partition's end, if records the head promised are missing).

The head also says what the records must end with (last seq, chain hash, finished), which the
verifier checks (T1), so an event deleted from the end of the topic is caught too.
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from tracevault.config import Settings
from tracevault.errors import LogError, NotFoundError, SchemaError, ServiceUnavailableError
from tracevault.heads import find_head
from tracevault.kafka import watermarks
from tracevault.log import (
    Checkpoint,
    CheckpointRecord,
    FoundCheckpoint,
    is_checkpoint_record,
    is_partition_origin,
    log_origin,
    split_note,
)
from tracevault.replayer._records import SealedRows
from tracevault.replayer._results import LoadedRun
from tracevault.replayer.load.checks import fail
from tracevault.schemas import Codec

__all__ = ["load_from_topic"]

log = logging.getLogger(__name__)

_SEALED: Codec | None = None


def _codec() -> Codec:
    global _SEALED  # noqa: PLW0603 - built on first use, not at import
    if _SEALED is None:
        _SEALED = Codec("SealedEvent")
    return _SEALED


def load_from_topic(
    settings: Settings,
    run_id: str,
    *,
    timeout: float = 30.0,
    with_log: bool = False,
    log_until: int = 0,
) -> LoadedRun:
    """The run's sealed records from Kafka; ``NotFoundError`` if no head knows the run.

    With ``with_log`` the checkpoint records of the partition are kept too, from the run's
    first record through the first one after its last (the one that covers its last
    transaction), for ``verify`` to gather the run's log evidence (docs/log.md); with
    ``log_until``, on through the first one whose tree reaches that size (a witness's).
    """
    head = find_head(settings, run_id, timeout=timeout)
    if head is None or head.first_offset < 0:
        raise NotFoundError(
            f"run {run_id!r} has no sealed events in {settings.topics.sealed} (no head in "
            f"{settings.topics.heads}); check the run id, that the sequencer runs, or read it "
            "from the archive (--from archive): a run finished longer ago than the "
            "sequencer's horizon is found there only"
        )
    topic = settings.topics.sealed
    consumer = Consumer(
        settings.kafka_config(
            **{
                "group.id": f"tracevault-replayer-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "isolation.level": "read_committed",
                "auto.offset.reset": "earliest",
                "log_level": 0,
            }
        )
    )
    key = run_id.encode("utf-8")
    codec = _codec()
    rows: list[dict[str, Any]] = []
    objects: list[str] = []
    found: list[FoundCheckpoint] = []
    deadline = time.monotonic() + timeout
    try:
        low, _high = watermarks(
            consumer, TopicPartition(topic, head.partition), time.monotonic() + min(timeout, 10.0)
        )
        if low > head.first_offset:
            raise NotFoundError(
                f"run {run_id!r}: its sealed records (from offset {head.first_offset} of "
                f"{topic}[{head.partition}]) have expired from the topic (it now starts at "
                f"{low}); read the run from the archive (--from archive)"
            )
        log.debug(
            "reading run %s from %s[%d] offsets %d..%d",
            run_id,
            topic,
            head.partition,
            head.first_offset,
            head.last_offset,
        )
        consumer.assign([TopicPartition(topic, head.partition, head.first_offset)])
        done = False
        while not done:
            if time.monotonic() > deadline:
                raise ServiceUnavailableError(
                    f"reading {topic}[{head.partition}] from offset {head.first_offset} did not "
                    f"reach offset {head.last_offset} within {timeout:.0f}s; check the broker"
                )
            for msg in consumer.consume(1000, timeout=0.5):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        done = True
                        break
                    if err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                        raise NotFoundError(f"topic {topic} does not exist")
                    continue
                off = msg.offset() or 0
                if with_log and _is_checkpoint(msg.headers()):
                    where = f"{topic}[{head.partition}]@{off}"
                    found.append(_checkpoint(msg.value() or b"", where))
                    if off > head.last_offset and found[-1].record.end >= log_until:
                        done = True
                        break
                    continue
                if msg.key() == key:
                    where = f"{topic}[{head.partition}]@{off}"
                    value = msg.value() or b""
                    try:
                        rows.append(codec.decode(value, what=where))
                    except SchemaError as exc:
                        raise fail(
                            "1 run", len(rows), where, f"not a readable SealedEvent ({exc})"
                        ) from exc
                    objects.append(where)
                if off >= head.last_offset and not with_log:
                    done = True
                    break
    except KafkaException as exc:
        raise ServiceUnavailableError(
            f"Kafka at {settings.bootstrap_servers} failed reading {topic} ({exc})"
        ) from exc
    finally:
        consumer.close()
    return LoadedRun(
        run_id=run_id,
        source="topic",
        records=SealedRows(rows),
        objects=objects,
        expected_last_seq=head.last_seq,
        expected_finished=head.finished,
        expected_head=head.last_hash,
        expected_gaps=tuple((g.missing_from, g.missing_to) for g in head.gaps),
        log_origin=_origin(settings, head.partition, found) if with_log else None,
        log_checkpoints=tuple(found),
    )


def _origin(settings: Settings, partition: int, found: list[FoundCheckpoint]) -> str:
    """The log the run's checkpoints name: this partition's, of the generation the newest
    names (a new cluster is a new log: docs/log.md); L1 then holds every one to it."""
    for f in reversed(found):
        try:
            origin = Checkpoint.parse(split_note(f.record.note)[0]).origin
        except LogError:
            continue
        if is_partition_origin(origin, settings.log_origin, settings.topic_prefix, partition):
            return origin
    return log_origin(settings.log_origin, settings.topic_prefix, partition)


def _is_checkpoint(headers: Any) -> bool:
    """confluent_kafka types headers loosely; ours are a list of (str, bytes)."""
    return isinstance(headers, list) and is_checkpoint_record(headers)


def _checkpoint(value: bytes, where: str) -> FoundCheckpoint:
    try:
        return FoundCheckpoint(CheckpointRecord.decode(value), where)
    except LogError as exc:
        raise LogError(
            f"L1 signature: checkpoint record {where} is unreadable ({exc})", checkpoint=where
        ) from exc
