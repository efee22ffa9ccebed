"""The sequencer as a step of the service runtime's transactional commit mode.

:class:`ConsumerRuntime` (``tracevault.services.runtime``) owns the Kafka session: the
``read_committed`` consumer with its static membership, the transactional producer, poll,
assignment, revocation and loss, the transaction around each batch (begin, offsets, commit;
abort, rewind and restore on failure), fencing, backoff and stop. This step says what a
batch means and holds its parts as objects:

- the run book (``_rules``: the rules per run, gaps and attestation), applied per consumed
  record, through the C path (``_cseal.c``) for the common case when it is built;
- the partition logs (``_log``: a signed checkpoint per sealed partition per transaction);
- :class:`~tracevault.services.sequencer._transaction.BatchWriter`: what one transaction
  produces (sealed, checkpoints, trees, DLQ, heads with their exact offsets);
- :class:`~tracevault.services.sequencer._rebalance.Restorer`: a partition's runs and trees
  read back from heads (on assignment, and after a rewind);
- :class:`~tracevault.services.sequencer._history.SealedHistory`: a run's sealed hashes read
  back from ``sealed`` for old resends.

A batch: ``take`` applies the rules; ``flush_due`` sweeps gaps and idle runs when due;
``pending`` says whether a transaction is due (records consumed, or output without any);
``write`` fills the transaction; ``committed`` makes it the book's state and ``aborted``
forgets everything since the last commit.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

from confluent_kafka import KafkaError, Message

from tracevault import native
from tracevault.config import Settings
from tracevault.errors import ServiceUnavailableError, TopicMismatchError
from tracevault.kafka import partition_counts
from tracevault.schemas import EventKind
from tracevault.schemas.fast import armed_walks
from tracevault.services.runtime import (
    BlockingCalls,
    Broken,
    KafkaWatch,
    Restart,
    Transaction,
    close_quietly,
    trim_heap,
)
from tracevault.services.sequencer._encode import encode_values, head_values
from tracevault.services.sequencer._history import SealedHistory
from tracevault.services.sequencer._log import PartitionLogs
from tracevault.services.sequencer._metrics import SequencerMetrics
from tracevault.services.sequencer._rebalance import Restorer
from tracevault.services.sequencer._records import now_micros
from tracevault.services.sequencer._rules import MAX_RAW_BYTES, BatchOutput, RunBook, SealOut
from tracevault.services.sequencer._transaction import BatchWriter
from tracevault.transparency import ERASE_AGENT, AgentKeys, operator_verifiers

# the per-event path in C: optional (pyproject.toml), and off under TRACEVAULT_NO_C=1
_cseal: ModuleType | None = native.load("tracevault.services.sequencer._cseal")

__all__ = ["SequencerStep"]

# the sequencer logs under one name wherever its code sits (log filters, tests)
log = logging.getLogger("tracevault.services.sequencer._loop")

_IDLE_EVERY_S = 10.0  # how often open runs are checked for the idle timeout
_HISTORY_AWAY_S = 3.0  # a sealed-history read stops once no broker was up for this long
_CLOSE_S = 3.0


class SequencerStep:
    """Seals what the runtime consumes; the runtime commits it in one transaction."""

    def __init__(
        self,
        settings: Settings,
        *,
        instance_id: str,
        logs: PartitionLogs,
        metrics: SequencerMetrics,
        watch: KafkaWatch,
        calls: BlockingCalls,
        stopping: threading.Event,
        on_error: Callable[[KafkaError], None],
    ) -> None:
        self.settings = settings
        self.instance_id = instance_id
        self.logs = logs
        self.metrics = metrics
        self._watch = watch
        self._calls = calls
        self._stopping = stopping
        self._on_error = on_error  # the runtime's: a fencing or fatal error ends the session
        self.book: RunBook | None = None
        self.partitions = 0
        # its stats feed the watch while a read holds the main thread, so the read stops
        # once the brokers are away instead of waiting out its timeout
        self.history = SealedHistory(
            settings, abort=self._history_abort, client_config=watch.client_config()
        )
        self.native = self._native_context()
        self.writer = BatchWriter(
            settings, instance_id, logs, metrics, encode=self._encode, head_values=self._heads
        )
        self.restorer = Restorer(settings, instance_id, logs, metrics)
        self._out = BatchOutput()
        self._consumed = 0
        self._established = False
        self._said_waiting = False  # the "Kafka does not answer yet" warning went out
        self._sweep_every = min(1.0, settings.sequencer_gap_timeout_s / 4)
        self._next_sweep = self._next_idle = 0.0

    @staticmethod
    def _native_context() -> tuple[object, ...] | None:
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

    # -- a session ---------------------------------------------------------------------------

    def restore(self, timeout: float) -> None:
        """The topics checked (co-partitioned) and a fresh book; the partitions' runs come
        with their assignment (``assigned``)."""
        s = self.settings
        names = s.topics.all()
        try:
            counts = partition_counts(s, list(names), timeout, **self._watch.client_config())
        except ServiceUnavailableError as exc:
            self._waiting(exc)
            raise
        for topic, n in counts.items():
            if n is None:
                raise s.missing_topic(topic)
        if len(set(counts.values())) != 1:
            raise TopicMismatchError(
                f"raw, sealed, heads and dlq must have the same partition count, found {counts}; "
                "recreate them or use a new --prefix"
            )
        self.partitions = counts[s.topics.raw] or 0
        self.book = RunBook(
            raw_topic=s.topics.raw,
            partitions=self.partitions,
            sequencer_id=self.instance_id,
            gap_timeout_us=int(s.sequencer_gap_timeout_s * 1_000_000),
            max_gap=s.sequencer_max_gap,
            history=self.history,
            facts=self.history.facts,
            agents=_agents(s),
            horizon_us=int(s.sequencer_finished_horizon_s * 1_000_000),
            skew_us=int(s.sequencer_clock_skew_s * 1_000_000),
            idle_close_us=int(s.sequencer_idle_close_s * 1_000_000),
            attest_every=s.agent_attest_every,
            dlq_topic=s.topics.dlq,
        )
        self._reset()
        self._established = True

    def _waiting(self, exc: Exception) -> None:
        """No session got going yet: a broker that does not answer is waited for, however
        long, saying so once (docs/liveness.md)."""
        if self._established or self._said_waiting:
            return
        self._said_waiting = True
        log.warning(
            "sequencer %s: Kafka at %s does not answer yet (%s); waiting for it and "
            "retrying every few seconds: an outage of any length is ridden out (Ctrl-C "
            "or SIGTERM stops the sequencer)",
            self.instance_id,
            self.settings.bootstrap_servers,
            exc,
        )

    def assigned(self, partitions: list[int]) -> None:
        assert self.book is not None  # restored before the first poll
        self.metrics.rebalances.inc()
        self.restorer.restore(self.book, partitions, self.partitions)

    def release(self, partitions: set[int] | None) -> None:
        """Revoked or lost partitions dropped (every batch commits before the next poll, so
        no transaction is open); None: the session ended, everything goes, and the next
        session reads history on a fresh consumer too."""
        self._reset()
        if partitions is None:
            self.book = None
            self.logs.clear()
            close_quietly(
                self._calls, f"sequencer {self.instance_id} history close", self.history.close,
                _CLOSE_S,
            )  # fmt: skip
            return
        self.metrics.rebalances.inc()
        if self.book is not None:
            self.book.drop_partitions(partitions)
        self.logs.drop(partitions)

    def _history_abort(self) -> str | None:
        """Why a sealed-history read should stop now (it runs in the main thread), or None."""
        if self._stopping.is_set():
            return "stop was asked"
        down = self._watch.down_since
        if down is not None and time.monotonic() - down > _HISTORY_AWAY_S:
            return f"no Kafka broker reachable for {time.monotonic() - down:.0f}s"
        return None

    # -- a batch -----------------------------------------------------------------------------

    def take(self, batch: list[Message]) -> None:
        with self._outage():
            self._consumed += self.apply_all(batch, self._out, now_micros())

    @contextlib.contextmanager
    def _outage(self) -> Iterator[None]:
        """A sealed-history read the broker did not answer (the rules read a restored run's
        hashes or seq 0) ends the session as an outage: the runtime starts a new one and
        restores, however long the broker is away. Raised on, it stopped the sequencer with
        exit 3 in a broker kill (tests/faults/test_outage_all.py, stop 41's pre-landing CI)."""
        try:
            yield
        except ServiceUnavailableError as exc:
            self._watch.trouble()
            raise Restart(str(exc)) from exc

    def flush_due(self, *, caught_up: bool) -> None:
        with self._outage():
            self._flush_due()

    def _flush_due(self) -> None:
        """Gaps swept and idle runs closed when due, then the coverage check."""
        book = self.book
        assert book is not None
        out = self._out
        mono = time.monotonic()
        if mono >= self._next_sweep or mono >= self._next_idle:
            now_us = now_micros()
            if mono >= self._next_sweep:
                self._next_sweep = mono + self._sweep_every
                book.sweep(out, now_us)
                self.metrics.state(book)
            if mono >= self._next_idle:
                self._next_idle = mono + _IDLE_EVERY_S
                book.close_idle(out, now_us)
        book.check_coverage(out)

    def pending(self) -> bool:
        return self._consumed > 0 or bool(self._out)

    def write(self, txn: Transaction) -> None:
        with self._outage():
            self.writer.write(txn, self._out)

    def committed(self) -> None:
        assert self.book is not None
        self.writer.committed(self.book, self._out)
        self._reset()

    def aborted(self, err: KafkaError | None) -> None:
        """The batch is forgotten; the runtime rewinds and calls ``assigned`` again."""
        self.metrics.transaction("aborted")
        self._reset()
        if self.book is not None:
            self.book.clear()
        self.logs.clear()

    def _reset(self) -> None:
        self._out = BatchOutput()
        self._consumed = 0

    def apply_all(self, msgs: list[Message], out: BatchOutput, now_us: int) -> int:
        """The rules over a consumed batch; how many records it held. The common case of a
        raw event goes through the C path (``_cseal.c``) when it is built; it stops at the
        first message that is not that case, which the Python rules handle, and goes on after
        it. Both leave the same book and output (tests/services/sequencer/test_cseal.py)."""
        book = self.book
        assert book is not None
        ctx_fixed = self.native
        i, n, consumed = 0, len(msgs), 0
        if ctx_fixed is not None:
            assert _cseal is not None  # a context is made only when it is built
            ctx = (book.runs, out.sealed, out.touched, now_us, *ctx_fixed)
            take = _cseal.take
        while i < n:
            if ctx_fixed is not None:
                j = take(msgs, i, ctx)
                consumed += j - i
                if j == n:
                    break
                i = j
            msg = msgs[i]
            i += 1
            err = msg.error()
            if err is not None:
                self._on_error(err)  # a fencing or a fatal error ends the session
                if err.code() == KafkaError._FATAL:
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

    @staticmethod
    def _heads(runs: list[Any], suffix: bytes) -> list[bytes | None]:
        """The plain heads of ``runs``, None for the others (``_encode``; in C when built)."""
        return head_values(runs, suffix, _cseal)

    # -- what the runtime asks besides -------------------------------------------------------

    def committable(self) -> dict[int, int]:
        return {}  # the transaction carries the offsets

    def drain(self) -> None:
        """On stop: every batch committed already; the history reader is closed."""
        close_quietly(
            self._calls, f"sequencer {self.instance_id} history close", self.history.close,
            _CLOSE_S,
        )  # fmt: skip

    def busy(self) -> bool:
        return self.pending()

    def poll_s(self) -> float:
        return self.settings.sequencer_batch_wait_ms / 1000.0

    def lag(self, per_partition: dict[int, int]) -> None:
        self.metrics.set_lag(per_partition)

    def report(self, state: str) -> None:
        if self.book is not None:
            self.metrics.held.set(self.book.held_count)
        trim_heap()  # resident memory follows open runs, not the peak (docs/fleet.md)
        stats = self.metrics.snapshot()
        log.info(
            "sequencer %s stats %s",
            self.instance_id,
            stats,
            extra={"instance_id": self.instance_id, "stats": stats},
        )


def _agents(s: Settings) -> AgentKeys:
    """The agent vkeys notes are checked against; with any, the operator vkeys may sign the
    erasure records (agent ``tracevault-erase``), so ``erase`` is not contested
    (docs/confidentiality.md, "Erasure records are signed"); without, no signature is checked."""
    agents = AgentKeys.from_setting(s.agent_vkeys)
    operators = operator_verifiers(s.operator_vkeys)
    return agents.merged(AgentKeys({ERASE_AGENT: operators})) if agents and operators else agents
