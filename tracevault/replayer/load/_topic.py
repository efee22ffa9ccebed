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
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from tracevault.config import Settings
from tracevault.errors import LogError, NotFoundError, SchemaError, ServiceUnavailableError
from tracevault.heads import Head, find_head, heads_partition_count, read_state
from tracevault.kafka import new_reader, partition_for, watermarks
from tracevault.replayer._records import SealedRows
from tracevault.replayer._results import DlqCopy, LoadedRun
from tracevault.replayer.load.checks import fail
from tracevault.schemas import Codec
from tracevault.transparency import (
    Checkpoint,
    CheckpointRecord,
    FoundCheckpoint,
    contested_ids,
    is_checkpoint_record,
    is_partition_origin,
    log_origin,
    split_note,
)

__all__ = ["find_contested_on_topic", "find_dlq_copies", "load_from_topic"]

log = logging.getLogger(__name__)

#: A run's DLQ records kept for checking: far more than a run's refused events, bounded so a
#: flood of records written under its key cannot exhaust the verifier's memory.
_MAX_DLQ_COPIES = 20_000

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
    head = _find_head(settings, run_id, timeout)
    topic = settings.topics.sealed
    consumer = _consumer(settings)
    scan = _Scan(topic, head, run_id.encode("utf-8"), _codec(), with_log, log_until)
    deadline = time.monotonic() + timeout
    try:
        _check_kept(consumer, topic, head, run_id, timeout)
        _read(consumer, scan, deadline, timeout)
    except KafkaException as exc:
        raise ServiceUnavailableError(
            f"Kafka at {settings.bootstrap_servers} failed reading {topic} ({exc})"
        ) from exc
    finally:
        consumer.close()
    return LoadedRun(
        run_id=run_id,
        source="topic",
        records=SealedRows(scan.rows),
        objects=scan.objects,
        expected_last_seq=head.last_seq,
        expected_finished=head.finished,
        expected_head=head.last_hash,
        expected_gaps=tuple((g.missing_from, g.missing_to) for g in head.gaps),
        log_origin=_origin(settings, head.partition, scan.found) if with_log else None,
        log_checkpoints=tuple(scan.found),
    )


def find_contested_on_topic(
    settings: Settings, run_id: str, *, with_log: bool = False, timeout: float = 30.0
) -> tuple[LoadedRun, ...]:
    """The sequencer's contested records naming ``run_id`` that the topic still holds: one
    read of the run's heads partition (the records are sealed beside the run, so their heads
    are there), the ids taken in the sequencer's order until one is unknown."""
    n = heads_partition_count(settings, timeout=min(timeout, 10.0))
    here = partition_for(run_id, n)
    state = read_state(settings, [here], timeout=timeout)

    def known(cid: str) -> bool:
        return cid in state.heads or any(
            chunk.head(cid) is not None for _p, chunk in state.finished.values()
        )

    found: list[LoadedRun] = []
    for cid in contested_ids(run_id, lambda c: partition_for(c, n) == here):
        if not known(cid):
            break
        found.append(load_from_topic(settings, cid, timeout=timeout, with_log=with_log))
    return tuple(found)


def find_dlq_copies(
    settings: Settings, run_id: str, *, timeout: float = 30.0
) -> tuple[DlqCopy, ...] | None:
    """The run's records in ``<prefix>.dlq`` (where, the raw record their headers name, their
    bytes), or None when the DLQ could not be read. The sequencer writes a refused event to
    the DLQ partition of its raw partition (the run's). Not evidence (the DLQ is not signed):
    a hijack's genuine events are checked against the agent's notes (``_recover``). At most
    ``_MAX_DLQ_COPIES`` are kept: a flood of forged copies cannot exhaust the verifier."""
    n = heads_partition_count(settings, timeout=min(timeout, 10.0))
    topic, here, key = settings.topics.dlq, partition_for(run_id, n), run_id.encode("utf-8")
    consumer = _consumer(settings)
    out: list[DlqCopy] = []
    deadline = time.monotonic() + timeout
    try:
        consumer.assign([TopicPartition(topic, here, OFFSET_BEGINNING)])
        while time.monotonic() < deadline:
            for msg in consumer.consume(1000, timeout=0.5):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        return tuple(out)
                    continue
                if msg.key() == key and len(out) < _MAX_DLQ_COPIES:
                    h = _text_headers(msg.headers())
                    src = "tracevault.source."
                    raw = (
                        f"{h.get(src + 'topic')}[{h.get(src + 'partition')}]"
                        f"@{h.get(src + 'offset')}"
                    )
                    out.append(DlqCopy(raw, f"{topic}[{here}]@{msg.offset()}", msg.value()))
    except KafkaException as exc:
        log.warning("the DLQ %s was not read (%s): its copies are not checked", topic, exc)
        return None
    finally:
        consumer.close()
    log.warning("the DLQ %s was not read to its end in %.0fs", topic, timeout)
    return None


