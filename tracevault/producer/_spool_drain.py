"""Draining a spool directory from outside the agent: ``tracevault spool drain`` / ``status``.

Segments still held by a live Publisher (its ``flock``, held until it has drained them,
closed segments included) are reported as ``in use`` and left alone: that process drains
them itself, and a segment sent by two owners would reach Kafka twice. A segment its owner
deletes while this looks at it was delivered, and is left out of the report. Everything
else is sent oldest first, each segment in file order, with the cursor committed after every
acknowledged batch, so an interrupted drain resumes where it stopped and never reorders a run.
Unlike the Publisher's own drain, this command must end: a batch unacknowledged for
``timeout`` is purged, and a purged record the broker wrote all the same reaches ``raw``
twice when sent again (the same bytes, which the sequencer drops; ``_drain.py``).

A torn tail (a writer killed mid-append) is not a problem: ``status`` reports its bytes in
``torn_bytes`` and says it is cut when drained; ``drain`` cuts it, logs a warning, reports the
bytes cut and sends the records before it (docs/design.md, "The spool").
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from confluent_kafka import Producer

from tracevault.config import Settings
from tracevault.producer._delivery import producer_config
from tracevault.producer._drain import TooOld, drain_batch, rejected_sink
from tracevault.producer._spool import SpoolSegment, list_segments

__all__ = ["DrainReport", "SegmentReport", "drain_spool", "spool_status"]

logger = logging.getLogger(__name__)

Status = Literal["drained", "pending", "in use", "corrupt", "unreadable", "failed"]


@dataclass(frozen=True, slots=True)
class SegmentReport:
    """One segment: its topic, how many events were sent now and how many remain."""

    path: str
    topic: str
    status: Status
    delivered: int = 0
    remaining: int = 0
    detail: str = ""
    rejected: int = 0
    #: bytes of a torn tail: found (``status``) or cut (``drain``)
    torn_bytes: int = 0


@dataclass(frozen=True, slots=True)
class DrainReport:
    """The result of :func:`drain_spool` or :func:`spool_status` for one spool directory."""

    spool_dir: str
    segments: tuple[SegmentReport, ...] = field(default_factory=tuple)

    @property
    def delivered(self) -> int:
        return sum(s.delivered for s in self.segments)

    @property
    def remaining(self) -> int:
        return sum(s.remaining for s in self.segments)

    @property
    def rejected(self) -> int:
        """Events not sent because they were older than ``spool_max_age_s``."""
        return sum(s.rejected for s in self.segments)

    @property
    def torn_bytes(self) -> int:
        return sum(s.torn_bytes for s in self.segments)

    @property
    def problems(self) -> tuple[SegmentReport, ...]:
        return tuple(s for s in self.segments if s.status in ("corrupt", "unreadable", "failed"))


def _count(seg: SpoolSegment, start: int) -> int:
    return sum(1 for _ in seg.records(start))


def _open(seg: SpoolSegment) -> SegmentReport | Literal["gone"] | None:
    """Lock and read ``seg``'s header, or say why it cannot be drained now (``gone``: its
    owner delivered and deleted it meanwhile)."""
    try:
        if not seg.try_lock():
            return SegmentReport(str(seg.path), "", "in use", detail="held by a live Publisher")
        seg.read_header()
    except FileNotFoundError:
        seg.unlock()
        return "gone"
    except (OSError, ValueError) as exc:
        seg.unlock()
        return SegmentReport(str(seg.path), "", "unreadable", detail=str(exc))
    return None


def _pending(seg: SpoolSegment, remaining: int) -> SegmentReport:
    """What ``status`` says of a segment it just counted."""
    bad = seg.corruption
    if bad is None:
        return SegmentReport(str(seg.path), seg.topic, "pending", remaining=remaining)
    where = f"{bad.reason} at byte {bad.offset}"
    if not bad.tail:
        return SegmentReport(str(seg.path), seg.topic, "corrupt", remaining=remaining, detail=where)
    torn = seg.path.stat().st_size - bad.offset
    return SegmentReport(
        str(seg.path),
        seg.topic,
        "pending",
        remaining=remaining,
        detail=f"torn tail of {torn} bytes ({where}): cut when drained",
        torn_bytes=torn,
    )


def spool_status(settings: Settings) -> DrainReport:
    """What waits in ``settings.spool_dir``, without sending anything."""
    reports = []
    for seg in list_segments(Path(settings.spool_dir)):
        blocked = _open(seg)
        if isinstance(blocked, str):  # gone
            continue
        if blocked is not None:
            reports.append(blocked)
            continue
        try:
            remaining = _count(seg, seg.cursor())
            reports.append(_pending(seg, remaining))
        finally:
            seg.unlock()
    return DrainReport(str(settings.spool_dir), tuple(reports))


def drain_spool(
    settings: Settings,
    *,
    timeout: float = 30.0,
    batch: int = 5000,
    on_total: Callable[[int], None] | None = None,
    on_progress: Callable[[int], None] | None = None,
) -> DrainReport:
    """Send every spooled event not held by a live process to Kafka, oldest first.

    ``timeout`` bounds the wait for each batch's acknowledgements; a segment whose batch is
    not acknowledged in time is reported ``failed`` (nothing is lost: run again later).
    ``on_total`` receives the number of events to send, ``on_progress`` each delivered count.
    """
    segments = list_segments(Path(settings.spool_dir))
    opened: list[tuple[SpoolSegment, int, int]] = []
    reports: list[SegmentReport] = []
    for seg in segments:
        blocked = _open(seg)
        if isinstance(blocked, str):  # gone
            continue
        if blocked is not None:
            reports.append(blocked)
            continue
        try:
            cut = seg.repair_tail()
        except OSError as exc:
            seg.unlock()
            reports.append(SegmentReport(str(seg.path), seg.topic, "unreadable", detail=str(exc)))
            continue
        opened.append((seg, _count(seg, seg.cursor()), cut))
    if on_total is not None:
        on_total(sum(n for _, n, _ in opened))
    if not opened:
        return DrainReport(str(settings.spool_dir), tuple(reports))
    producer = Producer(producer_config(settings))
    try:
        for seg, total, cut in opened:
            too_old = rejected_sink(settings, seg.topic)
            report = _drain_segment(
                producer,
                seg,
                total,
                timeout=timeout,
                batch=batch,
                on_progress=on_progress,
                too_old=too_old,
            )
            if cut:
                torn = f"cut a torn tail of {cut} bytes (a crash mid-write)"
                detail = f"{torn}; {report.detail}" if report.detail else torn
                report = dataclasses.replace(report, torn_bytes=cut, detail=detail)
            reports.append(report)
            too_old.writer.close()
    finally:
        for seg, _, _ in opened:
            seg.unlock()
    return DrainReport(str(settings.spool_dir), tuple(reports))


def _drain_segment(
    producer: Producer,
    seg: SpoolSegment,
    total: int,
    *,
    timeout: float,
    batch: int,
    on_progress: Callable[[int], None] | None,
    too_old: TooOld,
) -> SegmentReport:
    offset = seg.cursor()
    sent = 0
    while True:
        result = drain_batch(
            producer, seg, start=offset, batch=batch, timeout=timeout, too_old=too_old
        )
        offset = result.offset
        sent += result.delivered
        if on_progress is not None and result.delivered:
            on_progress(result.delivered)
        if not result.complete:
            return SegmentReport(
                str(seg.path),
                seg.topic,
                "failed",
                sent,
                total - sent - too_old.count,
                result.error or "",
                too_old.count,
            )
        if result.reached_end:
            break
    if seg.corruption is not None:
        c = seg.corruption
        return SegmentReport(
            str(seg.path),
            seg.topic,
            "corrupt",
            sent,
            0,
            f"{c.reason} at byte {c.offset}; the bytes after it were not sent: inspect or "
            "move the file",
            too_old.count,
        )
    seg.remove()
    logger.info("spool segment %s delivered (%s events) and removed", seg.path, sent)
    detail = (
        f"{too_old.count} event(s) older than spool_max_age_s kept in {too_old.writer.path}"
        if too_old.count
        else ""
    )
    return SegmentReport(str(seg.path), seg.topic, "drained", sent, 0, detail, too_old.count)
