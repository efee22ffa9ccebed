"""Run heads: the sequencer's per-run state, and how anyone finds a run without a scan.

The sequencer keeps one :class:`Head` per run in the compacted ``<prefix>.heads`` topic
(key = run_id, value = Avro single-object ``HeadState.v1``, written in the same Kafka
transaction as the sealed records it describes). Heads are co-partitioned with raw and
sealed: a run's head lives at ``partition_for(run_id, partitions)`` of every one of them.

Finding a run (the replayer's entry point)::

    loc = locate_run(settings, "run-42")
    # loc.partition, loc.start_offset: seek <prefix>.sealed there and read records keyed
    # "run-42" until seq == loc.last_seq (or offset == loc.end_offset).

``first_offset`` is **exact**: the sequencer learns the sealed offsets from the delivery
reports inside the transaction, before it writes the head in that same transaction, so a
committed head never points at an aborted record. ``start_offset`` of a :class:`RunLocation`
is that offset of seq 0 (records of other runs sharing the partition are interleaved after it;
filter by key).

Why Avro: heads are read by other components (replayer, operators' tools) and outlive
releases; a published, fingerprinted schema gives them the same evolution rules as events.
The record also carries events held behind a gap (``held``) so a crash loses none of them.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from tracevault.chain import genesis
from tracevault.config import Settings
from tracevault.errors import NotFoundError, SchemaError, ServiceUnavailableError
from tracevault.kafka import partition_for
from tracevault.schemas import MAGIC, Codec, avro_long

__all__ = [
    "GapRange",
    "Head",
    "HeldEvent",
    "RunLocation",
    "decode_head",
    "encode_head",
    "heads_partition_count",
    "locate_run",
    "read_heads",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class GapRange:
    """An inclusive seq range sealed as GAP markers (one GAP event per missing seq)."""

    missing_from: int
    missing_to: int

    def __contains__(self, seq: object) -> bool:
        return isinstance(seq, int) and self.missing_from <= seq <= self.missing_to


@dataclass(frozen=True, slots=True)
class HeldEvent:
    """A raw event that arrived past a gap, waiting for the gap to fill or to time out."""

    seq: int
    raw: bytes
    source_partition: int
    source_offset: int
    held_at: int  # micros since the epoch; the gap timeout counts from the oldest


@dataclass(frozen=True, slots=True)
class Head:
    """The chain head of one run after the last committed sequencer transaction.

    Every seq below ``next_seq`` is sealed, exactly once, at offsets ``first_offset`` (seq 0)
    .. ``last_offset`` (seq ``next_seq - 1``) of ``<prefix>.sealed`` partition ``partition``;
    ``last_hash`` is the hash of seq ``next_seq - 1`` (the genesis before seq 0 is sealed).
    """

    run_id: str
    next_seq: int
    last_hash: bytes
    finished: bool
    partition: int
    first_offset: int = -1
    last_offset: int = -1
    gaps: tuple[GapRange, ...] = ()
    held: tuple[HeldEvent, ...] = ()
    updated_at: int = 0
    sequencer_id: str = ""

    @classmethod
    def new(cls, run_id: str, partition: int) -> Head:
        """The head of a run nothing of which is sealed yet."""
        return cls(run_id, 0, genesis(run_id), False, partition)

    @property
    def last_seq(self) -> int:
        """The last sealed seq, -1 when nothing is sealed."""
        return self.next_seq - 1

    def in_gap(self, seq: int) -> bool:
        return any(seq in g for g in self.gaps)


_CODEC: Codec | None = None


def _codec() -> Codec:
    global _CODEC  # noqa: PLW0603 - built on first use, not at import
    if _CODEC is None:
        _CODEC = Codec("HeadState")
    return _CODEC


_V1_HEADER: bytes | None = None


def head_v1_header() -> bytes | None:
    """``C3 01`` + fingerprint when HeadState v1 is the current version (else None)."""
    global _V1_HEADER  # noqa: PLW0603 - computed on first use, not at import
    if _V1_HEADER is None:
        current = _codec().reader
        _V1_HEADER = MAGIC + current.fingerprint if current.version == 1 else b""
    return _V1_HEADER or None


def plain_head_value(  # noqa: PLR0917 - positional: called once per event
    prefix: bytes,
    next_seq: int,
    last_hash: bytes,
    finished: bool,
    partition: int,
    first_offset: int,
    last_offset: int,
    suffix: bytes,
) -> bytes:
    """HeadState v1 of a head with no gaps and nothing held, from pre-encoded pieces.

    ``prefix`` is :func:`head_v1_header` + the Avro string ``run_id``; ``suffix`` is the Avro
    long ``updated_at`` + the Avro string ``sequencer_id``; ``last_hash`` is 32 bytes. The
    sequencer keeps both per run and per transaction; :func:`encode_head` goes through here
    too, so its byte-for-byte test against the codec covers this layout.
    """
    return b"".join(
        (
            prefix,
            avro_long(next_seq),
            last_hash,
            b"\x01" if finished else b"\x00",
            avro_long(partition),
            avro_long(first_offset),
            avro_long(last_offset),
            b"\x00\x00",  # gaps, held: empty arrays
            suffix,
        )
    )


def encode_head(head: Head) -> bytes:
    """Single-object Avro (``HeadState.v1``) of ``head``: the value written to ``heads``.

    The sequencer writes one head per touched run per transaction, so the common shape (no
    gaps, nothing held) is written directly in v1's field order; a test pins it byte for
    byte to the codec, which writes every other shape.
    """
    header = head_v1_header()
    if head.gaps or head.held or header is None or len(head.last_hash) != 32:
        return _encode_head_avro(head)
    rid = head.run_id.encode("utf-8")
    sid = head.sequencer_id.encode("utf-8")
    return plain_head_value(
        header + avro_long(len(rid)) + rid,
        head.next_seq,
        head.last_hash,
        head.finished,
        head.partition,
        head.first_offset,
        head.last_offset,
        avro_long(head.updated_at) + avro_long(len(sid)) + sid,
    )


def _encode_head_avro(head: Head) -> bytes:
    rec: dict[str, Any] = {
        "run_id": head.run_id,
        "next_seq": head.next_seq,
        "last_hash": head.last_hash,
        "finished": head.finished,
        "partition": head.partition,
        "first_offset": head.first_offset,
        "last_offset": head.last_offset,
        "gaps": [{"missing_from": g.missing_from, "missing_to": g.missing_to} for g in head.gaps],
        "held": [
            {
                "seq": h.seq,
                "raw": h.raw,
                "source_partition": h.source_partition,
                "source_offset": h.source_offset,
                "held_at": h.held_at,
            }
            for h in head.held
        ],
        "updated_at": head.updated_at,
        "sequencer_id": head.sequencer_id,
    }
    return _codec().encode(rec)


def decode_head(data: bytes) -> Head:
    """Read a heads value; raises :class:`SchemaError` for bytes that are not a HeadState."""
    rec: Mapping[str, Any] = _codec().decode(data, what="heads value")
    return Head(
        run_id=rec["run_id"],
        next_seq=rec["next_seq"],
        last_hash=bytes(rec["last_hash"]),
        finished=rec["finished"],
        partition=rec["partition"],
        first_offset=rec["first_offset"],
        last_offset=rec["last_offset"],
        gaps=tuple(GapRange(g["missing_from"], g["missing_to"]) for g in rec["gaps"]),
        held=tuple(
            HeldEvent(
                h["seq"], bytes(h["raw"]), h["source_partition"], h["source_offset"], h["held_at"]
            )
            for h in rec["held"]
        ),
        updated_at=rec["updated_at"],
        sequencer_id=rec["sequencer_id"],
    )


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
        raise NotFoundError(
            f"topic {topic} does not exist; create the topics with `tracevault topics create`"
        )
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


def read_heads(
    settings: Settings, partitions: Iterable[int], *, timeout: float = 30.0, stable: bool = False
) -> dict[str, Head]:
    """Every run's latest committed head in ``partitions`` of ``<prefix>.heads``.

    Reads each partition from the beginning with ``read_committed``. By default it stops at
    the last stable offset (what is committed now). With ``stable=True`` it also waits until
    no transaction is open on the partition (last stable offset == high watermark): a
    sequencer taking over partitions must not miss the heads of a transaction the previous
    owner is still committing, or it would disagree with the consumer offsets that commit
    carries. Raises :class:`ServiceUnavailableError` when that takes more than ``timeout``.
    """
    parts = sorted(set(partitions))
    heads: dict[str, Head] = {}
    if not parts:
        return heads
    topic = settings.topics.heads
    consumer = _reader(settings, "read_committed")
    # A read_uncommitted client's watermark is the real high watermark (a read_committed
    # client is told the last stable offset instead).
    probe = _reader(settings, "read_uncommitted") if stable else consumer
    deadline = time.monotonic() + timeout

    def end_of(p: int) -> tuple[int, int]:
        lo, hi = probe.get_watermark_offsets(
            TopicPartition(topic, p), timeout=max(0.1, deadline - time.monotonic())
        )
        return int(lo), int(hi)

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
                        raise NotFoundError(
                            f"topic {topic} does not exist; create the topics with "
                            "`tracevault topics create`"
                        )
                    log.warning("heads read: %s", err)
                    continue
                _take(heads, topic, msg)
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
    return heads


def _take(heads: dict[str, Head], topic: str, msg: Any) -> None:
    key = msg.key()
    value = msg.value()
    if key is None:
        return
    run_id = key.decode("utf-8", "replace")
    if value is None:  # tombstone: the run's head was deleted
        heads.pop(run_id, None)
        return
    try:
        heads[run_id] = decode_head(value)
    except SchemaError as exc:
        raise SchemaError(
            f"{topic}[{msg.partition()}]@{msg.offset()} (run {run_id}) is not a HeadState: "
            f"{exc}; the heads topic must be written by the sequencer only"
        ) from exc


def locate_run(settings: Settings, run_id: str, *, timeout: float = 10.0) -> RunLocation | None:
    """Where ``run_id`` is in ``<prefix>.sealed``, from its committed head; None if unknown.

    Reads only the one heads partition the run hashes to (murmur2 over the broker's actual
    partition count), never the sealed topic. A run whose events are all still held behind a
    gap (nothing sealed yet) is reported as None too.
    """
    n = heads_partition_count(settings, timeout=timeout)
    part = partition_for(run_id, n)
    head = read_heads(settings, [part], timeout=timeout).get(run_id)
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
