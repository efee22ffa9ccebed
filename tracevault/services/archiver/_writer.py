"""Writing runs into the archive: the archive is its own checkpoint.

Per segment, in this order (each step a write-once ``put``; a crash between any two leaves
nothing a reader takes as complete, and the next start finishes the job):

1. ``index/days/<day>/<run>`` for each UTC day the segment's events were sealed on;
2. the segment (deterministic bytes, so re-writing it after a crash is a no-op);
3. its receipt. Only a receipted segment counts (``read_run_objects``);
4. at run end, the final receipt.

Each receipt states the retain-until the writer put on the objects it covers (one value per
segment: the day-index markers, the segment and its receipt share it), so retention can be
read from content instead of from the store's metadata (docs/design.md, "Archive").

``cursor(run_id)`` reads the archive back with one listing of ``runs/<run>/``: the next seq
to archive, the chain head, whether the run is finished. It repairs what a crash left: a
segment without receipt is verified and receipted; a last segment ending in RUN_FINISHED
without a final receipt gets one.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta

from tracevault.archive import ObjectStore, encode_segment, list_run, read_segment, utc_now
from tracevault.archive.layout import (
    FinalReceipt,
    SegmentReceipt,
    day_index_key,
    day_index_marker,
    final_key,
    parse_segment_key,
    receipt_key,
    segment_key,
)
from tracevault.chain import genesis, link
from tracevault.config import MIN_RETENTION_DAYS
from tracevault.errors import ArchiveError, RetentionError
from tracevault.schemas import SealedEvent
from tracevault.services.archiver._sealed import Sealed, finishes_run

__all__ = ["ArchiveWriter", "RunCursor"]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class RunCursor:
    """What the archive already holds of one run."""

    run_id: str
    next_seq: int = 0
    last_hash: bytes = b""
    finished: bool = False
    segments: list[str] = field(default_factory=list)
    days: set[date] = field(default_factory=set)


def _day(micros: int) -> date:
    return datetime.fromtimestamp(micros / 1_000_000, tz=UTC).date()


class ArchiveWriter:
    """Writes segments, receipts and final receipts with retain-until = now + retention."""

    def __init__(
        self,
        store: ObjectStore,
        *,
        retention_days: int = MIN_RETENTION_DAYS,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        if retention_days < MIN_RETENTION_DAYS:
            raise RetentionError(
                f"retention_days={retention_days} is under {MIN_RETENTION_DAYS} days; EU AI Act "
                "Art. 19 requires automatically generated logs to be kept at least six months"
            )
        self.store = store
        self.retention = timedelta(days=retention_days)
        self.clock = clock

    def _until(self) -> datetime:
        return self.clock() + self.retention

    def _now_iso(self) -> str:
        return self.clock().isoformat()

    # -- reading back ---------------------------------------------------------------------

    def cursor(self, run_id: str) -> RunCursor:
        """The run's archived state, from one listing; repairs a crash's leftovers."""
        listing = list_run(self.store, run_id)
        cur = RunCursor(run_id, last_hash=genesis(run_id), finished=listing.has_final)
        for key, first, last in listing.segments:
            if first != cur.next_seq:
                raise ArchiveError(
                    f"archive of run {run_id!r} is not contiguous: {key} starts at seq {first}, "
                    f"expected {cur.next_seq}. Operator action: run `tracevault replay verify` "
                    "on the run and restore the missing segment before restarting the archiver"
                )
            cur.segments.append(key)
            cur.next_seq = last + 1
        if cur.segments:
            first, last = listing.segments[-1][1:]
            rkey = receipt_key(run_id, first, last)
            cur.last_hash = bytes.fromhex(
                SegmentReceipt.from_json(self.store.get(rkey), rkey).last_hash
            )
        last_event: SealedEvent | None = None
        for key in listing.unreceipted:
            last_event = self._repair_receipt(cur, key) or last_event
        if not cur.finished and cur.segments:
            if last_event is None:
                last_key = cur.segments[-1]
                last_event = read_segment(self.store.get(last_key), key=last_key)[-1]
            if finishes_run(last_event.raw):
                log.warning("run %s: writing the final receipt a crash left unwritten", run_id)
                self._write_final(cur)
        return cur

    def _repair_receipt(self, cur: RunCursor, key: str) -> SealedEvent | None:
        """Receipt a segment a crash left without one, after checking it continues the run."""
        data = self.store.get(key)
        events = read_segment(data, key=key)
        if (
            not events
            or events[0].seq != cur.next_seq
            or parse_segment_key(key) != (events[0].seq, events[-1].seq)
        ):
            # Only the segment right after the last receipted one can be unreceipted.
            raise ArchiveError(
                f"segment {key} has no receipt and does not continue run {cur.run_id!r} at "
                f"seq {cur.next_seq}. Operator action: verify the run before restarting"
            )
        prev = cur.last_hash
        # The segment keeps the lock its first writer gave it; the receipt states that lock
        # (and takes it), so content and metadata agree.
        until = self.store.head(key).retain_until or self._until()
        for i, ev in enumerate(events):
            if ev.seq != cur.next_seq + i or ev.prev_hash != prev or link(prev, ev.raw) != ev.hash:
                raise ArchiveError(
                    f"segment {key} (no receipt) breaks run {cur.run_id!r} at seq {ev.seq}"
                )
            prev = ev.hash
        log.warning("run %s: receipting %s, left unreceipted by a crash", cur.run_id, key)
        self._write_receipt(
            cur,
            key,
            data,
            first=events[0].seq,
            last=events[-1].seq,
            prev=events[0].prev_hash,
            h=prev,
            until=until,
        )
        return events[-1]

    # -- writing --------------------------------------------------------------------------

    def write_segment(self, cur: RunCursor, events: Sequence[Sealed]) -> str:
        """Archive ``events`` (contiguous, continuing ``cur``) as one segment + receipt."""
        first, last = events[0].seq, events[-1].seq
        if first != cur.next_seq or last - first + 1 != len(events):
            raise ArchiveError(
                f"run {cur.run_id!r}: segment {first}..{last} of {len(events)} events does not "
                f"continue the archive at seq {cur.next_seq}"
            )
        until = self._until()
        for day in {_day(events[0].sealed_at), _day(events[-1].sealed_at)} - cur.days:
            self.store.put(
                day_index_key(day, cur.run_id), day_index_marker(cur.run_id), retain_until=until
            )
            cur.days.add(day)
        key = segment_key(cur.run_id, first, last)
        data = encode_segment(cur.run_id, first, (e.body for e in events))
        self.store.put(key, data, retain_until=until)
        self._write_receipt(
            cur,
            key,
            data,
            first=first,
            last=last,
            prev=events[0].prev_hash,
            h=events[-1].hash,
            until=until,
        )
        if events[-1].finishes_run:
            self._write_final(cur)
        return key

    def _write_receipt(
        self,
        cur: RunCursor,
        key: str,
        data: bytes,
        *,
        first: int,
        last: int,
        prev: bytes,
        h: bytes,
        until: datetime,
    ) -> None:
        receipt = SegmentReceipt(
            run_id=cur.run_id,
            segment=key,
            sha256=hashlib.sha256(data).hexdigest(),
            first_seq=first,
            last_seq=last,
            count=last - first + 1,
            first_prev_hash=prev.hex(),
            last_hash=h.hex(),
            created_at=self._now_iso(),
            retain_until=until.astimezone(UTC).isoformat(),
        )
        self.store.put(receipt_key(cur.run_id, first, last), receipt.to_json(), retain_until=until)
        cur.segments.append(key)
        cur.next_seq = last + 1
        cur.last_hash = h

    def _write_final(self, cur: RunCursor) -> None:
        until = self._until()
        final = FinalReceipt(
            run_id=cur.run_id,
            count=cur.next_seq,
            last_seq=cur.next_seq - 1,
            last_hash=cur.last_hash.hex(),
            segments=list(cur.segments),
            created_at=self._now_iso(),
            retain_until=until.astimezone(UTC).isoformat(),
        )
        self.store.put(final_key(cur.run_id), final.to_json(), retain_until=until)
        cur.finished = True
        log.info(
            "run %s archived: %d events in %d segments", cur.run_id, cur.next_seq, len(cur.segments)
        )
