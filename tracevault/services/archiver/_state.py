"""The archiver's state per partition, the partitions it holds, and its counters."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import NamedTuple

from tracevault.archive import ObjectStore
from tracevault.config import Settings
from tracevault.services.archiver._logwriter import FlushJob, LeafRecord, PartitionLog
from tracevault.transparency import NoteVerifier, log_origin

__all__ = ["ArchiverStats", "Part", "Partitions", "Pending"]


@dataclass(slots=True)
class ArchiverStats:
    """Counters since start (also logged on shutdown)."""

    events_archived: int = 0
    events_skipped: int = 0
    segments_written: int = 0  # flushes of a partition's log
    objects_written: int = 0
    runs_finished: int = 0
    checkpoints_verified: int = 0
    events_quarantined: int = 0
    holes: int = 0  # ranges of leaves whose records were gone before they were read
    leaves_lost: int = 0  # ... and their leaves
    leaves_quarantined: int = 0  # leaves in the tree whose records are no run's history
    quarantined: dict[str, int] = field(default_factory=dict)  # by reason
    first_message_at: float | None = None  # time.monotonic() of the first message consumed
    last_write_at: float | None = None  # time.monotonic() after the last flush


class Pending(NamedTuple):
    """A sealed event read since the last verified checkpoint of its partition."""

    offset: int
    key: bytes | None
    rec: LeafRecord


@dataclass(slots=True)
class Part:
    """The main thread's view of one assigned partition."""

    log: PartitionLog
    pending: list[Pending] = field(default_factory=list)
    ready_offset: int | None = None  # after the last verified checkpoint record
    durable_offset: int | None = None  # after the last flushed (or already archived) one
    # records read since the last checkpoint that were quarantined (docs/log.md, "Holes"):
    # offset -> (reason, quarantine key) of those in ``pending`` (a leaf hash is known) and
    # (offset, reason, quarantine key) of those without one (undecodable)
    marked: dict[int, tuple[str, str]] = field(default_factory=dict)
    prev: PartitionLog | None = None  # the log of the partition before the last switch
    # (origin, offset, size) of the newest checkpoint record verified in this session: a
    # smaller one at a higher offset was presented after it, an ALERT (docs/log.md,
    # "Archive"); a re-read after a rebalance comes at a lower offset
    head: tuple[str, int, int] | None = None
    opaque: list[tuple[int, str, str]] = field(default_factory=list)
    opened: float = 0.0  # when the first unflushed leaf was verified
    # flushes taken and not yet accounted for, oldest first: (future of (objects written,
    # when the last was), job, ready_offset when it was taken); each is written only after
    # the one before it (_after)
    flights: list[tuple[Future[tuple[int, float]], FlushJob, int | None]] = field(
        default_factory=list
    )


class Partitions:
    """The assigned partitions' state, each opened (its log read back from the archive) when
    its first record comes; ``generation`` is the sealed topic's, learnt per session."""

    def __init__(
        self,
        settings: Settings,
        store: ObjectStore,
        verifiers: Sequence[NoteVerifier],
    ) -> None:
        self._settings = settings
        self._store = store
        self._verifiers = verifiers
        self.generation = ""
        self.parts: dict[int, Part] = {}

    def get(self, partition: int) -> Part:
        part = self.parts.get(partition)
        if part is None:
            prefix = self._settings.topic_prefix
            origin = log_origin(self._settings.log_origin, prefix, partition, self.generation)
            part = Part(PartitionLog.open(self._store, prefix, origin, partition, self._verifiers))
            self.parts[partition] = part
        return part
