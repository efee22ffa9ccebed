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

This module is the loop itself: consume, apply the rules (the C path's switch ``_cseal`` is
here), sweep, hand the batch on, and replace a session that cannot go on. Its parts, each a
base class of :class:`Sequencer`: ``_clients`` (the session's clients, calls and fencing),
``_rebalance`` (assignment and restore), ``_transaction`` (step 2 and 3, and the abort path).
"""

from __future__ import annotations

import contextlib
import logging
import re
import socket
import threading
import time
from types import ModuleType
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer

from tracevault import native
from tracevault.config import Settings
from tracevault.consumer._memory import trim_heap
from tracevault.consumer.sequencer._encode import encode_values, head_values
from tracevault.consumer.sequencer._history import SealedHistory
from tracevault.consumer.sequencer._log import PartitionLogs, signer_from_settings
from tracevault.consumer.sequencer._metrics import SequencerMetrics
from tracevault.consumer.sequencer._records import now_micros
from tracevault.consumer.sequencer._rules import MAX_RAW_BYTES, BatchOutput, RunBook, SealOut
from tracevault.consumer.sequencer._transaction import Transactions
from tracevault.errors import ServiceUnavailableError
from tracevault.runtime.liveness import (
    BlockingCalls,
    Broken,
    CallDeadline,
    Health,
    KafkaWatch,
    LagReader,
    Restart,
    Sessions,
    Stopping,
    is_outage,
)
from tracevault.schemas import EventKind
from tracevault.schemas.fast import armed_walks
from tracevault.transparency import ERASE_AGENT, AgentKeys, NoteSigner, operator_verifiers

# the per-event path in C: optional (pyproject.toml), and off under TRACEVAULT_NO_C=1
_cseal: ModuleType | None = native.load("tracevault.consumer.sequencer._cseal")

__all__ = ["Sequencer", "default_instance_id"]

log = logging.getLogger(__name__)

_LOG_EVERY_S = 10.0
_IDLE_EVERY_S = 10.0  # how often open runs are checked for the idle timeout
_LAG_EVERY_S = 1.0  # cheap: positions and cached watermarks, no broker round trip
_REPLACE_CLOSE_S = 10.0  # a consumer still alive after this may rejoin and fence the new one
_GIVE_UP_AFTER = 8  # sessions in a row that fail while a broker answers: exit for a supervisor


def default_instance_id() -> str:
    """The host name, reduced to the characters Kafka ids and our settings accept."""
    return re.sub(r"[^A-Za-z0-9._-]", "-", socket.gethostname()) or "sequencer"


class Sequencer(Transactions):
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
        self._said_waiting = False  # the "Kafka does not answer yet" warning went out
        self._sessions = Sessions(
            f"sequencer {self.instance_id}", self._stop, self.health, _GIVE_UP_AFTER
        )
        self._assigned = False  # an assignment (maybe empty) came in this session
        self._lost = False
        self._session_started = 0.0
        self._lag_reader = LagReader()
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

    def stop(self) -> None:
        self.health.state = "stopping"
        self._stop.set()

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
                        self._before_first_session(exc)
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

    def _before_first_session(self, exc: Exception) -> None:
        """No session got going yet: a broker that does not answer is waited for, however
        long, saying so once (docs/liveness.md); anything else (no topics, a refused
        config, ACLs) is raised for the CLI to name and exit."""
        outage = isinstance(exc, ServiceUnavailableError | CallDeadline) or (
            isinstance(exc, KafkaException) and is_outage(exc.args[0])
        )
        if not outage:
            raise exc
        if not self._said_waiting:
            self._said_waiting = True
            log.warning(
                "sequencer %s: Kafka at %s does not answer yet (%s); waiting for it and "
                "retrying every few seconds: an outage of any length is ridden out (Ctrl-C "
                "or SIGTERM stops the sequencer)",
                self.instance_id,
                self.settings.bootstrap_servers,
                exc,
            )

    def _session(self) -> None:
        s = self.settings
        self._lost = self._assigned = False
        self._session_started = time.monotonic()
        self._lag_reader = LagReader()
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
            facts=self._history.facts,
            agents=_agents(s),
            horizon_us=int(s.sequencer_finished_horizon_s * 1_000_000),
            skew_us=int(s.sequencer_clock_skew_s * 1_000_000),
            idle_close_us=int(s.sequencer_idle_close_s * 1_000_000),
            attest_every=s.agent_attest_every,
            dlq_topic=s.topics.dlq,
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
            self._book.check_coverage(out)
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

    def _encode(
        self, out: BatchOutput, sealed_at: int
    ) -> tuple[list[bytes], dict[int, list[bytes]]]:
        """The batch's sealed values and log leaves (``_encode``; in C when it is built)."""
        return encode_values(out, sealed_at, self.instance_id, _cseal)

    def _head_values(self, runs: list[Any], suffix: bytes) -> list[bytes | None]:
        """The plain heads of ``runs``, None for the others (``_encode``; in C when built)."""
        return head_values(runs, suffix, _cseal)

    def _update_lag(self, consumer: Consumer) -> None:
        try:
            assignment = consumer.assignment()
            # an unconsumed partition's lag counts from its committed offset (LagReader)
            lag = self._lag_reader.partitions(consumer)
            self.metrics.set_lag(lag)
            # no partitions is idle only once the group said so (an empty assignment): a
            # consumer still waiting to join a stuck group is not keeping up
            idle = not assignment and self._assigned
            self.health.set_lag(sum(lag.values()) if lag or idle else None)
        except KafkaException as exc:
            log.debug("lag not updated: %s", exc)


def _agents(s: Settings) -> AgentKeys:
    """The agent vkeys notes are checked against; with any, the operator vkeys may sign the
    erasure records (agent ``tracevault-erase``), so ``erase`` is not contested
    (docs/confidentiality.md, "Erasure records are signed"); without, no signature is checked."""
    agents = AgentKeys.from_setting(s.agent_vkeys)
    operators = operator_verifiers(s.operator_vkeys)
    return agents.merged(AgentKeys({ERASE_AGENT: operators})) if agents and operators else agents
