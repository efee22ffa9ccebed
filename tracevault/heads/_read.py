"""Finding a run's head in ``<prefix>.heads``: the Kafka side of the heads record.

Kept apart from :mod:`tracevault.heads._record` so that reading an archive or a bundle, which
needs the record format but never Kafka, does not import a Kafka client
(docs/design.md, "Layout").
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from tracevault.config import Settings
from tracevault.errors import LogError, SchemaError, ServiceUnavailableError
from tracevault.heads._finished import FinishedChunk, is_finished_key
from tracevault.heads._record import GapRange, Head, decode_head
from tracevault.kafka import partition_for, watermarks
from tracevault.transparency import TREE_KEY, CompactTree, is_tree_record

__all__ = [
    "HeadsState",
    "RunLocation",
    "find_head",
    "heads_partition_count",
    "locate_run",
    "read_heads",
    "read_heads_and_trees",
    "read_state",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RunLocation:
    """Where a run's sealed records are: seek ``partition`` to ``start_offset`` and filter by key.

    ``start_offset`` is the exact offset of seq 0 and ``end_offset`` that of ``last_seq``
    (inclusive) in ``<prefix>.sealed``; ``gaps`` are the seq ranges sealed as GAP markers.
    """

    run_id: str
    partition: int
    start_offset: int
    end_offset: int
    last_seq: int
    finished: bool
    gaps: tuple[GapRange, ...] = field(default=())


def heads_partition_count(settings: Settings, timeout: float = 10.0) -> int:
    """Partitions of ``<prefix>.heads`` as the broker reports them (not as configured)."""
    topic = settings.topics.heads
    consumer = Consumer(
        settings.kafka_config(**{"group.id": "tracevault-heads-probe", "log_level": 0})
    )
    try:
        md = consumer.list_topics(topic, timeout=timeout)
    except KafkaException as exc:
        raise ServiceUnavailableError(
            f"Kafka at {settings.bootstrap_servers} did not answer ({exc}); start it or fix "
            "--bootstrap-servers"
        ) from exc
    finally:
        consumer.close()
    tmd = md.topics.get(topic)
    if tmd is None or tmd.error is not None or not tmd.partitions:
        raise settings.missing_topic(topic)
    return len(tmd.partitions)


def _reader(settings: Settings, isolation: str) -> Consumer:
    return Consumer(
        settings.kafka_config(
            **{
                "group.id": f"tracevault-heads-reader-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "fetch.wait.max.ms": 10,
                "isolation.level": isolation,
                "auto.offset.reset": "earliest",
                "log_level": 0,
            }
        )
    )


@dataclass(slots=True)
class HeadsState:
    """What a heads partition holds: open runs' heads, and chunks of finished runs.

    ``finished`` maps each chunk's key to (partition, chunk); a later tombstone of the key
    (the horizon passed) removes it (heads/_finished.py). ``where`` is the (partition, offset)
    of each head's record. ``bad`` holds the records that are not what their key says
    (garbage under a run key, the tree key or a finished-chunk key): (partition, key) ->
    why, for as long as no later valid record or tombstone of that key replaced them. They
    are left out of the state instead of failing the read: a reader must not be stopped by a
    record anyone with write access can append; the sequencer rebuilds what they stood for
    from ``sealed`` (heads/_proof.py, docs/design.md "Sequencer rules").
    """

    heads: dict[str, Head] = field(default_factory=dict)
    finished: dict[bytes, tuple[int, FinishedChunk]] = field(default_factory=dict)
    trees: dict[int, CompactTree] = field(default_factory=dict)
    where: dict[str, tuple[int, int]] = field(default_factory=dict)
    bad: dict[tuple[int, bytes], str] = field(default_factory=dict)


def read_heads(
    settings: Settings, partitions: Iterable[int], *, timeout: float = 30.0, stable: bool = False
) -> dict[str, Head]:
    """The latest committed head of every *open* run in ``partitions`` (see read_state)."""
    return read_state(settings, partitions, timeout=timeout, stable=stable).heads


def read_heads_and_trees(
    settings: Settings, partitions: Iterable[int], *, timeout: float = 30.0, stable: bool = False
) -> tuple[dict[str, Head], dict[int, CompactTree]]:
    """Open runs' heads and the sequencer's latest compact tree of each partition's log
    (docs/log.md, "Sequencer"; a partition with none is absent)."""
    state = read_state(settings, partitions, timeout=timeout, stable=stable)
    return state.heads, state.trees


def read_state(
    settings: Settings,
    partitions: Iterable[int],
    *,
    timeout: float = 30.0,
    stable: bool = False,
    keep_heads: bool = True,
) -> HeadsState:
    """Every run's latest committed head in ``partitions`` of ``<prefix>.heads``, the chunks
    of finished runs (docs/fleet.md) and the log's compact trees (docs/log.md).

    Reads each partition from the beginning with ``read_committed``. By default it stops at
    the last stable offset (what is committed now). With ``stable=True`` it also waits until
    no transaction is open on the partition (last stable offset == high watermark): a
    sequencer taking over partitions must not miss the heads of a transaction the previous
    owner is still committing, or it would disagree with the consumer offsets that commit
    carries. Raises :class:`ServiceUnavailableError` when that takes more than ``timeout``.
    """
    parts = sorted(set(partitions))
    state = HeadsState()
    if not parts:
        return state
    topic = settings.topics.heads
    consumer = _reader(settings, "read_committed")
    # A read_uncommitted client's watermark is the real high watermark (a read_committed
    # client is told the last stable offset instead).
    probe = _reader(settings, "read_uncommitted") if stable else consumer
    deadline = time.monotonic() + timeout

    def end_of(p: int) -> tuple[int, int]:
        return watermarks(probe, TopicPartition(topic, p), deadline)

    try:
        ends = {p: end_of(p) for p in parts}
        pending = {p for p, (lo, hi) in ends.items() if hi > lo}
        if pending:
            consumer.assign([TopicPartition(topic, p, 0) for p in sorted(pending)])
        while pending:
            if time.monotonic() > deadline:
                raise ServiceUnavailableError(
                    f"reading {topic} partitions {sorted(pending)} did not reach the end within "
                    f"{timeout:.0f}s; check the broker, or wait for an open transaction of a "
                    "killed sequencer to time out (transaction.timeout.ms) and retry"
                )
            for msg in consumer.consume(500, timeout=0.05):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        if not stable:
                            pending.discard(msg.partition())
                        continue
                    if err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                        raise settings.missing_topic(topic)
                    log.warning("heads read: %s", err)
                    continue
                _take(state, topic, msg, keep_heads)
            if stable:
                for tp in consumer.position([TopicPartition(topic, p) for p in pending]):
                    if tp.offset >= ends[tp.partition][1]:
                        ends[tp.partition] = end_of(tp.partition)
                        if tp.offset >= ends[tp.partition][1]:
                            pending.discard(tp.partition)
    except KafkaException as exc:
        raise ServiceUnavailableError(
            f"Kafka at {settings.bootstrap_servers} failed reading {topic} ({exc})"
        ) from exc
    finally:
        consumer.close()
        if probe is not consumer:
            probe.close()
    return state


def _take(state: HeadsState, topic: str, msg: Any, keep_heads: bool) -> None:
    key = msg.key()
    value = msg.value()
    if key is None:
        return
    part = msg.partition()
    what = f"{topic}[{part}]@{msg.offset()}"
    if key == TREE_KEY and is_tree_record(msg.headers()):
        try:
            state.trees[part] = CompactTree.from_bytes(value or b"")
        except LogError as exc:
            _bad(state, part, key, f"{what} is not the log's compact tree: {exc}")
            state.trees.pop(part, None)
            return
        state.bad.pop((part, key), None)
        return
    if is_finished_key(key):
        state.bad.pop((part, key), None)
        if value is None:
            state.finished.pop(key, None)
            return
        try:
            chunk = FinishedChunk.decode(value, what, keep_heads=keep_heads)
        except SchemaError as exc:
            _bad(state, part, key, str(exc))
            state.finished.pop(key, None)
            return
        state.finished[key] = (part, chunk)
        return
    if key.startswith(b"\x00"):  # another record of the sequencer's own (not a run's head)
        return
    heads = state.heads
    run_id = key.decode("utf-8", "replace")
    state.bad.pop((part, key), None)
    if value is None:  # tombstone: the run's head was deleted
        heads.pop(run_id, None)
        state.where.pop(run_id, None)
        return
    try:
        heads[run_id] = decode_head(value)
    except SchemaError as exc:
        _bad(state, part, key, f"{what} (run {run_id}) is not a HeadState: {exc}")
        heads.pop(run_id, None)
        state.where.pop(run_id, None)
        return
    state.where[run_id] = (part, msg.offset())


def _bad(state: HeadsState, part: int, key: bytes, why: str) -> None:
    state.bad[(part, key)] = why
    log.warning("%s; the heads topic must be written by the sequencer only", why)


def find_head(settings: Settings, run_id: str, *, timeout: float = 10.0) -> Head | None:
    """The run's committed head, open or finished within the horizon; None if unknown.

    Reads the one heads partition the run hashes to. A run finished longer ago than the
    sequencer's horizon has no head any more: read it from the archive.
    """
    n = heads_partition_count(settings, timeout=min(timeout, 10.0))
    state = read_state(settings, [partition_for(run_id, n)], timeout=timeout)
    head = state.heads.get(run_id)
    if head is not None:
        return head
    for _part, chunk in state.finished.values():
        found = chunk.head(run_id)
        if found is not None:
            return found
    return None


def locate_run(settings: Settings, run_id: str, *, timeout: float = 10.0) -> RunLocation | None:
    """Where ``run_id`` is in ``<prefix>.sealed``, from its committed head; None if unknown.

    Reads only the one heads partition the run hashes to (murmur2 over the broker's actual
    partition count), never the sealed topic. A run whose events are all still held behind a
    gap (nothing sealed yet) is reported as None too.
    """
    head = find_head(settings, run_id, timeout=timeout)
    if head is None or head.first_offset < 0:
        return None
    return RunLocation(
        run_id=run_id,
        partition=head.partition,
        start_offset=head.first_offset,
        end_offset=head.last_offset,
        last_seq=head.last_seq,
        finished=head.finished,
        gaps=head.gaps,
    )
