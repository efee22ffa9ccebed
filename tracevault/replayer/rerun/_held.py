"""Keep-going's held reads: a clock read, draw or decision whose alignment the next calls decide.

An agent that loops, or reads the clock through one helper, makes many crossings from one
site with one request. A read inserted there aligns with the *next* recorded read of that
site, and every read after it would shift by one: a cascade of swaps ending in an extra read
at the run's end. So a read of a kind keep-going can answer without the record
(``STAND_IN_KINDS``) that aligned past a crossing not made yet is *held*:

1. the calls made after it are aligned as usual, but their findings wait;
2. a later call of the same kind from the same site, made before the re-run passed the held
   read's position, means the held read was the insertion: it is given back to the index and
   reported extra, before the recorded crossing that followed the last one taken before it;
3. a call aligned past the held read's position while a crossing the read passed over is
   still not made means it was a real skip: it keeps its position; so does the re-run's end
   (or a stop) for any read still held (made early: out of order);
4. once nothing is held, the waiting findings are reported in the order the calls were made,
   each out of order only against what was really taken before it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from tracevault.edges import Crossing
from tracevault.replayer.rerun.align import Probe, RecordIndex
from tracevault.schemas import EventKind, TraceEvent

__all__ = ["STAND_IN_KINDS", "Call", "HeldReads"]

#: the kinds an extra crossing of is answered without the record (``KeepGoingCursor._stand_in``)
STAND_IN_KINDS = frozenset({EventKind.DECISION, EventKind.CLOCK, EventKind.RANDOM})

#: a call the re-run made: the recorded crossing it aligned with (None: extra), the crossing,
#: its request in the record's form, its call site
Call = tuple[TraceEvent | None, Crossing, bytes, str | None]


@dataclass(slots=True)
class _Made:
    call: Call
    pos: int | None  # None: extra
    probe: Probe | None = None
    held: bool = False
    prior: int = 0  # the index's last taken position before it


class HeldReads:
    """The calls made since the first read still held, and what became of each."""

    def __init__(self, index: RecordIndex, events: Sequence[TraceEvent]) -> None:
        self._index = index
        self._events = events
        self._made: list[_Made] = []
        self._base = 0  # the index's last taken position before the first waiting call

    @property
    def holding(self) -> bool:
        return any(m.held for m in self._made)

    def inserted(self, probe: Probe) -> None:
        """A call of a held read's kind and site: the held read was the insertion (rule 2)."""
        for m in reversed(self._made):
            if (
                m.held
                and m.probe is not None
                and (m.probe.kind, m.probe.site)
                == (
                    probe.kind,
                    probe.site,
                )
            ):
                assert m.pos is not None
                self._index.give_back(m.pos)
                m.pos, m.held = None, False
                m.call = (None, *m.call[1:])
                return

    def passed(self, pos: int, prior: int) -> int:
        """Keep every held read before ``pos`` that left a crossing out (rule 3); ``prior``
        raised past them."""
        for m in self._made:
            if m.held and m.pos is not None and m.pos < pos and self._index.skips(m.prior, m.pos):
                prior = self._keep(m, prior)
        return prior

    def keep_all(self) -> None:
        """The re-run ended or stopped: every read still held keeps its position."""
        for m in self._made:
            if m.held:
                self._keep(m, 0)

    def _keep(self, m: _Made, prior: int) -> int:
        assert m.pos is not None
        m.held = False
        self._index.keep(m.pos)
        return max(prior, m.pos)

    def made(self, probe: Probe, pos: int, call: Call, prior: int, hold: bool) -> None:
        """A call aligned with ``pos``; ``hold``: judged later, ``last`` stays ``prior``."""
        self._start(prior)
        if hold:
            self._index.hold(prior)
        self._made.append(_Made(call, pos, probe, hold, prior))

    def unaligned(self, call: Call, prior: int) -> None:
        """A call nothing aligned with, answered with a stand-in."""
        self._start(prior)
        self._made.append(_Made(call, None))

    def _start(self, prior: int) -> None:
        if not self._made:
            self._base = prior

    def flush(self) -> Iterator[tuple[Call, TraceEvent | None, int | None]]:
        """Each waiting call with the crossing it came out of order after (or None) and, for
        an extra one, the position of the recorded crossing it came before (None: the end)."""
        made, self._made = self._made, []
        last = self._base
        for m in made:
            if m.pos is None:
                # where the record stood when it was made, as an extra call made at once is
                yield m.call, None, last + 1 if last + 1 < len(self._events) else None
                continue
            yield m.call, self._events[last] if m.pos < last else None, None
            last = max(last, m.pos)
