"""The archiver's checkpoint admission: verify a checkpoint record, then archive what it lists.

A checkpoint record is decoded and verified (a trusted log key's signature, the origin of
this partition's log, the listed leaves growing the compact tree to the signed root), refused
when it is older than one the partition presented before it (a rollback), and checked to go
on with the log as archived (``_continues``). The pending records are matched greedily, in
order, against the listed leaf hashes (``_match``): matched ones extend the log, the others
are quarantined ``not-in-log``; leaves not read here become holes (``_holeplace``).
Every refusal goes through :class:`Refusals`: one quarantine object per record, durable
before its offset can be committed.

An object the per-event path holds and hands each checkpoint record to, so that what decides
which records enter the archive sits in one room, apart from the per-event path and the Kafka
session.
"""

from __future__ import annotations

import base64
import logging
import time
from collections.abc import Sequence

from confluent_kafka import Message

from tracevault.errors import LogError
from tracevault.services.archiver._flusher import Flusher
from tracevault.services.archiver._holeplace import HolePlacer
from tracevault.services.archiver._logwriter import PartitionLog
from tracevault.services.archiver._metrics import ArchiverMetrics
from tracevault.services.archiver._quarantine import QuarantineReason as Why
from tracevault.services.archiver._refusals import Refusals
from tracevault.services.archiver._state import ArchiverStats
from tracevault.services.archiver._state import Part as _Part
from tracevault.services.archiver._state import Pending as _Pending
from tracevault.transparency import (
    Checkpoint,
    CheckpointRecord,
    CompactTree,
    NoteVerifier,
    VerifiedCheckpoint,
)

__all__ = ["CheckpointAdmission"]

# the archiver logs under one name wherever its code sits (log filters)
log = logging.getLogger("tracevault.services.archiver._archiver")


