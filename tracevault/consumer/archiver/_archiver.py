"""The archiver: ``<prefix>.sealed`` (read_committed) into the archive, verified first.

Per partition, in offset order (docs/log.md, "Archive"):

1. a sealed event is parsed and its leaf hash computed; it is *pending*;
2. a checkpoint record is decoded and verified (a trusted log key's signature, the origin of
   this partition's log, the listed leaves growing the compact tree to the signed root). The
   pending records are matched greedily, in order, against the listed leaf hashes: matched
   ones become leaves of the archived log; any other one (appended by another producer, even
   a chain-valid one) is quarantined ``not-in-log`` and never archived;
3. a checkpoint that fails verification is quarantined ``bad-checkpoint`` and the pending
   records stay pending (never archived unless a later verified checkpoint lists them);
   a verified one whose leaves were not all read here (records gone from the topic, or
   quarantined when read) still extends the tree: the leaves are recorded as holes
   (``tracevault.archive._holes``; docs/log.md, "Holes"), so no record stops the log;
   a checkpoint of another generation of the partition's log (a new cluster is a new log)
   switches to that log;
4. when enough leaves are verified (``archive_segment_max_events`` or ``_max_bytes`` of
   sealed values), they are old enough (``archive_segment_max_age_s``) or a poll comes back
   empty (caught up), the partition's log is flushed (``_logwriter``): bundles, tiles,
   per-run index objects, day batches, then the checkpoint object;
5. offsets are committed only up to the record after the last *flushed* checkpoint record (or
   all consumed, once nothing is pending or unflushed): pending records are re-read after a
   restart, which resumes from the archive's newest checkpoint (re-verified).

Without trusted log keys (``log_vkeys``) the archiver refuses to start: it must not archive
what it cannot check. No record can stop it: anything it cannot archive is quarantined
(``_quarantine``: an immutable object, an ALERT log line, counted by reason). Errors of the
object store stop it (after boto3's retries): run it under a supervisor.

This module holds the per-event path (step 1) and the flushes (4); the checkpoint admission
(2, 3) is in ``_admission``, the holes it places in ``_holeplace``, and the Kafka session
(the consumer, its poll loop, rebalances and offset commits: 5, and liveness,
docs/liveness.md) in ``_session``.

Known limit: pending records are held in memory until a checkpoint resolves them. A genuine
transaction brings its checkpoint with it (read_committed delivers both), so only records
appended by another producer can pile up, and only while the sequencer writes nothing to
that partition; the next checkpoint quarantines them all.

Known limit: object stores have no fencing, so an archiver that stalls past
``max.poll.interval.ms`` without noticing it lost its partitions could still flush after the
new owner did; both write the same leaves, so the objects agree (same bytes, or partial tiles
and checkpoints at different sizes of the same log).
"""

from __future__ import annotations

import hashlib
import logging
import struct
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime, timedelta
from types import ModuleType

from confluent_kafka import Consumer, Message
from prometheus_client import Histogram

from tracevault import native
from tracevault.archive import ObjectStore, open_store, utc_now
from tracevault.config import MIN_RETENTION_DAYS, Settings
from tracevault.consumer.archiver._admission import CheckpointAdmission
from tracevault.consumer.archiver._logwriter import FlushJob, LeafRecord, PartitionLog
from tracevault.consumer.archiver._metrics import ArchiverMetrics
from tracevault.consumer.archiver._quarantine import MAX_SEALED_AT as _MAX_AT
from tracevault.consumer.archiver._quarantine import MIN_SEALED_AT as _MIN_AT
from tracevault.consumer.archiver._quarantine import QuarantineReason as Why
from tracevault.consumer.archiver._quarantine import unarchivable
from tracevault.consumer.archiver._sealed import leaf_fields
from tracevault.consumer.archiver._session import KafkaSession
from tracevault.consumer.archiver._state import ArchiverStats
from tracevault.consumer.archiver._state import Part as _Part
from tracevault.consumer.archiver._state import Pending as _Pending
from tracevault.errors import ConfigError, LogError, RetentionError, SchemaError
from tracevault.index import IndexStep
from tracevault.runtime.liveness import BlockingCalls, Health, KafkaWatch, OffsetCommits, Sessions
from tracevault.schemas import EventKind
from tracevault.schemas.fast import armed_walks
from tracevault.transparency import (
    HASH_SIZE,
    NoteVerifier,
    is_checkpoint_record,
    leaf_data,
    leaf_prefix,
    load_verifiers,
    log_origin,
)

