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

The archiver is a step of the service runtime (:class:`ConsumerRuntime`: the consumer, its
poll loop, rebalances, offset commits, liveness; docs/liveness.md) and holds its parts, each
an object with a narrow interface: the per-event path (1: ``_intake``), the checkpoint
admission (2, 3: ``_admission``), the holes it places (``_holeplace``), the refusals
(``_refusals``), the flushes (4: ``_flusher``); it answers the runtime with the offsets to
commit (5).

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

import logging
import time
from collections.abc import Callable
from datetime import datetime, timedelta

from confluent_kafka import Message

from tracevault.archive import ObjectStore, open_store, utc_now
from tracevault.config import MIN_RETENTION_DAYS, Settings
from tracevault.errors import ConfigError, RetentionError
from tracevault.index import IndexStep, IndexWorker
from tracevault.kafka import sealed_generation
from tracevault.services.archiver._admission import CheckpointAdmission
from tracevault.services.archiver._flusher import Flusher
from tracevault.services.archiver._holeplace import HolePlacer
from tracevault.services.archiver._intake import Intake
from tracevault.services.archiver._metrics import ArchiverMetrics
from tracevault.services.archiver._refusals import Refusals
from tracevault.services.archiver._state import ArchiverStats, Partitions
from tracevault.services.runtime import ConsumerRuntime, Subscription
from tracevault.transparency import NoteVerifier, load_verifiers

__all__ = ["Archiver", "ArchiverStats", "trusted_log_keys"]

log = logging.getLogger(__name__)

_POLL_S = 0.2  # a poll's wait; an empty one means caught up: what is unflushed is flushed
_POLL_BUSY_S = 0.02  # ... while a flush is written and nothing is unflushed (poll_s)


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


# the stores ``open_store`` makes (not imported here: S3Store imports boto3); a store handed in
# by a caller that wraps one (tests inject faults so) keeps the step in-process
_OPENED_BY_URL = ("tracevault.archive._filestore", "tracevault.archive._s3store")


def _index_step(settings: Settings, store: ObjectStore) -> IndexStep | IndexWorker | None:
    """The archiver's index step: in a child process (``IndexWorker``) for a store the child
    can open from its URL, else on the flush threads (docs/index.md, "Writing")."""
    if not settings.archive_index:
        return None
    if settings.archive_index_worker and type(store).__module__ in _OPENED_BY_URL:
        return IndexWorker(settings.model_dump_json(), store.url)
    return IndexStep(store)


