"""The per-batch write path: one Kafka transaction, and its abort path.

Split from ``_loop`` (which consumes and applies the rules): given a batch's
:class:`BatchOutput`, ``_write`` produces the sealed records, checkpoints, trees and DLQ,
flushes so the heads get their offsets (``_offsets``), produces the heads and commits with the
consumer's positions; ``_transact`` counts a commit or, on any failure, aborts (or recreates
the producer), rewinds the consumer to its committed offsets and restores the book
(docs/design.md, "Sequencer batch protocol"). Work here is per batch; the per-event encoding
is ``_encode``'s, reached through the Sequencer's ``_encode`` and ``_head_values``.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any, NoReturn

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer

from tracevault.consumer.sequencer._offsets import (
    bound_recorder,
    delivery_recorder,
    first_per_partition,
    needs_offset,
    place_from_bounds,
    place_per_record,
)
from tracevault.consumer.sequencer._produce import produce_heads, produce_sealed, produce_signed
from tracevault.consumer.sequencer._rebalance import Rebalance
from tracevault.consumer.sequencer._records import avro_str, now_micros
from tracevault.consumer.sequencer._rules import BatchOutput
from tracevault.runtime.liveness import Health, Restart, Sessions, Stopping
from tracevault.schemas import avro_long

__all__ = ["Transactions"]

# the sequencer logs under one name wherever its code sits (log filters, tests)
log = logging.getLogger("tracevault.consumer.sequencer._loop")

_FLUSH_SLICE_S = 1.0  # one inline flush wait; stop and the session are checked between them


class _AbortBatch(Exception):
    """A delivery inside the transaction failed: abort it and redo the batch."""


class Transactions(Rebalance):
    """One batch's transaction (``_transact``), and recovery when it fails."""

    health: Health
    _sessions: Sessions
    _delivery_error: KafkaError | None
    _chunks: list[tuple[bytes, int, int]]  # finished-run chunks of the batch
    # every tracked record gets its own delivery report (see _write); set for good once
    # another producer's record was found inside one of our transactions
    _per_record: bool

    if TYPE_CHECKING:  # the Sequencer's, beside the C switch (``_loop._cseal``) they read

        def _encode(
            self, out: BatchOutput, sealed_at: int
        ) -> tuple[list[bytes], dict[int, list[bytes]]]: ...

        def _head_values(self, runs: list[Any], suffix: bytes) -> list[bytes | None]: ...

    def _transact(self, consumer: Consumer, out: BatchOutput) -> None:
        try:
            self._write(consumer, out)
        except (KafkaException, _AbortBatch) as exc:
            err = exc.args[0] if isinstance(exc, KafkaException) else self._delivery_error
            self._recover(consumer, err)
            return
        except SystemError as exc:
            # confluent-kafka's flush() can return NULL without an exception when the
            # producer turns fatal (seen on fencing) mid-flush; abort_transaction then
            # reports the real cause, and _recover stops or recovers accordingly.
            log.warning("sequencer %s: producer call failed (%s)", self.instance_id, exc)
            self._recover(consumer, self._delivery_error)
            return
        self._sessions.progressed()
        assert self._book is not None
        for run in out.touched.values():
            run.persisted = True
        if out.finished:
            book = self._book
            ids: dict[int, int] = {}
            for key, partition, at in self._chunks:
                cid = book.finished.new_chunk(key, partition, at)
                ids.setdefault(partition, cid)
            book.retire(out, ids)
        self.health.progressed()
        self.watch.progressed()
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

    def _write(self, consumer: Consumer, out: BatchOutput) -> None:
        """One transaction: the sealed records, checkpoints, trees and DLQ; a flush that
        gives the heads their offsets (``_offsets``); the heads; the consumer's offsets and
        the commit. Any failure leaves none of it (``_transact`` aborts)."""
        producer = self._producer
        assert producer is not None
        topics = self.settings.topics
        sid = self.instance_id
        self._delivery_error = None
        sealed_at = now_micros()  # transport metadata: one sealing time per transaction
        producer.begin_transaction()
        # Only the records whose offsets heads need get a delivery callback (``_offsets``);
        # after another producer's record landed inside a transaction, every tracked record
        # gets its own report (``_per_record``).
        per_record = self._per_record
        delivered: dict[bytes, list[int]] = {}  # run key -> offsets (per_record)
        bounds: dict[int, list[int]] = {}  # partition -> [first event, checkpoint] offsets
        if per_record:
            tracked = needs_offset(out)
            on_delivery = delivery_recorder(self, delivered)
        else:
            tracked = first_per_partition(out)
            on_delivery = bound_recorder(self, bounds, 0)
        values, leaves = self._encode(out, sealed_at)
        produce_sealed(
            producer, topics.sealed, out, values, tracked=tracked, on_delivery=on_delivery
        )
        signed = self.logs.sign(leaves)
        on_checkpoint = None if per_record else bound_recorder(self, bounds, 1)
        produce_signed(producer, topics, signed, out, sid=sid, on_checkpoint=on_checkpoint)
        self._flush(producer)
        if per_record:
            if not place_per_record(out, tracked, delivered):
                self._abort_batch(KafkaError(KafkaError._MSG_TIMED_OUT))
        else:
            self._offsets_from_bounds(out, bounds, {p: len(h) for p, h in leaves.items()})
        now_us = now_micros()
        touched = list(out.touched.values())
        plain = self._head_values(touched, avro_long(now_us) + avro_str(sid))
        self._chunks = produce_heads(producer, topics.heads, out, plain, now_us=now_us, sid=sid)
        self._commit(consumer, producer)
        self.logs.committed(signed)

    def _abort_batch(self, err: KafkaError) -> NoReturn:
        self._delivery_error = err
        raise _AbortBatch(err)

    def _flush(self, producer: Producer) -> None:
        """Every produced record delivered, within the transaction timeout; a delivery
        error aborts the batch."""
        flush_end = time.monotonic() + self._txn_timeout_s
        # Inline, not through BlockingCalls: flush is librdkafka's own poll loop and returns
        # within its timeout; a hand-off per batch cost throughput (docs/liveness.md).
        while producer.flush(_FLUSH_SLICE_S) > 0:
            if time.monotonic() >= flush_end:
                self._delivery_error = KafkaError(KafkaError._MSG_TIMED_OUT)
                break
            if self._stop.is_set():
                raise Stopping("flush still waiting for the broker after stop was asked")
            self._check_session()
        if self._delivery_error is not None:
            raise _AbortBatch(self._delivery_error)

    def _commit(self, consumer: Consumer, producer: Producer) -> None:
        """The consumer's positions into the transaction, and the commit."""
        # The offsets go in after the heads: their coordinator round trips then overlap the
        # heads' deliveries (sent before the flush, they queue behind the sealed records'
        # partition registration and cost more, measured).
        assignment = consumer.assignment()
        positions = [tp for tp in consumer.position(assignment) if tp.offset >= 0]
        if not positions and assignment:
            # Nothing consumed yet (a gap sweep of restored heads): send the committed offsets
            # again, so the group coordinator still checks our generation and fences a zombie.
            positions = [
                tp
                for tp in self._call("committed", lambda t: consumer.committed(assignment, t), 30)
                if tp.offset >= 0
            ]
        if not consumer.memberid():
            # librdkafka drops its member id when a broker outage outlasts the session
            # timeout; offsets sent with that metadata were seen to block for minutes, and the
            # member comes back fenced anyway (docs/liveness.md): start a new session now.
            self.watch.trouble()
            raise Restart("the consumer lost its group session during a broker outage")
        group = consumer.consumer_group_metadata()
        sent = False

        def send_and_commit(t: float) -> None:
            # One hand-off for both (each is a coordinator round trip with its own timeout);
            # a retry after the offsets went in only commits again.
            nonlocal sent
            if not sent:
                producer.send_offsets_to_transaction(positions, group, t)
                sent = True
            producer.commit_transaction(t)

        self._call("commit_transaction", send_and_commit, self._txn_timeout_s, calls=2)
        if self._delivery_error is not None:  # pragma: no cover - commit would have failed
            raise _AbortBatch(self._delivery_error)

    def _offsets_from_bounds(
        self, out: BatchOutput, bounds: dict[int, list[int]], counts: dict[int, int]
    ) -> None:
        """Heads' offsets from each partition's first event and checkpoint offsets, when
        they are exactly its event count apart (nothing else landed between ours)."""
        for part, n in counts.items():
            first, checkpoint = bounds.get(part, (-1, -1))
            if first < 0 or checkpoint < 0:
                self._abort_batch(KafkaError(KafkaError._MSG_TIMED_OUT))
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
                self._per_record = True
                self._abort_batch(
                    KafkaError(KafkaError._STATE, f"a foreign record in sealed partition {part}")
                )
        place_from_bounds(out, {part: bounds[part][0] for part in counts})

    def _recover(self, consumer: Consumer, err: KafkaError | None) -> None:
        """Abort (or recreate the producer), rewind to committed offsets, restore heads."""
        self.metrics.transaction("aborted")
        if err is not None:
            self._raise_if_fenced(err)
        producer = self._producer
        assert producer is not None
        fatal = err is not None and err.fatal()
        log.warning(
            "sequencer %s: transaction failed (%s); %s",
            self.instance_id,
            err,
            "recreating the producer" if fatal else "aborting and rewinding",
        )
        if not fatal:
            try:
                self._call("abort_transaction", producer.abort_transaction, self._txn_timeout_s)
            except KafkaException as exc:
                abort_err = exc.args[0]
                self._raise_if_fenced(abort_err)
                fatal = True
                log.warning("abort_transaction failed (%s); recreating the producer", abort_err)
        if fatal:
            self._producer = None
            self._producer = self._new_producer()
        self._rewind(consumer)

    def _rewind(self, consumer: Consumer) -> None:
        assert self._book is not None
        assignment = consumer.assignment()
        self._book.clear()
        self.logs.clear()
        if not assignment:
            return
        committed = self._call(
            "committed", lambda t: consumer.committed(assignment, t), self._txn_timeout_s
        )
        for tp in committed:
            if tp.offset < 0:
                tp.offset = OFFSET_BEGINNING
            consumer.seek(tp)
        self._restore([tp.partition for tp in assignment])
