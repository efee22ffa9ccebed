"""Where the archiver puts what a checkpoint lists but it could not archive as run history.

No record stops a partition's log (docs/log.md, "Holes"): leaves before a checkpoint's start
that were never read become a ``gone`` hole (the tree goes on from the compact tree the
record carries), listed leaves no record was read for an ``unread`` one, and the leaves of
records quarantined when read a ``quarantined`` one; a checkpoint of another generation of
the partition's log switches to that log (docs/log.md, "A new cluster is a new log"). An
object the checkpoint admission holds (``place``, ``switch``), kept apart so that admission
reads as the decision and this as where the leaves it could not archive go.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime

from tracevault.archive import LOST, Hole, ObjectStore, hole_key
from tracevault.config import Settings
from tracevault.errors import LogError, NotFoundError
from tracevault.services.archiver._flusher import Flusher
from tracevault.services.archiver._logwriter import LeafRecord, PartitionLog
from tracevault.services.archiver._state import ArchiverStats
from tracevault.services.archiver._state import Part as _Part
from tracevault.services.archiver._state import Pending as _Pending
from tracevault.transparency import (
    CompactTree,
    NoteVerifier,
    VerifiedCheckpoint,
    is_partition_origin,
)

__all__ = ["HolePlacer"]

log = logging.getLogger(__name__)


class HolePlacer:
    """Places the holes of a verified checkpoint in a partition's log, and switches logs."""

    def __init__(
        self,
        *,
        settings: Settings,
        store: ObjectStore,
        stats: ArchiverStats,
        clock: Callable[[], datetime],
        verifiers: Sequence[NoteVerifier],
        flusher: Flusher,
    ) -> None:
        self._settings = settings
        self._store = store
        self._stats = stats
        self._clock = clock
        self._verifiers = verifiers
        self._flusher = flusher

    def switch(self, part: _Part, origin: str) -> PartitionLog:
        """Go on with the partition's log of ``origin``, another generation of it.

        A sealed topic holds one log per incarnation; the one before generations can be
        followed, in the same partition, by checkpoints of the same tree under a generation
        origin (docs/log.md, "A new cluster is a new log"). The log so far is flushed and
        written first, so the one opened is as archived."""
        plog = part.log
        if not is_partition_origin(
            origin, self._settings.log_origin, self._settings.topic_prefix, plog.partition
        ):
            raise LogError(
                f"checkpoint is for log {origin!r}, expected {plog.origin!r} (or another "
                "generation of it)"
            )
        if plog.unflushed:
            self._flusher.flush(part)
        self._flusher.wait(part)
        part.prev = plog
        part.log = PartitionLog.open(
            self._store, plog.prefix, origin, plog.partition, self._verifiers
        )
        log.info("partition %d: checkpoints of log %s follow", plog.partition, origin)
        return part.log

    def place(
        self,
        part: _Part,
        vc: VerifiedCheckpoint,
        prefix: CompactTree,
        new: list[tuple[int, _Pending]],
        where: str,
    ) -> None:
        """Extend the log to ``vc``'s size when not every listed leaf is a record read here.

        Leaves before ``vc.start`` were never seen: a ``gone`` hole (the log read so far is
        flushed first, so the checkpoint where it ends is archived, and the tree goes on from
        the compact tree ``vc`` carries). A listed leaf with no record read is the leaf of a
        quarantined record read in its place (between the records of the leaves either side),
        else an ``unread`` hole. Each is recorded and alerted (``_hole``)."""
        now = self._clock().isoformat()
        runs: dict[str, int] = {}
        for _, q in new:
            if q.offset not in part.marked and q.rec.seq > 0:
                runs.setdefault(q.rec.run_id, q.rec.seq)
        self._skipped(part, vc, prefix, runs, now, where)
        self._listed(part, vc, new, runs, now, where)

    def _skipped(  # noqa: PLR0917 - one checkpoint's context, every field named by the caller
        self,
        part: _Part,
        vc: VerifiedCheckpoint,
        prefix: CompactTree,
        runs: dict[str, int],
        now: str,
        where: str,
    ) -> None:
        """The leaves before ``vc.start`` the log read so far lacks: archived as the log of
        the partition's previous generation (``continued``) or never seen (``gone``)."""
        plog = part.log
        prev = part.prev
        if (
            vc.start > plog.size == 0
            and prev is not None
            and prev.size == vc.start
            and prev.tree.root() == prefix.root()
        ):
            self._hole(
                plog,
                Hole(
                    "continued",
                    plog.origin,
                    plog.partition,
                    0,
                    vc.start,
                    now,
                    f"leaves 0..{vc.start - 1} are archived as log {prev.origin} ({prev.log}), "
                    f"whose tree this one goes on with from the signed checkpoint record {where}",
                    tree=[h.hex() for h in prefix.hashes],
                ),
            )
            plog.skip_to(vc.start, prefix)
        elif vc.start > plog.size:
            if plog.unflushed:
                self._flusher.flush(part)
            first = plog.size
            self._hole(
                plog,
                Hole(
                    "gone",
                    plog.origin,
                    plog.partition,
                    first,
                    vc.start,
                    now,
                    f"the signed checkpoint record {where} starts at leaf {vc.start} but the "
                    f"log read so far ends at {first}: the sealed records of leaves "
                    f"{first}..{vc.start - 1} were gone from the topic before the archiver "
                    "read them (retention, DeleteRecords, a lost broker); the log goes on "
                    "from the compact tree that record carries",
                    runs,
                    [h.hex() for h in prefix.hashes],
                ),
            )
            plog.skip_to(vc.start, prefix)

    def _listed(  # noqa: PLR0917 - one checkpoint's context, every field named by the caller
        self,
        part: _Part,
        vc: VerifiedCheckpoint,
        new: list[tuple[int, _Pending]],
        runs: dict[str, int],
        now: str,
        where: str,
    ) -> None:
        """The leaves ``vc`` lists from where the log stands: records read here extend it,
        a quarantined record read between those of the leaves either side takes its leaf,
        and a run of leaves with neither is an ``unread`` hole."""
        plog = part.log
        lo, end = plog.size, vc.checkpoint.size
        at = {i: p for i, p in new}
        after = sorted(at)  # leaf -> the offset of its record, to place quarantined ones
        opaque = sorted(part.opaque)
        j = k = 0
        prev_off = -1
        recs: list[LeafRecord] = []
        unread_from: int | None = None
        for i in range(lo, end):
            p = at.get(i)
            if p is not None and p.offset not in part.marked:
                if unread_from is not None:
                    self._unread(plog, unread_from, i, vc, runs, now, where)
                    unread_from = None
                recs.append(p.rec)
                prev_off = p.offset
                continue
            if recs:
                plog.extend(recs)
                recs = []
            h = vc.leaves[i - vc.start]
            if p is not None:  # a record read, but no run history: quarantined
                reason, qkey = part.marked[p.offset]
                prev_off = p.offset
                if unread_from is not None:  # the unread leaves before it end here
                    self._unread(plog, unread_from, i, vc, runs, now, where)
                    unread_from = None
                self._quarantined(plog, i, p.rec.leaf, h, reason, qkey, p, now)
                continue
            while k < len(after) and after[k] < i:
                k += 1
            next_off = at[after[k]].offset if k < len(after) else 1 << 63
            while j < len(opaque) and opaque[j][0] < prev_off:
                j += 1
            if j < len(opaque) and opaque[j][0] < next_off:
                off, reason, qkey = opaque[j]
                j += 1
                prev_off = off
                if unread_from is not None:
                    self._unread(plog, unread_from, i, vc, runs, now, where)
                    unread_from = None
                self._quarantined(plog, i, b"", h, reason, qkey, None, now, off)
                continue
            if unread_from is None:
                unread_from = i
        if recs:
            plog.extend(recs)
        if unread_from is not None:
            self._unread(plog, unread_from, end, vc, runs, now, where)

    def _unread(  # noqa: PLR0917 - one hole, every field named by the caller
        self,
        plog: PartitionLog,
        first: int,
        end: int,
        vc: VerifiedCheckpoint,
        runs: dict[str, int],
        now: str,
        where: str,
    ) -> None:
        """Leaves ``first .. end-1`` that ``vc`` lists and no record read here has."""
        self._hole(
            plog,
            Hole(
                "unread",
                plog.origin,
                plog.partition,
                first,
                end,
                now,
                f"the signed checkpoint record {where} lists leaves {first}..{end - 1} but no "
                "sealed record read since the last checkpoint has their leaf hashes: the "
                "records were gone from the topic before the archiver read them",
                runs,
            ),
        )
        plog.extend_blank(vc.leaves[first - vc.start : end - vc.start], [b""] * (end - first))

    def _quarantined(  # noqa: PLR0917 - one leaf, every field named by the caller
        self,
        plog: PartitionLog,
        index: int,
        leaf: bytes,
        leaf_hash: bytes,
        reason: str,
        qkey: str,
        p: _Pending | None,
        now: str,
        offset: int | None = None,
    ) -> None:
        runs = {} if p is None else {p.rec.run_id: p.rec.seq}
        self._hole(
            plog,
            Hole(
                "quarantined",
                plog.origin,
                plog.partition,
                index,
                index + 1,
                now,
                f"leaf {index} is the sealed record at offset "
                f"{p.offset if p is not None else offset}, which cannot be archived as run "
                f"history ({reason}); its bytes are in {qkey}",
                runs,
                reason=reason,
                quarantine_key=qkey,
                topic_offset=p.offset if p is not None else offset,
            ),
        )
        plog.extend_blank([leaf_hash], [leaf])

    def _hole(self, plog: PartitionLog, hole: Hole) -> None:
        """Record ``hole`` with the partition's next flush (once: a flush redone after a
        crash keeps the first object), count it, and alert when records were lost."""
        key = hole_key(plog.log, hole.first, hole.end, hole.kind)
        try:
            self._store.head(key)
        except NotFoundError:
            plog.add_hole(key, hole)
        st = self._stats
        n = hole.end - hole.first
        if hole.kind not in LOST:
            if hole.kind == "quarantined":
                st.leaves_quarantined += n
            log.warning("archiver: %s (recorded as %s)", hole.describe(), key)
            return
        st.holes += 1
        st.leaves_lost += n
        log.error(
            "ALERT archiver: hole in the log of partition %d: %s; runs seen right after it: "
            "%s; recorded as %s in %s; archiving goes on",
            plog.partition,
            hole.describe(),
            ", ".join(f"{r} (from seq {q})" for r, q in sorted(hole.runs.items())[:20]) or "none",
            key,
            self._store.url,
        )
