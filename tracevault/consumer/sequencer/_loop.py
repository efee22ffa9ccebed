"""The transactional loop: consume raw, apply the rules, write everything in one transaction.

Per batch (docs/kafka-local.md's exactly-once pattern, with its abort path):

1. ``consume`` up to ``sequencer_batch_size`` raw records (``read_committed``, no auto
   commit); apply the rules (``_rules``) and, when a gap may have timed out, the gap sweep.
2. ``begin_transaction``; produce the sealed records (key = run_id, partition = the raw
   record's partition index); per sealed partition written, one signed checkpoint record
   after its records and its new compact tree to heads (``_log``, docs/log.md "Sequencer");
   the DLQ records; ``flush`` so each sealed record's exact offset is known: from the
   delivery reports of each partition's first event and checkpoint (our records of a
   partition are consecutive; their distance proves it), or, once another producer's record
   was seen inside a transaction, from a report per tracked record (docs/design.md,
   "Sequencer batch protocol").
3. Produce one heads record per touched run (carrying those offsets) to the same partition
   index; ``send_offsets_to_transaction`` with the consumer's positions and group metadata;
   ``commit_transaction``.

Errors, as librdkafka classifies them: retriable → the same call again; ``txn_requires_abort``
→ ``abort_transaction``, then rewind the consumer to the committed offsets and restore the
run book from the heads topic (the book is never half-applied); fatal → a new producer
(``init_transactions`` fences nothing but our own old session), then the same rewind; fenced
(another process took our ``transactional.id`` or ``group.instance.id``) → stop with
:class:`FencedError`. A crash at any instant leaves either the whole batch (sealed,
checkpoints, heads and trees, DLQ and offsets) or none of it.

Liveness (docs/liveness.md): every client call that can hang runs through
:class:`BlockingCalls` with a deadline (``consume`` and ``flush``, librdkafka's own poll
loops, run inline in short slices). A call past its deadline, a fatal consumer error, or a
fencing that follows a broker outage (librdkafka's static member outlives its session and
calls itself fenced) ends the Kafka *session*: both clients are abandoned and a new consumer
and transactional producer start over exactly as a fresh process would
(``init_transactions`` aborts the old open transaction, the assignment restores the heads
and the log's trees). Only a fencing without an outage is another live process with our id:
:class:`FencedError`.

Identity: ``transactional.id = <prefix>.sequencer.<instance_id>`` and the consumer's
``group.instance.id = <instance_id>`` (static membership), so a restarted instance fences its
own zombie and takes its partitions back without waiting for a session timeout. Partition
movements between instances are fenced by the group generation in the offsets commit
(KIP-447). On assignment an instance restores the heads of exactly its new partitions.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import re
import socket
import threading
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any, NoReturn

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from tracevault import native
from tracevault.config import Settings
from tracevault.consumer._memory import trim_heap
from tracevault.consumer.sequencer._encode import encode_values, head_values
from tracevault.consumer.sequencer._history import SealedHistory
from tracevault.consumer.sequencer._log import PartitionLogs, signer_from_settings
from tracevault.consumer.sequencer._metrics import SequencerMetrics
from tracevault.consumer.sequencer._offsets import (
    bound_recorder,
    delivery_recorder,
    first_per_partition,
    needs_offset,
    place_from_bounds,
    place_per_record,
)
from tracevault.consumer.sequencer._produce import produce_heads, produce_sealed, produce_signed
from tracevault.consumer.sequencer._records import avro_str, now_micros
from tracevault.consumer.sequencer._rules import MAX_RAW_BYTES, BatchOutput, RunBook, SealOut
from tracevault.errors import (
    FencedError,
    NotFoundError,
    ServiceUnavailableError,
    TopicMismatchError,
)
from tracevault.heads import prove_state, read_state
from tracevault.log import AgentKeys, NoteSigner
from tracevault.runtime.liveness import (
    BlockingCalls,
    Broken,
    CallDeadline,
    Health,
    KafkaWatch,
    Restart,
    Sessions,
    Stopping,
    backoff,
    close_quietly,
    is_fenced,
    is_outage,
)
from tracevault.schemas import EventKind, avro_long
from tracevault.schemas.fast import armed_walks

# the per-event path in C: optional (pyproject.toml), and off under TRACEVAULT_NO_C=1
_cseal: ModuleType | None = native.load("tracevault.consumer.sequencer._cseal")

__all__ = ["Sequencer", "default_instance_id"]

log = logging.getLogger(__name__)

_LOG_EVERY_S = 10.0
_IDLE_EVERY_S = 10.0  # how often open runs are checked for the idle timeout
_LAG_EVERY_S = 1.0  # cheap: positions and cached watermarks, no broker round trip
_SLICE_S = 5.0  # one librdkafka wait; retriable timeouts are retried up to the call's budget
_FLUSH_SLICE_S = 1.0  # one inline flush wait; stop and the session are checked between them
_HISTORY_AWAY_S = 3.0  # a sealed-history read stops once no broker was up for this long
_SLACK_S = 3.0  # how much longer than its own timeout a call may take before we give up on it
_CLOSE_S = 3.0  # on stop; a session being replaced waits longer (_REPLACE_CLOSE_S)
_REPLACE_CLOSE_S = 10.0  # a consumer still alive after this may rejoin and fence the new one
_GIVE_UP_AFTER = 8  # sessions in a row that fail while a broker answers: exit for a supervisor


def default_instance_id() -> str:
    """The host name, reduced to the characters Kafka ids and our settings accept."""
    return re.sub(r"[^A-Za-z0-9._-]", "-", socket.gethostname()) or "sequencer"


class _AbortBatch(Exception):
    """A delivery inside the transaction failed: abort it and redo the batch."""


class Sequencer:
    """One sequencer instance. ``run()`` blocks until ``stop()`` (or a fatal error).

    Opens no connection until ``run()``; ``stop()`` is safe from a signal handler or another
    thread and lets the current transaction finish first.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        instance_id: str | None = None,
        metrics: SequencerMetrics | None = None,
        signer: NoteSigner | None = None,
    ) -> None:
        self.settings = settings
        # No key, no start: every transaction signs its partitions' checkpoints.
        self.logs = PartitionLogs(settings, signer or signer_from_settings(settings))
        self.instance_id = instance_id or settings.sequencer_instance_id or default_instance_id()
        self.metrics = metrics or SequencerMetrics(self.instance_id)
        self._stop = threading.Event()
        self._producer: Producer | None = None
        self._consumer: Consumer | None = None
        self._book: RunBook | None = None
        self._delivery_error: KafkaError | None = None
        self._chunks: list[tuple[bytes, int, int]] = []  # finished-run chunks of the batch
        self.partitions = 0
        self._calls = BlockingCalls(f"sequencer-{self.instance_id}", self._stop)
        self.watch = KafkaWatch(f"sequencer {self.instance_id}")
        self.health = Health("sequencer", settings.health_stall_s)
        self.health.watch = self.watch
        # its stats feed the watch while a read holds the main thread, so the read stops
        # once the brokers are away instead of waiting out its timeout
        self._history = SealedHistory(
            settings, abort=self._history_abort, client_config=self.watch.client_config()
        )
        self._established = False
        self._sessions = Sessions(
            f"sequencer {self.instance_id}", self._stop, self.health, _GIVE_UP_AFTER
        )
        self._assigned = False  # an assignment (maybe empty) came in this session
        self._lost = False
        self._session_started = 0.0
        self._native = self._native_context()
        # every tracked record gets its own delivery report (see _write); set for good once
        # another producer's record was found inside one of our transactions
        self._per_record = False

    def _native_context(self) -> tuple[object, ...] | None:
        """The fixed part of the C path's context (``_cseal.c``), or None when it is not built
        or the fast walks are off (a newer schema: only the Python rules read it)."""
        walks = armed_walks()
        if _cseal is None or walks is None:
            log.info("sequencer: the per-event path runs in Python (no C path here)")
            return None
        _sealed, trace, kinds = walks
        return (
            SealOut,
            trace,
            len(kinds),
            kinds.index(EventKind.GAP),
            kinds.index(EventKind.RUN_FINISHED),
            MAX_RAW_BYTES,
        )

    @property
    def transactional_id(self) -> str:
        return f"{self.settings.topic_prefix}.sequencer.{self.instance_id}"

    @property
    def group_id(self) -> str:
        return self.settings.sequencer_group_id

    @property
    def _txn_timeout_s(self) -> float:
        return self.settings.sequencer_transaction_timeout_ms / 1000.0

    @property
    def _outage_window_s(self) -> float:
        """How long after an outage a fencing is taken for librdkafka's, not a rival's."""
        return max(60.0, 3 * self.settings.sequencer_session_timeout_ms / 1000.0)

    def stop(self) -> None:
        self.health.state = "stopping"
        self._stop.set()

    def _history_abort(self) -> str | None:
        """Why a sealed-history read should stop now (it runs in the main thread), or None."""
        if self._stop.is_set():
            return "stop was asked"
        down = self.watch.down_since
        if down is not None and time.monotonic() - down > _HISTORY_AWAY_S:
            return f"no Kafka broker reachable for {time.monotonic() - down:.0f}s"
        return None

    def _check_session(self) -> None:
        """A broker outage longer than the session timeout ends this session: its static
        member would come back fenced, and calls with its metadata were seen to block."""
        away = self.watch.outage_since(self._session_started)
        if away * 1000 > self.settings.sequencer_session_timeout_ms:
            raise Restart(f"the brokers were away {away:.0f}s, past the session timeout")

    def _call(
        self, what: str, fn: Callable[[float], Any], budget_s: float, *, calls: int = 1
    ) -> Any:
        """``fn(timeout)`` in slices of at most _SLICE_S while librdkafka says the error is
        retriable, for at most ``budget_s``; each slice's deadline is enforced (``calls``:
        how many librdkafka calls ``fn`` makes, each with that timeout)."""
        end = time.monotonic() + budget_s
        attempt = 0
        while True:
            t = max(0.5, min(_SLICE_S, end - time.monotonic()))
            try:
                return self._calls.call(what, functools.partial(fn, t), calls * t + _SLACK_S)
            except CallDeadline:
                self.watch.trouble()
                raise
            except KafkaException as exc:
                err = exc.args[0]
                if not err.retriable() or time.monotonic() >= end:
                    raise
                log.info("sequencer %s: %s: %s; retrying", self.instance_id, what, err)
                self._check_session()
            if self._stop.wait(min(backoff(attempt, base=0.1, cap=1.0), _SLICE_S)):
                raise Stopping(f"{what} still failing after stop was asked")
            attempt += 1

    # -- clients -----------------------------------------------------------------------------

    def _new_producer(self) -> Producer:
        s = self.settings
        producer = Producer(
            s.kafka_config(
                **{
                    "transactional.id": self.transactional_id,
                    "enable.idempotence": True,
                    "transaction.timeout.ms": s.sequencer_transaction_timeout_ms,
                    "partitioner": "murmur2_random",
                    "linger.ms": 2,
                    "queue.buffering.max.messages": max(100_000, 4 * s.sequencer_batch_size),
                    "log_level": 3,
                    **self.watch.client_config(),
                }
            )
        )
        try:
            self._call("init_transactions", producer.init_transactions, self._txn_timeout_s + 30)
            return producer
        except KafkaException as exc:
            err = exc.args[0]
            self._raise_if_fenced(err)
            if self._established:
                why = f"init_transactions failed ({err})"
                raise (Restart(why) if is_outage(err) else Broken(why)) from exc
            raise ServiceUnavailableError(
                f"init_transactions for {self.transactional_id} failed ({err}); check the "
                "broker's transaction state log settings (replication factor 1 on one node)"
            ) from exc

    def _new_consumer(self) -> Consumer:
        s = self.settings
        return Consumer(
            s.kafka_config(
                **{
                    "group.id": self.group_id,
                    "group.instance.id": self.instance_id,
                    "enable.auto.commit": False,
                    "enable.auto.offset.store": False,
                    "isolation.level": "read_committed",
                    "auto.offset.reset": "earliest",
                    "session.timeout.ms": s.sequencer_session_timeout_ms,
                    "log_level": 3,
                    **self.watch.client_config(),
                }
            )
        )

    def _check_topics(self, consumer: Consumer) -> int:
        names = self.settings.topics
        try:
            md = self._calls.call("list_topics", lambda: consumer.list_topics(timeout=15), 20)
        except (KafkaException, CallDeadline) as exc:
            raise ServiceUnavailableError(
                f"Kafka at {self.settings.bootstrap_servers} did not answer ({exc})"
            ) from exc
        counts: dict[str, int] = {}
        for topic in names.all():
            t = md.topics.get(topic)
            if t is None or t.error is not None:
                raise NotFoundError(
                    f"topic {topic} does not exist; create the topics with "
                    "`tracevault topics create`"
                )
            counts[topic] = len(t.partitions)
        if len(set(counts.values())) != 1:
            raise TopicMismatchError(
                f"raw, sealed, heads and dlq must have the same partition count, found {counts}; "
                "recreate them or use a new --prefix"
            )
        return counts[names.raw]

    def _raise_if_fenced(self, err: KafkaError) -> None:
        if not is_fenced(err):
            return
        if self.watch.excuse_fencing(self._outage_window_s):
            # After an outage longer than the session timeout librdkafka's static member
            # calls itself fenced although no one else has our id (docs/liveness.md).
            raise Restart(f"fenced after a broker outage ({err.str()})")
        raise FencedError(
            f"sequencer {self.instance_id} was fenced ({err.str()}): another process runs "
            f"with transactional.id {self.transactional_id} or group.instance.id "
            f"{self.instance_id}; this one stopped. Give each instance its own "
            "--instance-id"
        )

    # -- rebalance ---------------------------------------------------------------------------

    def _restore(self, partitions: list[int]) -> None:
        """The book and trees of ``partitions`` from the heads topic, each piece proven
        against ``sealed`` first (heads/_proof.py); what fails is an ALERT, counted, and
        rebuilt from ``sealed`` (docs/design.md, "Sequencer rules")."""
        assert self._book is not None
        s = self.settings
        state = read_state(
            s,
            partitions,
            timeout=self._txn_timeout_s + 30,
            stable=True,
            keep_heads=False,  # the columns are all a restore needs (docs/fleet.md)
        )
        verifier = getattr(self.logs.signer, "verifier", None)
        proven = prove_state(
            s,
            state,
            partitions,
            partition_count=self.partitions,
            verifiers=[verifier] if verifier is not None else [],
            horizon_us=int((s.sequencer_finished_horizon_s + s.sequencer_clock_skew_s) * 1e6),
            now_us=now_micros(),
            timeout=self._txn_timeout_s + 30,
        )
        for bad in proven.rejected:
            self.metrics.rejected(bad.what)
            log.error(
                "ALERT sequencer %s: restored %s state of partition %d did not prove itself "
                "(%s); rebuilt from %s. Only the sequencer may write %s: apply `tracevault "
                "topics acls`",
                self.instance_id,
                bad.what,
                bad.partition,
                bad.why,
                s.topics.sealed,
                s.topics.heads,
            )
        self._book.restore_finished((k, p, c) for k, (p, c) in state.finished.items())
        self._book.restore(proven.heads, rewrite=proven.rebuilt, forget=proven.forget)
        self.logs.restore(partitions, proven.trees)
        n_open = len(proven.heads)
        del state, proven
        trim_heap()
        log.info(
            "sequencer %s restored %d open run heads and %d finished runs for partitions %s "
            "(log sizes %s)",
            self.instance_id,
            n_open,
            len(self._book.finished),
            partitions,
            {p: self.logs.trees[p].size for p in partitions},
        )

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if consumer is not self._consumer:
            return  # a dropped session's consumer, closing late: its book is gone
        self._assigned = True
        self.metrics.rebalances.inc()
        self._restore([tp.partition for tp in partitions])

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # Every batch commits before the next poll, so no transaction is open here.
        if consumer is not self._consumer:
            return
        self.metrics.rebalances.inc()
        assert self._book is not None
        self._book.drop_partitions(tp.partition for tp in partitions)
        self.logs.drop(tp.partition for tp in partitions)
        log.info("sequencer %s revoked %s", self.instance_id, [tp.partition for tp in partitions])

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if consumer is not self._consumer:
            return
        self.metrics.rebalances.inc()
        assert self._book is not None
        self._book.drop_partitions(tp.partition for tp in partitions)
        self.logs.drop(tp.partition for tp in partitions)
        log.warning("sequencer %s lost %s", self.instance_id, [tp.partition for tp in partitions])
        # The group session expired (a broker outage): this static member would come back
        # fenced, and a transaction with its metadata was seen to block; start afresh.
        self._lost = True
        self.watch.trouble()

    # -- the loop ----------------------------------------------------------------------------

    def run(self) -> None:
        """Sessions until ``stop()``: a session that cannot go on is replaced by a new one."""
        try:
            while not self._stop.is_set():
                try:
                    self._session()
                    return
                except Stopping as exc:
                    log.warning(
                        "sequencer %s: stopped during a Kafka call (%s); its open transaction "
                        "is aborted by the next start or by transaction.timeout.ms",
                        self.instance_id,
                        exc,
                    )
                    return
                except (Restart, CallDeadline, KafkaException, ServiceUnavailableError) as exc:
                    if isinstance(exc, KafkaException):
                        with contextlib.suppress(Restart):  # FencedError: a rival, stop
                            self._raise_if_fenced(exc.args[0])
                    if not self._established:
                        if isinstance(exc, CallDeadline):
                            raise ServiceUnavailableError(
                                f"Kafka at {self.settings.bootstrap_servers} did not answer ({exc})"
                            ) from exc
                        raise
                    if isinstance(exc, ServiceUnavailableError | CallDeadline):
                        self.watch.trouble()  # "did not answer": an outage, however long
                    broken = isinstance(exc, Broken) or (
                        isinstance(exc, KafkaException) and not is_outage(exc.args[0])
                    )
                    wait = self._sessions.ended(exc, broken=broken)
                    self._drop_clients(_REPLACE_CLOSE_S)
                    if self._stop.wait(wait):
                        return
        finally:
            self._close()

    def _session(self) -> None:
        s = self.settings
        self._lost = self._assigned = False
        self._session_started = time.monotonic()
        consumer = self._consumer = self._new_consumer()
        self.partitions = self._check_topics(consumer)
        self._producer = self._new_producer()
        self._book = RunBook(
            raw_topic=s.topics.raw,
            partitions=self.partitions,
            sequencer_id=self.instance_id,
            gap_timeout_us=int(s.sequencer_gap_timeout_s * 1_000_000),
            max_gap=s.sequencer_max_gap,
            history=self._history,
            agents=AgentKeys.from_setting(s.agent_vkeys),
            horizon_us=int(s.sequencer_finished_horizon_s * 1_000_000),
            skew_us=int(s.sequencer_clock_skew_s * 1_000_000),
            idle_close_us=int(s.sequencer_idle_close_s * 1_000_000),
        )
        consumer.subscribe(
            [s.topics.raw],
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_lost,
        )
        self._established = True
        self.health.state = "running"
        log.info(
            "sequencer %s started (group %s, transactional.id %s)",
            self.instance_id,
            self.group_id,
            self.transactional_id,
        )
        self._loop(consumer)

    def _loop(self, consumer: Consumer) -> None:
        s = self.settings
        assert self._book is not None
        wait = s.sequencer_batch_wait_ms / 1000.0
        sweep_every = min(1.0, s.sequencer_gap_timeout_s / 4)
        next_sweep = next_log = next_lag = next_idle = 0.0
        while not self._stop.is_set():
            try:
                msgs = consumer.consume(s.sequencer_batch_size, timeout=wait)
                if self._lost:
                    raise Restart("the consumer lost its partitions (group session expired)")
                self._check_session()
            except KafkaException as exc:
                self._raise_if_fenced(exc.args[0])
                if exc.args[0].fatal():
                    raise Broken(f"the raw consumer failed ({exc.args[0].str()})") from exc
                raise
            now_us = now_micros()
            out = BatchOutput()
            consumed = self._apply_all(msgs, out, now_us)
            mono = time.monotonic()
            if mono >= next_sweep:
                next_sweep = mono + sweep_every
                self._book.sweep(out, now_us)
                self.metrics.state(self._book)
            if mono >= next_idle:
                next_idle = mono + _IDLE_EVERY_S
                self._book.close_idle(out, now_us)
            if consumed or out:
                self._transact(consumer, out)
            if mono >= next_lag:
                next_lag = mono + _LAG_EVERY_S
                self._update_lag(consumer)
            if mono >= next_log:
                next_log = mono + _LOG_EVERY_S
                self.metrics.held.set(self._book.held_count)
                trim_heap()  # resident memory follows open runs, not the peak (docs/fleet.md)
                stats = self.metrics.snapshot()
                log.info(
                    "sequencer %s stats %s",
                    self.instance_id,
                    stats,
                    extra={"instance_id": self.instance_id, "stats": stats},
                )

    def _apply_all(self, msgs: list[Message], out: BatchOutput, now_us: int) -> int:
        """The rules over a consumed batch; how many records it held. The common case of a
        raw event goes through the C path (``_cseal.c``) when it is built; it stops at the
        first message that is not that case, which the Python rules handle, and goes on after
        it. Both leave the same book and output (tests/consumer/sequencer/test_cseal.py)."""
        book = self._book
        assert book is not None
        native = self._native
        i, n, consumed = 0, len(msgs), 0
        if native is not None:
            assert _cseal is not None  # a context is made only when it is built
            ctx = (book.runs, out.sealed, out.touched, now_us, *native)
            take = _cseal.take
        while i < n:
            if native is not None:
                j = take(msgs, i, ctx)
                consumed += j - i
                if j == n:
                    break
                i = j
            msg = msgs[i]
            i += 1
            err = msg.error()
            if err is not None:
                self._raise_if_fenced(err)
                if err.fatal() or err.code() == KafkaError._FATAL:
                    # exactly-once holds: nothing of this batch is committed
                    raise Broken(f"the raw consumer failed fatally ({err.str()})")
                log.warning("consumer: %s", err)
                continue
            consumed += 1
            # a consumed record always has its partition and offset
            book.apply(out, msg.key(), msg.value(), msg.partition(), msg.offset(), now_us)  # type: ignore[arg-type]
        return consumed

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

    def _encode(
        self, out: BatchOutput, sealed_at: int
    ) -> tuple[list[bytes], dict[int, list[bytes]]]:
        """The batch's sealed values and log leaves (``_encode``; in C when it is built)."""
        return encode_values(out, sealed_at, self.instance_id, _cseal)

    def _head_values(self, runs: list[Any], suffix: bytes) -> list[bytes | None]:
        """The plain heads of ``runs``, None for the others (``_encode``; in C when built)."""
        return head_values(runs, suffix, _cseal)

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

    def _update_lag(self, consumer: Consumer) -> None:
        try:
            assignment = consumer.assignment()
            lag: dict[int, int] = {}
            for tp in consumer.position(assignment):
                # cached: the high watermark of the last fetch response, no broker round trip
                _, hi = consumer.get_watermark_offsets(tp, cached=True)
                if hi < 0:
                    continue  # nothing fetched yet: unknown, not zero
                pos = max(tp.offset, 0)
                lag[tp.partition] = max(0, hi - pos)
            self.metrics.set_lag(lag)
            # no partitions is idle only once the group said so (an empty assignment): a
            # consumer still waiting to join a stuck group is not keeping up
            idle = not assignment and self._assigned
            self.health.set_lag(sum(lag.values()) if lag or idle else None)
        except KafkaException as exc:
            log.debug("lag not updated: %s", exc)

    def _drop_clients(self, close_s: float = _CLOSE_S) -> None:
        """Close the consumer within _CLOSE_S or abandon it; drop the producer (a new
        ``init_transactions`` with our id fences it and aborts its open transaction)."""
        consumer, self._consumer, self._producer = self._consumer, None, None
        name = f"sequencer {self.instance_id}"
        if consumer is not None:
            close_quietly(self._calls, f"{name} consumer close", consumer.close, close_s)
        # the next session reads history on a fresh consumer too
        close_quietly(self._calls, f"{name} history close", self._history.close, _CLOSE_S)

    def _close(self) -> None:
        self._drop_clients()
        self._calls.close()
        log.info("sequencer %s stopped", self.instance_id)
