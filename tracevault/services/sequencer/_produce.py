"""What one transaction produces: sealed records, checkpoints and trees, DLQ, heads.

Only the produce calls live here; the transaction around them (begin, flush, offsets,
commit) is ``_transaction``'s. Every call names its partition: leaf i of a partition's
log is the i-th event record produced to it here (one idempotent producer, explicit
partitions: produce order is offset order).
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import Producer

from tracevault.config import TopicNames
from tracevault.heads import FINISHED_KEY_PREFIX, FinishedChunk, Head, encode_head
from tracevault.services.sequencer._log import SignedBatch
from tracevault.services.sequencer._rules import BatchOutput
from tracevault.transparency import (
    CHECKPOINT_KEY,
    RECORD_HEADER,
    RECORD_HEADER_CHECKPOINT,
    RECORD_HEADER_TREE,
    TREE_KEY,
)

__all__ = ["produce_heads", "produce_sealed", "produce_signed"]

_CHUNK_RUNS = 3000  # finished runs per heads chunk: ~150 bytes each, well under 1 MiB
_CHECKPOINT_HEADERS: list[tuple[str, str | bytes | None]] = [
    (RECORD_HEADER, RECORD_HEADER_CHECKPOINT)
]
_TREE_HEADERS: list[tuple[str, str | bytes | None]] = [(RECORD_HEADER, RECORD_HEADER_TREE)]


def produce_sealed(
    producer: Producer,
    topic: str,
    out: BatchOutput,
    values: list[bytes],
    *,
    tracked: set[int],
    on_delivery: Any,
) -> None:
    """The batch's sealed records; only the ``tracked`` ones carry ``on_delivery`` (a failed
    untracked one fails commit_transaction, which aborts the whole batch)."""
    produce = producer.produce
    for i, rec in enumerate(out.sealed):
        run = rec.run
        if i in tracked:
            produce(topic, values[i], run.key, run.partition, on_delivery)
        else:
            produce(topic, values[i], run.key, run.partition)


def produce_signed(
    producer: Producer,
    topics: TopicNames,
    signed: SignedBatch,
    out: BatchOutput,
    *,
    sid: str,
    on_checkpoint: Any,
) -> None:
    """One signature per partition: its checkpoint goes after its records, its compact
    tree to the same heads partition; then the DLQ records. All commit or abort together."""
    produce = producer.produce
    for part, value in signed.records.items():
        produce(
            topics.sealed, value, CHECKPOINT_KEY, part, on_checkpoint, headers=_CHECKPOINT_HEADERS
        )
        produce(topics.heads, signed.trees[part].to_bytes(), TREE_KEY, part, headers=_TREE_HEADERS)
    for d in out.dlq:
        produce(topics.dlq, d.value, d.key, partition=d.source_partition, headers=d.headers(sid))


def produce_heads(
    producer: Producer,
    topic: str,
    out: BatchOutput,
    plain: list[bytes | None],
    *,
    now_us: int,
    sid: str,
) -> list[tuple[bytes, int, int]]:
    """One heads record per touched run (``plain``: its value when the C/plain writer made
    one), the finished-run chunks and the expired runs' tombstones; the chunks written, as
    (key, partition, at)."""
    produce = producer.produce
    finished: dict[int, list[Head]] = {}
    for run, plain_value in zip(out.touched.values(), plain, strict=True):
        if run.finished:
            # A finished run leaves the heads topic: a tombstone for its key (when a head
            # of it was ever committed), its head in the partition's chunk
            # (heads/_finished.py, docs/fleet.md).
            if run.persisted:
                produce(topic, None, run.key, run.partition)
            finished.setdefault(run.partition, []).append(run.to_head(now_us, sid))
            continue
        # gaps or held events: the codec writes the head
        value = encode_head(run.to_head(now_us, sid)) if plain_value is None else plain_value
        produce(topic, value, run.key, run.partition)
    chunks: list[tuple[bytes, int, int]] = []
    for partition, heads in finished.items():
        for n, i in enumerate(range(0, len(heads), _CHUNK_RUNS)):
            key = FINISHED_KEY_PREFIX + f"{now_us}/{sid}/{partition}/{n}".encode()
            value = FinishedChunk.encode(heads[i : i + _CHUNK_RUNS], now_us)
            produce(topic, value, key, partition)
            chunks.append((key, partition, now_us))
    for key, partition in out.expired:
        produce(topic, None, key, partition)
    return chunks