class Archiver:
    """Consume the sealed topic and archive what the signed log lists; ``run()`` until
    ``stop()``. A step of the service runtime (``take``, ``restore``, ``release``,
    ``flush_due`` ...), holding its parts."""

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
        retention = timedelta(days=settings.retention_days)
        self.topic = settings.topics.sealed
        self.group_id = settings.archiver_group_id
        self.stats = ArchiverStats()
        self.runtime = ConsumerRuntime(
            settings,
            Subscription(
                name="archiver",
                topic=self.topic,
                group_id=self.group_id,
                session_timeout_ms=settings.archive_session_timeout_ms,
                instance_id=settings.archive_instance_id,
                fenced=f"the archiver was fenced: another archiver runs with --instance-id "
                f"{settings.archive_instance_id}; this one stopped. Give each archiver its "
                "own --instance-id",
                config={
                    "isolation.level": "read_committed",
                    # Bigger fetches: segments are written in bulk, and librdkafka's 1 MiB
                    # default per partition made fetch round trips the archiver's bottleneck.
                    "max.partition.fetch.bytes": 8 * 1024 * 1024,
                },
            ),
        )
        self.health = self.runtime.health
        self.metrics = ArchiverMetrics(self.stats, self.health)
        self.registry = self.metrics.registry
        self.partitions = Partitions(settings, self.store, self.verifiers)
        self.parts = self.partitions.parts
        self.flusher = Flusher(
            self.stats,
            self.metrics.flush_seconds,
            clock,
            retention,
            settings.archive_segment_max_age_s,
            index=_index_step(settings, self.store),
        )
        refusals = Refusals(self.store, self.topic, self.stats, clock, retention)
        holes = HolePlacer(
            settings=settings,
            store=self.store,
            stats=self.stats,
            clock=clock,
            verifiers=self.verifiers,
            flusher=self.flusher,
        )
        admission = CheckpointAdmission(
            topic=self.topic,
            verifiers=self.verifiers,
            stats=self.stats,
            metrics=self.metrics,
            refusals=refusals,
            holes=holes,
            flusher=self.flusher,
            max_events=settings.archive_segment_max_events,
            max_bytes=settings.archive_segment_max_bytes,
        )
        self.intake = Intake(self.partitions, admission, refusals, self.runtime.kafka_error)

    def stop(self) -> None:
        """Ask ``run()`` to flush, commit and return (safe from a signal handler)."""
        self.runtime.stop()

    def run(self, *, until_idle: float | None = None) -> ArchiverStats:
        """Archive until ``stop()`` (or ``until_idle`` seconds without a message).

        A Kafka session that cannot go on is replaced by a new one (docs/liveness.md)."""
        log.info("archiving %s to %s (group %s)", self.topic, self.store.url, self.group_id)
        index = self.flusher.index
        if isinstance(index, IndexWorker):
            index.wait_ready()  # its child's start-up, before the first record
        try:
            self.runtime.run(self, until_idle=until_idle)
        finally:
            self.flusher.shutdown()
        self.report("stopped")
        return self.stats

    # -- the step: what the runtime calls -------------------------------------------------

    def restore(self, timeout: float) -> None:
        """The sealed topic's generation (the log origins'), learnt per session."""
        self.partitions.generation = sealed_generation(self.settings, timeout=timeout)

    def take(self, batch: list[Message]) -> None:
        if self.stats.first_message_at is None:
            self.stats.first_message_at = time.monotonic()
        self.intake.take(batch)

    def flush_due(self, *, caught_up: bool) -> None:
        self.flusher.due(self.parts.values(), caught_up=caught_up)

    def committable(self) -> dict[int, int]:
        """What was consumed, or, while a partition holds records not yet durable (pending,
        unflushed, being written), the offset after its last flushed checkpoint record:
        pending records are re-read after a restart."""
        out: dict[int, int] = {}
        for p, consumed in self.intake.consumed.items():
            part = self.parts.get(p)
            upto: int | None = consumed
            if part is not None and (part.pending or part.log.unflushed or part.flights):
                upto = part.durable_offset
            if upto is not None:
                out[p] = upto
        return out

    def release(self, partitions: set[int] | None) -> None:
        """Drop what was read of ``partitions`` (None: every partition); flushes in flight are
        waited for, so nothing of ours is written after this. Unflushed and pending records
        are not committed: the next owner re-reads them and resumes from the archive's
        checkpoint."""
        gone = set(self.parts) | set(self.intake.consumed) if partitions is None else partitions
        for p in gone:
            part = self.parts.get(p)
            if part is not None:
                self.flusher.wait(part)  # nothing of ours is written after the partition moves
        for p in gone:
            self.parts.pop(p, None)
            self.intake.forget(p)

    def drain(self) -> None:
        for part in self.parts.values():
            self.flusher.flush(part)
        for part in self.parts.values():
            self.flusher.wait(part)

    def busy(self) -> bool:
        """Leaves unflushed or being written. Pending records (no checkpoint yet) do not keep
        it busy: only a checkpoint resolves them."""
        return any(p.log.unflushed or p.flights for p in self.parts.values())

    def poll_s(self) -> float:
        """How long a poll may wait: briefly while a flush is being written and nothing is
        unflushed.

        A written flush is accounted for (offsets, counters) after a poll returns, so a long
        wait then only delays the commit. With leaves unflushed the wait stays: an empty
        poll is how the archiver knows it caught up and flushes them, and a shorter one
        would flush smaller pieces of a slow stream (more objects per run)."""
        busy = False
        for part in self.parts.values():
            if part.log.unflushed:
                return _POLL_S
            busy = busy or bool(part.flights)
        return _POLL_BUSY_S if busy else _POLL_S

    def report(self, state: str) -> None:
        st = self.stats
        log.info(
            "archiver %s: %d events archived, %d skipped, %d quarantined, %d checkpoints "
            "verified, %d flushes (%d objects), %d runs finished, %d records pending",
            "archiving" if state == "running" else state,
            st.events_archived,
            st.events_skipped,
            st.events_quarantined,
            st.checkpoints_verified,
            st.segments_written,
            st.objects_written,
            st.runs_finished,
            sum(len(p.pending) for p in self.parts.values()),
        )
