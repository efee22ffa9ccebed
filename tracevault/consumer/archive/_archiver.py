"""The archiver: ``<prefix>.sealed`` (read_committed) into segments in an object store.

Loop, per batch of messages:

1. each sealed value is parsed; its run's cursor (what the archive already holds) is loaded
   with one listing the first time the run is seen;
2. an event at or below the archived seq is skipped (it was archived before a crash); the
   next seq is checked against the chain (prev_hash = last hash, hash = link(prev, raw)) and
   buffered; a record that does not parse, cannot be stored, breaks the chain or comes
   after a missing seq (a hole) is quarantined (``_quarantine``) and the archiver goes on;
3. a run's buffer becomes a segment job at RUN_FINISHED (plus the final receipt) or when it
   reaches the configured event count, byte size or age. Writer threads run the jobs, each
   run always on the same one so its segments go in order (compression and I/O release the
   GIL, so parsing and writing overlap, and fsync or PUT latencies overlap each other);
4. offsets are committed only up to the first event of each partition that is still
   buffered or in a job not yet written, i.e. only for events whose objects are durable.

A SIGKILL anywhere loses only unwritten events, which Kafka re-delivers; the cursor skips
what was written. On revocation the writer is drained first (no write after we lose the
partition), then the buffers of the revoked partitions are dropped: their new owner reads
them again from the committed offset.

No record can stop the archiver: a hole in a run's seqs or a break in its chain sends the
record, with the run, seq and topic position named, to ``quarantine/`` in the archive store
(an ALERT log line and ``stats.events_quarantined``); the run stays archived up to the seq
before it, since the archive never skips a seq, and an operator has to look. Errors of the
object store stop it (after boto3's retries): run it under a supervisor; on restart it
resumes from the archive itself.

Liveness (docs/liveness.md): offset commits run with a deadline and transient commit errors
(a coordinator loading after a broker restart) are retried with backoff. A commit past its
deadline, a fatal consumer error, or a fencing right after a broker outage ends the Kafka
session: the writers are drained, every partition is forgotten as on a revocation, and a new
consumer resumes from the committed offsets (the cursors skip what was written).

Known limit: object stores have no fencing, so an archiver that stalls past
``max.poll.interval.ms`` without noticing it lost its partitions could still write a segment
after the new owner did; the two would overlap and ``check_run`` / ``replay verify`` would
name them. Static membership (``archive_instance_id``) and a supervisor that kills, rather
than pauses, a stuck process keep that window closed in practice.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition
from prometheus_client import CollectorRegistry, Gauge

from tracevault.archive._open import open_store
from tracevault.archive._store import ObjectStore, utc_now
from tracevault.chain import link
from tracevault.config import Settings
from tracevault.consumer._liveness import (
    BlockingCalls,
    CallDeadline,
    Health,
    KafkaWatch,
    Stopping,
    backoff,
    is_fenced,
)
from tracevault.consumer.archive._quarantine import MAX_SEALED_AT as _MAX_AT
from tracevault.consumer.archive._quarantine import MIN_SEALED_AT as _MIN_AT
from tracevault.consumer.archive._quarantine import QuarantineReason as Why
from tracevault.consumer.archive._quarantine import quarantine, unarchivable
from tracevault.consumer.archive._sealed import Sealed, parse_sealed
from tracevault.consumer.archive._writer import ArchiveWriter, RunCursor
from tracevault.errors import (
    FencedError,
    SchemaError,
    ServiceUnavailableError,
)
from tracevault.log import CHECKPOINT_KEY, is_checkpoint_record

__all__ = ["Archiver", "ArchiverStats"]

log = logging.getLogger(__name__)

_RUN_CACHE = 100_000  # run states kept; the oldest idle ones are dropped (reloaded if seen)
_QUEUE_JOBS = 8  # per writer; back-pressure: parsing waits when the writers fall behind
_REPORT_EVERY_S = 60.0  # an INFO line with the counters, for operators tailing the log
_WRITERS = 4  # I/O-bound (fsync, S3 PUT latency): more writers than cores pays
_COMMIT_S = 15.0  # a synchronous offset commit taking longer ends the Kafka session
# Commits run in a worker thread (for their deadline); with the writer threads holding the
# GIL each hand-off costs milliseconds, so offsets go at most this often (and at the end).
# A crash re-reads at most this much more; the cursors skip it.
_COMMIT_EVERY_S = 0.5
_CLOSE_S = 3.0  # on stop; a session being replaced waits longer
_REPLACE_CLOSE_S = 10.0  # a consumer still alive after this may rejoin and fence the new one
_LAG_EVERY_S = 1.0


class _Restart(Exception):
    """This Kafka session cannot go on: drain, forget the partitions, start a new consumer."""


class _Broken(_Restart):
    """A restart for a client that broke while the broker answered: counted towards giving up."""


@dataclass(slots=True)
class ArchiverStats:
    """Counters since start (also logged on shutdown)."""

    events_archived: int = 0
    events_skipped: int = 0
    segments_written: int = 0
    runs_finished: int = 0
    events_quarantined: int = 0
    quarantined: dict[str, int] = field(default_factory=dict)  # by reason
    first_message_at: float | None = None  # time.monotonic() of the first message consumed
    last_write_at: float | None = None  # time.monotonic() after the last segment was written


@dataclass(slots=True)
class _Run:
    """The main thread's view of a run: what is accepted (written, queued or buffered)."""

    cursor: RunCursor  # belongs to the writer thread once the run has a job
    partition: int
    next_seq: int
    last_hash: bytes
    finished: bool
    buffer: list[Sealed] = field(default_factory=list)
    first_offset: int = -1
    opened: float = 0.0
    size: int = 0
    jobs: int = 0