def _find_head(settings: Settings, run_id: str, timeout: float) -> Head:
    """Step 1: the run's committed head, or ``NotFoundError`` saying where else to look."""
    head = find_head(settings, run_id, timeout=timeout)
    if head is None or head.first_offset < 0:
        raise NotFoundError(
            f"run {run_id!r} has no sealed events in {settings.topics.sealed} (no head in "
            f"{settings.topics.heads}); check the run id, that the sequencer runs, or read it "
            "from the archive (--from archive): a run finished longer ago than the "
            "sequencer's horizon is found there only"
        )
    return head


def _consumer(settings: Settings) -> Consumer:
    """A consumer of its own group that commits nothing and sees committed records only."""
    return new_reader(settings, "replayer")


def _check_kept(consumer: Consumer, topic: str, head: Head, run_id: str, timeout: float) -> None:
    """``NotFoundError`` when the topic no longer holds the run's first record."""
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


@dataclass(slots=True)
class _Scan:
    """What one read of the run's sealed partition keeps: the run's records (and, with the
    log, the partition's checkpoint records), message by message."""

    topic: str
    head: Head
    key: bytes
    codec: Codec
    with_log: bool
    log_until: int
    rows: list[dict[str, Any]] = field(default_factory=list)
    objects: list[str] = field(default_factory=list)
    found: list[FoundCheckpoint] = field(default_factory=list)

    def take(self, msg: Message) -> bool:
        """Keep ``msg`` if it is the run's, or a checkpoint record with the log; True once
        the read is done (the partition's end, or past the head's last offset)."""
        topic, head = self.topic, self.head
        err = msg.error()
        if err is not None:
            if err.code() == KafkaError._PARTITION_EOF:
                return True
            if err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise NotFoundError(f"topic {topic} does not exist")
            return False
        off = msg.offset() or 0
        if self.with_log and _is_checkpoint(msg.headers()):
            where = f"{topic}[{head.partition}]@{off}"
            self.found.append(_checkpoint(msg.value() or b"", where))
            return off > head.last_offset and self.found[-1].record.end >= self.log_until
        if msg.key() == self.key:
            where = f"{topic}[{head.partition}]@{off}"
            value = msg.value() or b""
            try:
                self.rows.append(self.codec.decode(value, what=where))
            except SchemaError as exc:
                raise fail(
                    "1 run", len(self.rows), where, f"not a readable SealedEvent ({exc})"
                ) from exc
            self.objects.append(where)
        return off >= head.last_offset and not self.with_log


def _read(consumer: Consumer, scan: _Scan, deadline: float, timeout: float) -> None:
    """Step 2: the sealed partition from the head's first offset until ``scan`` is done."""
    topic, head = scan.topic, scan.head
    consumer.assign([TopicPartition(topic, head.partition, head.first_offset)])
    done = False
    while not done:
        if time.monotonic() > deadline:
            raise ServiceUnavailableError(
                f"reading {topic}[{head.partition}] from offset {head.first_offset} did not "
                f"reach offset {head.last_offset} within {timeout:.0f}s; check the broker"
            )
        for msg in consumer.consume(1000, timeout=0.5):
            if scan.take(msg):
                done = True
                break


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


def _text_headers(headers: Any) -> dict[str, str]:
    """A record's headers as text (confluent_kafka types them loosely)."""
    if not isinstance(headers, list):
        return {}
    return {
        k: v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v or "")
        for k, v in headers
    }


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
