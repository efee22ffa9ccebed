"""The per-batch write path: what one Kafka transaction of the sequencer holds.

A part of the sequencer's step (``_step``): given a batch's :class:`BatchOutput`,
:meth:`BatchWriter.write` produces the sealed records, checkpoints, trees and DLQ into the
runtime's open transaction, flushes so the heads get their offsets (``_offsets``) and
produces the heads; the runtime then sends the consumer's positions and commits
(``tracevault.services.runtime``, its transactional commit mode), or aborts, rewinds and
has the step restore its partitions (docs/design.md, "Sequencer batch protocol").
:meth:`BatchWriter.committed` makes a committed batch the book's state. Work here is per
batch; the per-event encoding is ``_encode``'s.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaError

from tracevault.config import Settings
from tracevault.schemas import avro_long
from tracevault.services.runtime import Transaction
from tracevault.services.sequencer._log import PartitionLogs, SignedBatch
from tracevault.services.sequencer._metrics import SequencerMetrics
from tracevault.services.sequencer._offsets import (
    bound_recorder,
    delivery_recorder,
    first_per_partition,
    needs_offset,
    place_from_bounds,
    place_per_record,
)
from tracevault.services.sequencer._produce import produce_heads, produce_sealed, produce_signed
from tracevault.services.sequencer._records import avro_str, now_micros
from tracevault.services.sequencer._rules import BatchOutput, RunBook

__all__ = ["BatchWriter"]

# the sequencer logs under one name wherever its code sits (log filters, tests)
log = logging.getLogger("tracevault.services.sequencer._loop")

Encoder = Callable[[BatchOutput, int], tuple[list[bytes], dict[int, list[bytes]]]]
HeadEncoder = Callable[[list[Any], bytes], list[bytes | None]]


class BatchWriter:
    """One batch's records into a transaction, and the book's state once it committed."""

    def __init__(
        self,
        settings: Settings,
        instance_id: str,
        logs: PartitionLogs,
        metrics: SequencerMetrics,
        *,
        encode: Encoder,
        head_values: HeadEncoder,
    ) -> None:
        self.settings = settings
        self.instance_id = instance_id
        self.logs = logs
        self.metrics = metrics
        self._encode = encode
        self._head_values = head_values
        self._chunks: list[tuple[bytes, int, int]] = []  # finished-run chunks of the batch
        self._signed: SignedBatch | None = None
        # every tracked record gets its own delivery report (see write); set for good once
        # another producer's record was found inside one of our transactions
        self.per_record = False

    def write(self, txn: Transaction, out: BatchOutput) -> None:
        """The sealed records, checkpoints, trees and DLQ; a flush that gives the heads
        their offsets (``_offsets``); the heads. Any failure leaves none of it (the runtime
        aborts)."""
        producer = txn.producer
        topics = self.settings.topics
        sid = self.instance_id
        self._signed = None
        sealed_at = now_micros()  # transport metadata: one sealing time per transaction
        # Only the records whose offsets heads need get a delivery callback (``_offsets``);
        # after another producer's record landed inside a transaction, every tracked record
        # gets its own report (``per_record``).
        per_record = self.per_record
        delivered: dict[bytes, list[int]] = {}  # run key -> offsets (per_record)
        bounds: dict[int, list[int]] = {}  # partition -> [first event, checkpoint] offsets
        if per_record:
            tracked = needs_offset(out)
            on_delivery = delivery_recorder(txn, delivered)
        else:
            tracked = first_per_partition(out)
            on_delivery = bound_recorder(txn, bounds, 0)
        values, leaves = self._encode(out, sealed_at)
        produce_sealed(
            producer, topics.sealed, out, values, tracked=tracked, on_delivery=on_delivery
        )
        signed = self.logs.sign(leaves)
        on_checkpoint = None if per_record else bound_recorder(txn, bounds, 1)
        produce_signed(producer, topics, signed, out, sid=sid, on_checkpoint=on_checkpoint)
        txn.flush()
        if per_record:
            if not place_per_record(out, tracked, delivered):
                txn.abort(KafkaError(KafkaError._MSG_TIMED_OUT))
        else:
            self._offsets_from_bounds(txn, out, bounds, {p: len(h) for p, h in leaves.items()})
        now_us = now_micros()
        touched = list(out.touched.values())
        plain = self._head_values(touched, avro_long(now_us) + avro_str(sid))
        self._chunks = produce_heads(producer, topics.heads, out, plain, now_us=now_us, sid=sid)
        self._signed = signed

    def committed(self, book: RunBook, out: BatchOutput) -> None:
        """The batch committed: its runs are persisted, finished ones retired, trees
        advanced and the counters counted."""
        if self._signed is not None:
            self.logs.committed(self._signed)
            self._signed = None
        for run in out.touched.values():
            run.persisted = True
        if out.finished:
            ids: dict[int, int] = {}
            for key, partition, at in self._chunks:
                cid = book.finished.new_chunk(key, partition, at)
                ids.setdefault(partition, cid)
            book.retire(out, ids)
        m = self.metrics
        m.transaction("committed")
        m.sealed.inc(len(out.sealed))
        m.sealed_latency(out.sealed, now_micros())
        m.duplicates.inc(out.duplicates)
        m.gap_markers.inc(out.gap_markers)
        m.closed_idle.inc(out.closed_idle)
        m.contested.inc(out.contested)
        for rec in out.dlq:
            m.dlq(rec.reason)

    def _offsets_from_bounds(
        self,
        txn: Transaction,
        out: BatchOutput,
        bounds: dict[int, list[int]],
        counts: dict[int, int],
    ) -> None:
        """Heads' offsets from each partition's first event and checkpoint offsets, when
        they are exactly its event count apart (nothing else landed between ours)."""
        for part, n in counts.items():
            first, checkpoint = bounds.get(part, (-1, -1))
            if first < 0 or checkpoint < 0:
                txn.abort(KafkaError(KafkaError._MSG_TIMED_OUT))
            if checkpoint - first != n:
                log.warning(
                    "sequencer %s: %s[%d] holds %d records between this transaction's first "
                    "event (offset %d) and its checkpoint (offset %d), not %d: another "
                    "producer wrote to it (check its ACLs, `tracevault topics acls`); the "
                    "batch is retried with a delivery report per record",
                    self.instance_id,
                    self.settings.topics.sealed,
                    part,
                    checkpoint - first - 1,
                    first,
                    checkpoint,
                    n - 1,
                )
                self.per_record = True
                txn.abort(
                    KafkaError(KafkaError._STATE, f"a foreign record in sealed partition {part}")
                )
        place_from_bounds(out, {part: bounds[part][0] for part in counts})