# the per-event path in C: optional (pyproject.toml), and off under TRACEVAULT_NO_C=1
_ctake: ModuleType | None = native.load("tracevault.consumer.archiver._ctake")

__all__ = ["Archiver", "ArchiverStats", "trusted_log_keys"]

log = logging.getLogger(__name__)

_WRITERS = 8  # I/O-bound (fsync, S3 PUT latency): a flush's objects are written in parallel
_COMMIT_S = 15.0  # a synchronous offset commit taking longer ends the Kafka session
# Offsets go at most this often (and at the end); a crash re-reads at most this much more,
# and the leaves the archive already holds are skipped.
_COMMIT_EVERY_S = 0.5
_POLL_S = 0.2  # a poll's wait; an empty one means caught up: what is unflushed is flushed
_POLL_BUSY_S = 0.02  # ... while a flush is written and nothing is unflushed (_poll_s)
_FLUSHERS = 4
_BACKLOG = 4  # flushes of a partition taken and not yet written before the archiver waits
_RUN_IDS = 100_000  # run ids remembered as storable (then each new one is checked again)
_U64 = struct.Struct(">Q")
_U64_MAX = (1 << 64) - 1
_new_tuple = tuple.__new__  # a NamedTuple without its Python-level __new__ (once per event)
_sha256 = hashlib.sha256


def trusted_log_keys(settings: Settings) -> list[NoteVerifier]:
    """The vkeys the archiver trusts; ``ConfigError`` when there are none."""
    items = [x.strip() for x in settings.log_vkeys.split(",") if x.strip()]
    keys: list[NoteVerifier] = list(load_verifiers(items))
    if not keys:
        raise ConfigError(
            "the archiver needs the log's verifier key to check what it archives: set "
            "TRACEVAULT_LOG_VKEYS (or log_vkeys) to the vkey `tracevault keys show` prints, "
            "or @FILE of vkeys; it will not archive what it cannot check"
        )
    return keys