@dataclass(slots=True)
class _Job:
    run_id: str
    cursor: RunCursor
    events: list[Sealed]
    partition: int
    first_offset: int
    done: bool = False
    finished_at: float = 0.0


class Archiver:
    """Consume the sealed topic and archive every run; ``run()`` until ``stop()``."""

    def __init__(
        self,
        settings: Settings,
        *,
        store: ObjectStore | None = None,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self.settings = settings
        self.store = store or open_store(settings.archive_url, settings)
        self.writer = ArchiveWriter(self.store, retention_days=settings.retention_days, clock=clock)
        self.topic = settings.topics.sealed
        self.group_id = settings.archiver_group_id
        self.stats = ArchiverStats()
        self._stop = threading.Event()
        self._runs: OrderedDict[str, _Run] = OrderedDict()
        self._jobs: list[_Job] = []  # submitted, not yet reaped, in submission order
        # A run always goes to the same writer, so its segments are written in order.
        self._queues: list[queue.Queue[_Job | None]] = [
            queue.Queue(maxsize=_QUEUE_JOBS) for _ in range(_WRITERS)
        ]
        self._writer_error: BaseException | None = None
        self._consumed: dict[int, int] = {}  # partition -> next offset after what was read
        self._committed: dict[int, int] = {}
        self._assigned_at: float | None = None  # idle time counts from the first assignment
        self._max_events = settings.archive_segment_max_events
        self._max_bytes = settings.archive_segment_max_bytes
        self._calls = BlockingCalls("archiver", self._stop)
        self.watch = KafkaWatch("archiver")
        self.health = Health("archiver", settings.health_stall_s)
        self.health.watch = self.watch
        self.registry = self._metrics()
        self._commit_failures = 0
        self._commit_retry_at = 0.0
        self._live: Consumer | None = None
        self._progress_in_session = False
        self._lost = False
        self._session_started = 0.0

    def _metrics(self) -> CollectorRegistry:
        """A private registry read from the counters at scrape time (``--metrics-port``)."""
        r = CollectorRegistry(auto_describe=True)
        st = self.stats
        for name, doc, fn in (
            ("events_archived", "events written to the archive", lambda: st.events_archived),
            ("events_skipped", "events the archive already held", lambda: st.events_skipped),
            ("segments_written", "segments written", lambda: st.segments_written),
            ("runs_finished", "runs archived with their final receipt", lambda: st.runs_finished),
            ("session_restarts", "Kafka sessions replaced", lambda: self.health.restarts),
            ("consumer_lag", "sealed records not yet consumed", lambda: self.health.lag or 0),
        ):
            Gauge(f"tracevault_archiver_{name}", doc, registry=r).set_function(fn)
        return r

    def stop(self) -> None:
        """Ask ``run()`` to flush, commit and return (safe from a signal handler)."""
        self.health.state = "stopping"
        self._stop.set()

    # -- the writer thread ------------------------------------------------------------------

    def _write_loop(self, jobs: queue.Queue[_Job | None]) -> None:
        while True:
            job = jobs.get()
            try:
                if job is None:
                    return
                if self._writer_error is None:  # after a failure, only drain the queue
                    self.writer.write_segment(job.cursor, job.events)
                    job.finished_at = time.monotonic()
                    job.done = True
            except BaseException as exc:
                self._writer_error = exc
            finally:
                jobs.task_done()

    def _submit(self, job: _Job) -> None:
        self._jobs.append(job)
        jobs = self._queues[hash(job.run_id) % len(self._queues)]
        while True:
            self._raise_writer_error()
            try:
                jobs.put(job, timeout=0.5)
                return
            except queue.Full:
                continue

    def _raise_writer_error(self) -> None:
        if self._writer_error is not None:
            raise self._writer_error

    def _drain(self) -> None:
        """Wait until every submitted job is written (or the writer failed)."""
        for jobs in self._queues:
            jobs.join()
        self._reap()

    def _reap(self) -> None:
        """Account for written jobs (the writer's errors are raised by the main loop)."""
        done = [j for j in self._jobs if j.done]
        if not done:
            return
        self._jobs = [j for j in self._jobs if not j.done]
        for job in done:
            self.stats.events_archived += len(job.events)
            self.stats.segments_written += 1
            self.stats.runs_finished += 1 if job.events[-1].finishes_run else 0
            self.stats.last_write_at = max(self.stats.last_write_at or 0.0, job.finished_at)
            run = self._runs.get(job.run_id)
            if run is not None:
                run.jobs -= 1

    # -- Kafka ------------------------------------------------------------------------------

    def _consumer(self) -> Consumer:
        conf: dict[str, Any] = {
            "group.id": self.group_id,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            # Bigger fetches: segments are written in bulk, and librdkafka's 1 MiB default
            # per partition made fetch round trips the archiver's bottleneck.
            "max.partition.fetch.bytes": 8 * 1024 * 1024,
            "session.timeout.ms": self.settings.archive_session_timeout_ms,
            "log_level": 3,
            **self.watch.client_config(),
        }
        if self.settings.archive_instance_id:
            conf["group.instance.id"] = self.settings.archive_instance_id
        return Consumer(self.settings.kafka_config(**conf))

    def _on_assign(self, consumer: Consumer, parts: list[TopicPartition]) -> None:
        self._assigned_at = time.monotonic()
        log.info("archiver assigned %s", [p.partition for p in parts])

    def _on_revoke(self, consumer: Consumer, parts: list[TopicPartition]) -> None:
        if consumer is not self._live:
            return  # an abandoned session's consumer closing late: its state is gone already
        self._forget({p.partition for p in parts})

    def _on_lost(self, consumer: Consumer, parts: list[TopicPartition]) -> None:
        if consumer is not self._live:
            return
        self._forget({p.partition for p in parts})
        # The group session expired (a broker outage): a static member would come back
        # fenced and its commits were seen to hang; the session loop starts a new consumer.
        self._lost = True
        self.watch.trouble()

    def _forget(self, gone: set[int] | None) -> None:
        """Drain the writers, then drop what was read of ``gone`` (None: every partition)."""
        self._drain()  # nothing of ours may be written after the partitions move on
        if gone is None:
            gone = {r.partition for r in self._runs.values()} | set(self._consumed)
        # Unwritten events of revoked partitions are not committed: their next owner
        # re-reads them, and its cursor skips whatever we did write.
        for run_id in [r for r, run in self._runs.items() if run.partition in gone]:
            del self._runs[run_id]
        for p in gone:
            self._consumed.pop(p, None)
            self._committed.pop(p, None)
        log.info("archiver revoked %s", sorted(gone))

    def run(self, *, until_idle: float | None = None) -> ArchiverStats:
        """Archive until ``stop()`` (or ``until_idle`` seconds without a message).

        A Kafka session that cannot go on is replaced by a new one (docs/liveness.md)."""
        writers = [
            threading.Thread(target=self._write_loop, args=(q,), name=f"archive-writer-{i}")
            for i, q in enumerate(self._queues)
        ]
        for w in writers:
            w.daemon = True
            w.start()
        log.info("archiving %s to %s (group %s)", self.topic, self.store.url, self.group_id)
        failures = attempts = 0
        try:
            while not self._stop.is_set():
                consumer = self._live = self._consumer()
                consumer.subscribe(
                    [self.topic],
                    on_assign=self._on_assign,
                    on_revoke=self._on_revoke,
                    on_lost=self._on_lost,
                )
                self._progress_in_session = self._lost = False
                self._session_started = time.monotonic()
                try:
                    self._session(consumer, until_idle)
                    break
                except Stopping as exc:
                    log.warning("archiver stopped during a Kafka call (%s)", exc)
                    break
                except (_Restart, CallDeadline) as exc:
                    if self._progress_in_session:
                        failures = attempts = 0
                    attempts += 1
                    if isinstance(exc, _Broken):
                        failures += 1
                    if failures > 8:
                        raise ServiceUnavailableError(
                            f"the archiver could not resume after {failures} attempts while "
                            f"the broker answered (last: {exc}); exiting for the supervisor"
                        ) from exc
                    # an outage: try again every 2 s at most; something broken: back off more
                    wait = backoff(attempts, base=0.25, cap=10.0 if failures else 2.0)
                    log.warning(
                        "archiver: Kafka session ended (%s); starting a new one in %.1fs",
                        exc,
                        wait,
                    )
                    self.health.state = "restarting"
                    self.health.restarts += 1
                    self._forget(None)  # the new consumer resumes from the committed offsets
                    self._raise_writer_error()
                finally:
                    self._live = None
                    self._close_consumer(consumer)
                if self._stop.wait(wait):
                    break
        finally:
            for q in self._queues:
                q.put(None)
            for w in writers:
                w.join(60)
            self._calls.close()
        self._log_stats("stopped")
        return self.stats

    def _session(self, consumer: Consumer, until_idle: float | None) -> None:
        self.health.state = "running"
        last_msg: float | None = None
        next_report = time.monotonic() + _REPORT_EVERY_S
        next_lag = 0.0
        while not self._stop.is_set():
            try:
                msgs = consumer.consume(num_messages=1000, timeout=0.2)
            except KafkaException as exc:
                self._kafka_error(exc.args[0])
                msgs = []
            if self._lost:
                raise _Restart("the consumer lost its partitions (group session expired)")
            away = self.watch.outage_since(self._session_started)
            if away * 1000 > self.settings.archive_session_timeout_ms:
                raise _Restart(f"the brokers were away {away:.0f}s, past the session timeout")
            if msgs and self.stats.first_message_at is None:
                self.stats.first_message_at = time.monotonic()
            if msgs:
                self._take_all(msgs)
                last_msg = time.monotonic()
                self.health.progressed()
                self._progress_in_session = True
            self._flush_aged()
            self._reap()
            self._raise_writer_error()
            self._commit(consumer)
            now = time.monotonic()
            if now >= next_lag:
                next_lag = now + _LAG_EVERY_S
                self._update_lag(consumer)
            if now >= next_report:
                next_report = now + _REPORT_EVERY_S
                self._log_stats("archiving")
            if until_idle is not None and self._idle(consumer, last_msg, until_idle):
                break
        for run in list(self._runs.values()):
            if run.buffer:
                self._flush(run)
        self._drain()
        self._raise_writer_error()
        self._commit(consumer, final=True)

    def _close_consumer(self, consumer: Consumer) -> None:
        close_s = _CLOSE_S if self._stop.is_set() else _REPLACE_CLOSE_S
        try:
            self._calls.call("consumer close", consumer.close, close_s)
        except (KafkaException, RuntimeError, CallDeadline, Stopping) as exc:
            log.info("archiver: consumer close: %s", exc)

    def _update_lag(self, consumer: Consumer) -> None:
        try:
            assignment = consumer.assignment()
            lag = 0
            known = not assignment
            for tp in consumer.position(assignment):
                _, hi = consumer.get_watermark_offsets(tp, cached=True)  # no round trip
                if hi >= 0:
                    known = True
                    lag += max(0, hi - max(tp.offset, 0))
            self.health.set_lag(lag if known else None)
        except KafkaException as exc:
            log.debug("lag not updated: %s", exc)

    def _log_stats(self, state: str) -> None:
        st = self.stats
        log.info(
            "archiver %s: %d events archived, %d skipped, %d quarantined, %d segments, "
            "%d runs finished, %d runs open, %d segments being written",
            state,
            st.events_archived,
            st.events_skipped,
            st.events_quarantined,
            st.segments_written,
            st.runs_finished,
            sum(1 for r in self._runs.values() if r.buffer),
            len(self._jobs),
        )

    def _idle(self, consumer: Consumer, last_msg: float | None, until_idle: float) -> bool:
        """Nothing buffered or unwritten, no message for ``until_idle`` s, and every assigned
        partition fetched at least once (so a slow first fetch is not taken for idleness)."""
        since = last_msg or self._assigned_at
        if since is None or time.monotonic() - since < until_idle:
            return False
        if self._jobs or any(r.buffer for r in self._runs.values()):
            return False
        for tp in consumer.assignment():
            _low, high = consumer.get_watermark_offsets(tp, cached=True)
            if high < 0:
                return False
        return True

    def _kafka_error(self, err: KafkaError) -> None:
        if is_fenced(err):
            window = max(60.0, 3 * self.settings.archive_session_timeout_ms / 1000.0)
            if self.watch.excuse_fencing(window):
                # librdkafka's static member outlived its session in the outage
                raise _Restart(f"fenced after a broker outage ({err.str()})")
            raise FencedError(
                f"the archiver was fenced ({err.str()}): another archiver runs with "
                f"--instance-id {self.settings.archive_instance_id}; this one stopped. "
                "Give each archiver its own --instance-id"
            )
        if err.fatal():
            raise _Broken(f"Kafka consumer failed: {err.str()}")
        log.warning("Kafka consumer: %s", err.str())

    def _commit(self, consumer: Consumer, *, final: bool = False) -> None:
        hold: dict[int, int] = {}  # partition -> first offset not yet durable
        for run in self._runs.values():
            if run.buffer:
                hold[run.partition] = min(
                    run.first_offset, hold.get(run.partition, run.first_offset)
                )
        for job in self._jobs:
            hold[job.partition] = min(job.first_offset, hold.get(job.partition, job.first_offset))
        offsets = []
        for p, consumed in self._consumed.items():
            upto = hold.get(p, consumed)
            if self._committed.get(p) != upto:
                offsets.append(TopicPartition(self.topic, p, upto))
        if not offsets:
            return
        now = time.monotonic()
        if not final and now < self._commit_retry_at:
            return
        if not consumer.memberid():
            # The group session was lost in a broker outage longer than the session timeout
            # (a static member then comes back fenced, and commits were seen to hang).
            self.watch.trouble()
            raise _Restart("the consumer lost its group session during a broker outage")
        try:
            self._calls.call(
                "offset commit",
                lambda: consumer.commit(offsets=offsets, asynchronous=False),
                _COMMIT_S,
            )
        except CallDeadline as exc:
            self.watch.trouble()
            raise _Restart(str(exc)) from exc
        except KafkaException as exc:
            kerr = exc.args[0]
            if kerr.fatal() or is_fenced(kerr):
                self._kafka_error(kerr)
            # Anything else is transient here (a coordinator loading or moving after a broker
            # restart, a rebalance): the same absolute offsets go again after a backoff.
            self._commit_failures += 1
            wait = backoff(self._commit_failures - 1, base=0.2, cap=5.0)
            self._commit_retry_at = now + wait
            log.warning(
                "offset commit deferred %.1fs (attempt %d): %s",
                wait,
                self._commit_failures,
                kerr.str(),
            )
            return
        self._commit_failures = 0
        self._commit_retry_at = now + _COMMIT_EVERY_S
        self.health.progressed()
        self.watch.progressed()
        self._progress_in_session = True
        for tp in offsets:
            self._committed[tp.partition] = tp.offset

    # -- runs -------------------------------------------------------------------------------

    def _load(self, run_id: str, partition: int) -> _Run:
        cur = self.writer.cursor(run_id)
        run = _Run(cur, partition, cur.next_seq, cur.last_hash, cur.finished)
        self._runs[run_id] = run
        if len(self._runs) > _RUN_CACHE:
            for old in list(self._runs)[: _RUN_CACHE // 10]:
                r = self._runs[old]
                if not r.buffer and not r.jobs:
                    del self._runs[old]
        return run

    def _take_all(self, msgs: list[Message]) -> None:
        """Check and buffer one consumed batch (the hot loop: locals, no per-event calls
        beyond the parse and the hash)."""
        runs, consumed, stats = self._runs, self._consumed, self.stats
        max_events, max_bytes = self._max_events, self._max_bytes
        min_at, max_at = _MIN_AT, _MAX_AT
        for msg in msgs:
            err = msg.error()
            if err is not None:
                self._kafka_error(err)
                continue
            partition, offset, value = msg.partition(), msg.offset(), msg.value()
            if partition is None or offset is None:
                continue  # only error events lack a position
            consumed[partition] = offset + 1
            if msg.key() == CHECKPOINT_KEY and is_checkpoint_record(msg.headers()):
                continue  # the signed log's record, not an event (docs/log.md)
            if value is None:
                self._refuse(msg, Why.UNDECODABLE, "the record has no value (a tombstone)")
                continue
            try:
                ev = parse_sealed(value)  # the quarantine object says where it was
            except Exception as exc:  # SchemaError, or whatever the parser did not foresee
                why = Why.UNDECODABLE if isinstance(exc, SchemaError) else Why.INTERNAL
                self._refuse(msg, why, f"{type(exc).__name__}: {exc}")
                continue
            run = runs.get(ev.run_id)
            if run is None:
                problem = unarchivable(ev.run_id, ev.sealed_at)
                if problem is not None:
                    self._refuse(msg, Why.INVALID, problem, ev)
                    continue
                run = self._load(ev.run_id, partition)
            elif not min_at <= ev.sealed_at <= max_at:
                self._refuse(msg, Why.INVALID, unarchivable(ev.run_id, ev.sealed_at) or "", ev)
                continue
            if run.finished or ev.seq < run.next_seq:
                stats.events_skipped += 1
                continue
            if ev.seq > run.next_seq:
                self._refuse(
                    msg,
                    Why.HOLE,
                    f"run {ev.run_id!r} is archived up to seq {run.next_seq - 1} and this is "
                    f"seq {ev.seq}: seq {run.next_seq} is missing from the sealed topic or was "
                    "quarantined; the archive never skips a seq",
                    ev,
                )
                continue
            if ev.prev_hash != run.last_hash or link(run.last_hash, ev.raw) != ev.hash:
                self._refuse(
                    msg,
                    Why.CHAIN,
                    f"run {ev.run_id!r} seq {ev.seq} does not continue the run's hash chain: "
                    + (
                        f"its prev_hash {ev.prev_hash.hex()} is not the archived chain head "
                        f"{run.last_hash.hex()}"
                        if ev.prev_hash != run.last_hash
                        else f"its hash {ev.hash.hex()} is not link(prev_hash, raw)"
                    ),
                    ev,
                )
                continue
            buffer = run.buffer
            if not buffer:
                run.first_offset = offset
                run.opened = time.monotonic()
            buffer.append(ev)
            run.size += len(ev.body)
            run.next_seq += 1
            run.last_hash = ev.hash
            if ev.finishes_run:
                run.finished = True
                self._flush(run)
            elif len(buffer) >= max_events or run.size >= max_bytes:
                self._flush(run)

    def _refuse(self, msg: Message, why: Why, detail: str, ev: Sealed | None = None) -> None:
        """Quarantine one record (durably, before its offset can be committed) and go on."""
        partition, offset = msg.partition(), msg.offset()
        assert partition is not None and offset is not None  # a consumed record has both
        quarantine(
            self.store,
            self.writer.clock() + self.writer.retention,
            why,
            detail,
            self.topic,
            partition,
            offset,
            msg.key(),
            msg.value(),
            None if ev is None else ev.run_id,
            None if ev is None else ev.seq,
        )
        st = self.stats
        st.events_quarantined += 1
        st.quarantined[why.value] = st.quarantined.get(why.value, 0) + 1

    def _flush_aged(self) -> None:
        deadline = time.monotonic() - self.settings.archive_segment_max_age_s
        for run in list(self._runs.values()):
            if run.buffer and run.opened <= deadline:
                self._flush(run)

    def _flush(self, run: _Run) -> None:
        events, run.buffer, run.size = run.buffer, [], 0
        run.jobs += 1
        self._submit(_Job(events[0].run_id, run.cursor, events, run.partition, run.first_offset))
