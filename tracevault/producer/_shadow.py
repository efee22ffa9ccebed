"""Copies on disk of the events librdkafka holds while Kafka stops acknowledging them.

A broker that is shutting down, hangs or has just died keeps its connections for a while:
librdkafka reports nothing, and the Publisher spools only after ``spool_after_ms`` (or when
every broker is reported down). Until then the agent's events live only in memory. So the
Publisher's background thread keeps the most recently produced events (``recent``) and, as
soon as no acknowledgement has arrived for ``SHADOW_AFTER_S`` while events are outstanding,
appends the unacknowledged ones to a *shadow* segment of the spool (the ordinary format,
``fsync``'d), and then every later one, while the stall lasts.

- Kafka acknowledges again: once every outstanding event is newer than the shadow, the
  shadow is deleted (under its ``flock``, so no drainer takes it meanwhile). Nothing of it
  is ever sent by this process: librdkafka delivers the originals, exactly once.
- The Publisher starts spooling: what librdkafka never sent is purged into the spool; the
  requests in flight stay with librdkafka, not purged (they may be written already; sent
  again from the spool they would reach ``raw`` twice). The shadow is written at once,
  kept while librdkafka delivers them, and deleted once it holds none; the spool is
  drained only after that. If the Publisher closes before (Kafka still away) they are
  purged, and the shadow, older than any spool segment, is left for a drainer (a purged
  event it lacks is spooled).
- The process dies: the shadow is an ordinary orphan segment, older than any spool segment
  after it, and is drained first by ``tracevault spool drain`` or the next Publisher. It can
  hold events Kafka did write (acknowledged just before the stall, or written without the
  acknowledgement arriving); they arrive in ``raw`` twice, and the sequencer drops the same
  bytes arriving twice, so each is sealed once.

Which events are outstanding is not known one by one (only failures are reported), so the
shadow takes the last ``2 × outstanding + _MARGIN`` produced: when every partition stalls at
once, as in an outage, that covers them, at the price of some duplicates above.
"""

from __future__ import annotations

import logging
from collections import deque
from itertools import islice
from pathlib import Path

from tracevault.producer._spool import SpoolSegment, SpoolWriter

__all__ = ["SHADOW_AFTER_S", "Shadow"]

logger = logging.getLogger(__name__)

#: No acknowledgement for this long while events are outstanding: copy them to disk.
SHADOW_AFTER_S = 0.02
_MARGIN = 500


class Shadow:
    """The shadow segment of one Publisher; used only by its background thread."""

    def __init__(self, spool_dir: Path, topic: str) -> None:
        self.recent: deque[tuple[bytes, bytes]] = deque()
        self._writer = SpoolWriter(spool_dir, topic, announce=False)
        self._upto = 0  # events produced so far that the shadow covers
        self.written = 0

    def tick(self, produced: int, outstanding: int, idle: float) -> None:
        """Called each loop: ``produced`` so far, ``outstanding`` in librdkafka, ``idle`` s."""
        recent = self.recent
        if outstanding == 0:
            recent.clear()
            self.drop()
            return
        keep = 2 * outstanding + _MARGIN
        while len(recent) > keep:
            recent.popleft()
        if idle >= SHADOW_AFTER_S:
            base = produced - len(recent)  # the produced count of recent[0]
            start = max(self._upto, base)
            if start < produced:
                records = list(islice(recent, start - base, None))
                try:
                    self._writer.append(records)
                except OSError as exc:  # the spool reports a full disk when it is used
                    logger.warning("could not copy unacknowledged events to disk: %s", exc)
                    return
                self.written += len(records)
                self._upto = produced
        elif self._writer.path is not None and outstanding <= produced - self._upto:
            self.drop()  # every event still outstanding came after the shadow

    def drop(self) -> None:
        """Delete the shadow segment (its events are delivered, or spooled for real)."""
        path = self._writer.path
        if path is None:
            return
        try:
            SpoolSegment(path).remove()  # while our fd still holds the flock
        except OSError as exc:
            logger.warning("could not delete the shadow spool segment %s: %s", path, exc)
        self._writer.close()

    @property
    def path(self) -> Path | None:
        """The shadow segment, while there is one."""
        return self._writer.path

    def holding(self, records: list[tuple[bytes, bytes]]) -> set[tuple[bytes, bytes]]:
        """Which of ``records`` (key, value) the shadow segment holds on disk.

        Read back from the file rather than assumed: the shadow takes the most recently
        produced events, which covers what Kafka left unacknowledged when every partition
        stalls at once, not when one partition stalled long before the others.
        """
        path = self._writer.path
        if path is None or not records:
            return set()
        wanted = set(records)
        seg = SpoolSegment(path)
        try:
            seg.read_header()
            return {
                (r.key, r.value) for r in seg.records(seg.header_end) if (r.key, r.value) in wanted
            }
        except (OSError, ValueError) as exc:
            logger.warning("could not read back the shadow spool segment %s: %s", path, exc)
            return set()

    def close(self) -> None:
        """At shutdown: keep an undelivered shadow for a drainer, release it."""
        self._writer.close()