class Archiver(CheckpointAdmission, KafkaSession):
    """Consume the sealed topic and archive what the signed log lists; ``run()`` until
    ``stop()``."""

    def __init__(
        self,
        settings: Settings,
        *,
        store: ObjectStore | None = None,
        clock: Callable[[], datetime] = utc_now,
        verifiers: list[NoteVerifier] | None = None,
    ) -> None:
        self.settings = settings
        self.verifiers = verifiers if verifiers is not None else trusted_log_keys(settings)
        if not self.verifiers:
            raise ConfigError("the archiver needs at least one trusted log key")
        if settings.retention_days < MIN_RETENTION_DAYS:
            raise RetentionError(
                f"retention_days={settings.retention_days} is under {MIN_RETENTION_DAYS} "
                "days; EU AI Act Art. 19 requires automatically generated logs to be kept at "
                "least six months"
            )
        self.store = store or open_store(settings.archive_url, settings)
        self.clock = clock
        self.retention = _days(settings.retention_days)
        self.topic = settings.topics.sealed
        self.group_id = settings.archiver_group_id
        self.stats = ArchiverStats()
        self._stop = threading.Event()
        self._parts: dict[int, _Part] = {}
        # run id -> its leaf prefix, once its archive path was checked (bounded: _RUN_IDS)
        self._prefixes: dict[str, bytes] = {}
        self._pool = ThreadPoolExecutor(_WRITERS, thread_name_prefix="archive-put")
        # Flushes are written in the background (one per partition at a time) while the main
        # thread goes on reading and verifying; offsets follow only once a flush is durable.
        self._flusher = ThreadPoolExecutor(_FLUSHERS, thread_name_prefix="archive-flush")
        self._consumed: dict[int, int] = {}  # partition -> next offset after what was read
        self._committed: dict[int, int] = {}
        self._ctx = self._native_context()
        # the investigator's index, written with each flush (docs/index.md, "Writing")
        self._index = IndexStep(self.store) if settings.archive_index else None
        self._assigned_at: float | None = None  # idle time counts from the first assignment
        self._max_events = settings.archive_segment_max_events
        self._max_bytes = settings.archive_segment_max_bytes
        self._calls = BlockingCalls("archiver", self._stop)
        self.watch = KafkaWatch("archiver")
        self.health = Health("archiver", settings.health_stall_s)
        self.health.watch = self.watch
        self.metrics = ArchiverMetrics(self.stats, self.health)
        self.registry = self.metrics.registry
        self._sessions = Sessions("archiver", self._stop, self.health)
        self._commits = OffsetCommits(
            "archiver",
            self._calls,
            self.watch,
            self._kafka_error,
            deadline_s=_COMMIT_S,
            every_s=_COMMIT_EVERY_S,
        )
        self._live: Consumer | None = None
        self._assigned = False  # an assignment (maybe empty) came in this session
        self._lost = False
        self._session_started = 0.0
        self._generation = ""  # of the sealed topic (the log origins'), learnt per session

    def _native_context(self) -> tuple[object, ...] | None:
        """What the C path reads and fills (the same dicts as ``_take_one``), or None when it
        is not built or the fast walks are off (a newer schema: only Python reads it)."""
        walks = armed_walks()
        if _ctake is None or walks is None:
            log.info("archiver: the per-event path runs in Python (no C path here)")
            return None
        sealed, trace, kinds = walks
        return (
            self._consumed,
            self._parts,
            self._prefixes,
            _MIN_AT,
            _MAX_AT,
            LeafRecord,
            _Pending,
            sealed,
            trace,
            kinds.index(EventKind.RUN_FINISHED),
            len(kinds),
        )

    def stop(self) -> None:
        """Ask ``run()`` to flush, commit and return (safe from a signal handler)."""
        self.health.state = "stopping"
        self._stop.set()

    # -- Kafka ------------------------------------------------------------------------------

    def run(self, *, until_idle: float | None = None) -> ArchiverStats:
        """Archive until ``stop()`` (or ``until_idle`` seconds without a message).

        A Kafka session that cannot go on is replaced by a new one (docs/liveness.md)."""
        log.info("archiving %s to %s (group %s)", self.topic, self.store.url, self.group_id)
        try:
            self._sessions.run(
                self._start_session,
                lambda consumer: self._session(consumer, until_idle),
                self._end_session,
                # the new consumer resumes from the committed offsets
                on_restart=lambda: self._forget(None),
            )
        finally:
            self._flusher.shutdown(wait=True)
            self._pool.shutdown(wait=True)
            self._calls.close()
        self._log_stats("stopped")
        return self.stats

    def _poll_s(self) -> float:
        """How long a poll may wait: briefly while a flush is being written and nothing is
        unflushed.

        A written flush is accounted for (offsets, counters) after a poll returns, so a long
        wait then only delays the commit. With leaves unflushed the wait stays: an empty
        poll is how the archiver knows it caught up and flushes them, and a shorter one
        would flush smaller pieces of a slow stream (more objects per run)."""
        busy = False
        for part in self._parts.values():
            if part.log.unflushed:
                return _POLL_S
            busy = busy or bool(part.flights)
        return _POLL_BUSY_S if busy else _POLL_S

    def _log_stats(self, state: str) -> None:
        st = self.stats
        log.info(
            "archiver %s: %d events archived, %d skipped, %d quarantined, %d checkpoints "
            "verified, %d flushes (%d objects), %d runs finished, %d records pending",
            state,
            st.events_archived,
            st.events_skipped,
            st.events_quarantined,
            st.checkpoints_verified,
            st.segments_written,
            st.objects_written,
            st.runs_finished,
            sum(len(p.pending) for p in self._parts.values()),
        )

    # -- the log ----------------------------------------------------------------------------

    def _part(self, partition: int) -> _Part:
        part = self._parts.get(partition)
        if part is None:
            prefix = self.settings.topic_prefix
            part = _Part(
                PartitionLog.open(
                    self.store,
                    prefix,
                    log_origin(self.settings.log_origin, prefix, partition, self._generation),
                    partition,
                    self.verifiers,
                )
            )
            self._parts[partition] = part
        return part

    def _take_all(self, msgs: list[Message]) -> None:
        """Sort one consumed batch into pending events and checkpoint records.

        The common case (a v1 sealed event of a run already admitted) goes through the C
        path (``_ctake.c``) when it is built; it stops at the first message that is not
        that case, which ``_take_one`` handles, and goes on after it."""
        ctx = self._ctx
        if ctx is None:
            for msg in msgs:
                self._take_one(msg)
            return
        assert _ctake is not None  # a context is made only when it is built
        i, n, take = 0, len(msgs), _ctake.take
        while i < n:
            i = take(msgs, i, ctx)
            if i < n and not self._admitted(msgs[i], ctx):
                self._take_one(msgs[i])
                i += 1

    def _admitted(self, msg: Message, ctx: tuple[object, ...]) -> bool:
        """True when ``msg`` is the common case but for its run or partition, now admitted or
        opened: the C path then takes it (a run's first record is not walked in Python)."""
        value, partition = msg.value(), msg.partition()
        if value is None or partition is None or msg.headers() or msg.error() is not None:
            return False
        assert _ctake is not None
        if partition not in self._parts:
            self._part(partition)  # a partition's first record: its log is opened here
            return True
        fields = _ctake.leaf_fields(value, ctx)
        if fields is None:
            return False
        run_id, _seq, _h, _fin, sealed_at = fields
        if run_id in self._prefixes or not _MIN_AT <= sealed_at <= _MAX_AT:
            return False  # declined for another reason: the Python path says which
        # remembered only while the cache has room; otherwise the Python path takes it
        return isinstance(self._admit(run_id, sealed_at), bytes) and run_id in self._prefixes

    def _take_one(self, msg: Message) -> None:
        """One consumed message, in Python: every case, the reference for the C path.

        The per-event path is flat on purpose (without the C path it bounds the archiver's
        throughput): the value is read by the v1 fast path without building a ``Sealed``,
        and the leaf hash appends ``u64 seq ‖ hash`` to the run's leaf prefix, built once
        per run."""
        err = msg.error()
        if err is not None:
            self._kafka_error(err)
            log.warning("Kafka consumer: %s", err.str())
            return
        partition, offset, value = msg.partition(), msg.offset(), msg.value()
        if partition is None or offset is None:
            return  # only error events lack a position
        self._consumed[partition] = offset + 1
        part = self._part(partition)
        headers = msg.headers()
        if headers and is_checkpoint_record(headers):
            self._checkpoint(part, msg)
            return
        if value is None:
            qkey = self._refuse(msg, Why.UNDECODABLE, "the record has no value (a tombstone)")
            part.opaque.append((offset, Why.UNDECODABLE.value, qkey))
            return
        try:
            run_id, seq, h, fin, sealed_at = leaf_fields(value)
        except Exception as exc:  # SchemaError, or whatever the parser did not foresee
            why = Why.UNDECODABLE if isinstance(exc, SchemaError) else Why.INTERNAL
            qkey = self._refuse(msg, why, f"{type(exc).__name__}: {exc}")  # names where it was
            part.opaque.append((offset, why.value, qkey))
            return
        pfx = self._prefixes.get(run_id)
        if pfx is None or not _MIN_AT <= sealed_at <= _MAX_AT:
            got = self._admit(run_id, sealed_at)
            if isinstance(got, str):
                self._unarchivable(part, msg, got, run_id, seq, h, fin, sealed_at)
                return
            pfx = got
        if len(h) != HASH_SIZE or not 0 <= seq <= _U64_MAX:
            try:
                leaf_data(run_id, seq, h)  # names what does not fit
                problem = f"run {run_id!r} seq {seq} does not fit a leaf"
            except LogError as exc:
                problem = str(exc)
            qkey = self._refuse(msg, Why.INVALID, problem, run_id, seq)
            part.opaque.append((offset, Why.INVALID.value, qkey))
            return
        hashed = pfx + _U64.pack(seq) + h  # 0x00 ‖ leaf data: RFC 6962's leaf hash input
        rec = _new_tuple(
            LeafRecord,
            (run_id, seq, h, fin, sealed_at, hashed[1:], _sha256(hashed).digest(), value),
        )
        part.pending.append(_new_tuple(_Pending, (offset, msg.key(), rec)))

    def _unarchivable(  # noqa: PLR0917 - the fields leaf_fields read, as read
        self,
        part: _Part,
        msg: Message,
        problem: str,
        run_id: str,
        seq: int,
        h: bytes,
        fin: bool,
        sealed_at: int,
    ) -> None:
        """Quarantine a record that reads but is no run history the archive can hold, and
        keep it pending: when a checkpoint lists its leaf, the leaf still enters the
        archived tree (the signed root includes it) as a ``quarantined`` hole."""
        qkey = self._refuse(msg, Why.INVALID, problem, run_id, seq)
        offset = msg.offset()
        assert offset is not None  # a consumed record has one
        try:
            leaf = leaf_data(run_id, seq, h)
        except LogError:
            part.opaque.append((offset, Why.INVALID.value, qkey))
            return
        rec = LeafRecord(
            run_id, seq, h, fin, sealed_at, leaf, _sha256(b"\x00" + leaf).digest(), b""
        )
        part.pending.append(_Pending(offset, msg.key(), rec))
        part.marked[offset] = (Why.INVALID.value, qkey)

    def _admit(self, run_id: str, sealed_at: int) -> bytes | str:
        """The run's leaf prefix (remembered) if the record can be archived, else why not."""
        problem = unarchivable(run_id, sealed_at)
        if problem is not None:
            return problem
        try:
            pfx = leaf_prefix(run_id)
        except LogError as exc:  # a run id too long for a leaf
            return str(exc)
        if len(self._prefixes) < _RUN_IDS:
            self._prefixes[run_id] = pfx
        return pfx

    def _flush_due(self, *, caught_up: bool = False) -> None:
        """Flush what is old enough, or everything once a poll came back empty: the
        archiver has caught up with the topic, and waiting longer only adds latency."""
        deadline = time.monotonic() - self.settings.archive_segment_max_age_s
        for part in self._parts.values():
            if part.log.unflushed and (caught_up or part.opened <= deadline):
                self._flush(part)

    def _flush(self, part: _Part) -> None:
        """Hand the partition's verified leaves to a background flush, written after the
        partition's previous one (the checkpoint objects go in order).

        The main thread does not wait for the previous one to be written (on a disk where
        creating files is dear that wait was a fifth of the archiver's time), only when
        ``_BACKLOG`` flushes of the partition are already queued. A flush is taken at the
        same points as when it waited, so a flush redone after a crash ends at the same
        size and writes the same objects."""
        plog = part.log
        if not plog.unflushed:
            return
        while len(part.flights) >= _BACKLOG:
            self._wait_oldest(part)
        index = self._index.take(plog) if self._index is not None else None
        job = plog.take_flush(self.clock() + self.retention)
        job.index = index
        before = part.flights[-1][0] if part.flights else None
        fut = self._flusher.submit(_after, before, job, self._pool, self.metrics.flush_seconds)
        part.flights.append((fut, job, part.ready_offset))

    def _reap(self) -> None:
        for part in self._parts.values():
            while part.flights and part.flights[0][0].done():
                self._wait_oldest(part)

    def _wait(self, part: _Part) -> None:
        """Wait for every flush of the partition taken so far (an error is raised)."""
        while part.flights:
            self._wait_oldest(part)

    def _wait_oldest(self, part: _Part) -> None:
        """Wait for the partition's oldest flush in flight; account for it."""
        fut, job, offset = part.flights[0]
        try:
            objects, written_at = fut.result()
        except BaseException:
            part.flights.clear()  # the later ones failed with it (_after)
            raise
        part.flights.pop(0)
        done = not part.log.unflushed and not part.flights
        part.durable_offset = part.ready_offset if done else offset
        st = self.stats
        st.events_archived += job.leaves
        st.segments_written += 1
        st.objects_written += objects
        st.runs_finished += job.finished
        st.last_write_at = written_at


def _after(
    before: Future[tuple[int, float]] | None,
    job: FlushJob,
    pool: ThreadPoolExecutor,
    timer: Histogram,
) -> tuple[int, float]:
    """Write ``job`` once the partition's previous flush is written (its error stops this
    one too, before any of its objects: the checkpoints never skip one); the objects
    written and when the last one was (``last_write_at``: not when the main thread next
    looks)."""
    if before is not None:
        before.result()
    started = time.monotonic()
    objects = job.write(pool)
    done = time.monotonic()
    timer.observe(done - started)  # the write alone, not the wait for the one before
    return objects, done


def _days(n: int) -> timedelta:
    return timedelta(days=n)