class CheckpointAdmission:
    """Verifies a partition's checkpoint records and extends its log with what they list."""

    def __init__(
        self,
        *,
        topic: str,
        verifiers: Sequence[NoteVerifier],
        stats: ArchiverStats,
        metrics: ArchiverMetrics,
        refusals: Refusals,
        holes: HolePlacer,
        flusher: Flusher,
        max_events: int,
        max_bytes: int,
    ) -> None:
        self._topic = topic
        self._verifiers = verifiers
        self._stats = stats
        self._metrics = metrics
        self._refuse = refusals.refuse
        self._holes = holes
        self._flusher = flusher
        self._max_events = max_events
        self._max_bytes = max_bytes

    def checkpoint(self, part: _Part, msg: Message) -> None:
        """Verify one checkpoint record and resolve the pending records against it.

        Nothing it lists stops the log (docs/log.md, "Holes"): leaves before its start that
        were never read (records gone from the topic) become a ``gone`` hole and the log
        goes on from the compact tree it carries; listed leaves no record read has become
        an ``unread`` hole, or the leaves of quarantined records."""
        plog = part.log
        where = f"{self._topic}[{plog.partition}]@{msg.offset()}"
        started = time.perf_counter()
        try:
            cpr = CheckpointRecord.decode(msg.value() or b"")
            vc = cpr.verify(self._verifiers)
            if vc.checkpoint.origin != plog.origin:
                plog = self._holes.switch(part, vc.checkpoint.origin)
            self._not_stale(part, vc.checkpoint, msg.offset() or 0)
            size = plog.size
            _continues(plog, cpr, vc)
            matched, unmatched = _match(part.pending, vc.leaves, vc.start)
        except LogError as exc:
            detail = (
                f"checkpoint record {where} failed verification: {exc}; the "
                f"{len(part.pending)} record(s) read since the last verified checkpoint stay "
                "pending (never archived unless a verified checkpoint lists them)"
            )
            if "forked" in str(exc) or "rolled back" in str(exc):
                log.error("ALERT archiver: %s", detail)
            self._refuse(msg, Why.BAD_CHECKPOINT, detail)
            return
        self._stats.checkpoints_verified += 1
        self._metrics.verify_seconds.observe(time.perf_counter() - started)
        marked = part.marked
        for p in unmatched:
            r = p.rec
            if p.offset in marked:
                continue  # quarantined when read, with its own reason
            self._refuse(
                msg,
                Why.NOT_IN_LOG,
                f"run {r.run_id!r} seq {r.seq} (leaf hash {r.leaf_hash.hex()[:16]}…) is not "
                f"listed by the signed checkpoint {vc.checkpoint.origin}@{vc.checkpoint.size} "
                f"(record {where}) that covers it: another producer appended it; it is never "
                "archived as run history",
                r.run_id,
                r.seq,
                offset=p.offset,
                key=p.key,
                value=r.value,
            )
        new = [(i, p) for i, p in matched if i >= size]
        self._stats.events_skipped += len(matched) - len(new)
        end = vc.checkpoint.size
        if end > size and not plog.unflushed:
            part.opened = time.monotonic()
        if not marked and vc.start <= size and [i for i, _ in new] == list(range(size, end)):
            plog.extend([p.rec for _, p in new])  # the common case: every listed leaf read
        elif end > size:
            self._holes.place(part, vc, CompactTree(vc.start, list(cpr.prefix)), new, where)
        part.pending = []
        part.marked = {}
        part.opaque = []
        part.ready_offset = (msg.offset() or 0) + 1
        if end > plog.archived or plog.note is None:
            plog.note, plog.note_size = vc.note, end
        if end > size:
            plog.root = vc.checkpoint.root
            plog.tree = vc.tree
        if not plog.unflushed and not part.flights:
            part.durable_offset = part.ready_offset
        elif plog.unflushed >= self._max_events or plog.unflushed_bytes >= self._max_bytes:
            self._flusher.flush(part)

    @staticmethod
    def _not_stale(part: _Part, cp: Checkpoint, offset: int) -> None:
        """Refuse a checkpoint smaller than one the partition presented before it.

        Why: a genuine log only grows, so a record later in the partition that signs a
        smaller size (an exact copy of an old checkpoint record, or another, smaller tree)
        is the log key's holder presenting an older view as the newest: a rollback. Nothing
        of it would be archived anyway; this makes it an ALERT rather than a silent no-op."""
        head = part.head
        if head is not None and head[0] == cp.origin and offset > head[1] and cp.size < head[2]:
            raise LogError(
                f"it signs {cp.origin}@{cp.size} (root "
                f"{base64.b64encode(cp.root).decode()}) at offset {offset}, after the "
                f"checkpoint record of {cp.origin}@{head[2]} at offset {head[1]}: an old "
                "checkpoint replayed, or the log rolled back"
            )
        if head is None or head[0] != cp.origin or offset > head[1]:
            part.head = (cp.origin, offset, cp.size)


def _match(
    pending: list[_Pending], leaves: tuple[bytes, ...], start: int
) -> tuple[list[tuple[int, _Pending]], list[_Pending]]:
    """Greedy in-order matching of pending records to listed leaf hashes.

    Each record takes the next listed leaf at or after the last match with its hash; listed
    leaves skipped over are ones this reader did not see (read before a restart); a record
    with no such leaf is not in the log.
    """
    matched: list[tuple[int, _Pending]] = []
    unmatched: list[_Pending] = []
    j = 0
    for p in pending:
        h = p.rec.leaf_hash
        if j < len(leaves) and leaves[j] == h:
            k = j
        else:
            try:
                k = leaves.index(h, j)
            except ValueError:
                unmatched.append(p)
                continue
        matched.append((start + k, p))
        j = k + 1
    return matched, unmatched


def _continues(plog: PartitionLog, cpr: CheckpointRecord, vc: VerifiedCheckpoint) -> None:
    """A verified checkpoint extends the partition's log as archived, or ``LogError``: its
    tree at its start is the log's, and one the archive already passed (a re-read after a
    restart) has the archived log as a prefix."""
    size = plog.size
    if vc.start == size and CompactTree(vc.start, list(cpr.prefix)).root() != plog.root:
        raise LogError(
            f"its tree at {vc.start} leaves is not the one this partition's log has "
            "(the log forked)"
        )
    if vc.start < size <= vc.checkpoint.size:
        tree = plog.tree.copy()
        tree.extend(vc.leaves[size - vc.start :])
        if tree.root() != vc.checkpoint.root:
            raise LogError(
                f"the archived log of {size} leaves is not a prefix of it (the log "
                "forked, or the archive was changed)"
            )
