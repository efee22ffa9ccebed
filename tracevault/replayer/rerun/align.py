"""Aligning two sequences of crossings by kind, call site and ordinal, not by position.

A re-run or a second run that inserts one call would, compared position by position, differ
at every later step. Here each crossing is matched with a recorded one, in this order:

1. same kind, same call site, same request (model, seed): the same call, wherever it fell
   (concurrent branches finish in any order);
2. same kind and call site: the n-th call at that site is the n-th recorded there (ordinal);
3. same kind and request from another site: the same call after an edit moved its line;
4. the next unmatched recorded crossing, if it is of the same kind in the same function;

and nothing else: then the crossing is *extra*, and what no crossing took is *missing*.
Call sites come from ``attributes["tracevault.site"]`` (``tracevault.callsite``); a record
without them (made before sites were recorded) aligns by kind and ordinal alone.

Lines move: a run recorded before an edit above the agent's calls has every site a few lines
off, and a call at its new line may then sit exactly where the record has another call of
the same kind. So each function keeps the line offset its last same-request match showed
(step 1 or 3 within one function), and steps 1 and 2 look a site up at its line moved by
that offset first: by function and ordinal, whatever the edit did to the line numbers.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

from tracevault.callsite import SITE_ATTRIBUTE, site_function
from tracevault.schemas import EventKind, TraceEvent

__all__ = ["Probe", "RecordIndex", "event_site", "is_crossing"]

_NOT_CROSSINGS = frozenset(
    {EventKind.RUN_STARTED, EventKind.RUN_FINISHED, EventKind.ERROR, EventKind.GAP}
)


def event_site(ev: TraceEvent) -> str | None:
    return ev.attributes.get(SITE_ATTRIBUTE) if ev.attributes else None


def is_crossing(ev: TraceEvent, *, nested: bool) -> bool:
    """A crossing the agent made (not a run boundary or GAP); nested ones only if asked."""
    return ev.kind not in _NOT_CROSSINGS and (nested or ev.parent_seq is None)


def _seed(kind: EventKind, seed: int | None) -> int | None:
    # a RANDOM crossing made without a seed is answered with the recorded one: any seed aligns
    return None if kind is EventKind.RANDOM else seed


@dataclass(frozen=True, slots=True)
class Probe:
    """A crossing looking for its recorded counterpart."""

    kind: EventKind
    site: str | None
    request: bytes
    model: str | None
    seed: int | None


class _Queue:
    """Positions in seq order with a head that skips the taken ones."""

    __slots__ = ("head", "items")

    def __init__(self) -> None:
        self.items: list[int] = []
        self.head = 0

    def first(self, taken: list[bool]) -> int | None:
        items = self.items
        while self.head < len(items) and taken[items[self.head]]:
            self.head += 1
        return items[self.head] if self.head < len(items) else None

    def after(self, taken: list[bool], last: int) -> int | None:
        """The first position past ``last`` not taken yet, or None."""
        items = self.items
        at = bisect.bisect_right(items, last, lo=self.head)
        return next((items[i] for i in range(at, len(items)) if not taken[items[i]]), None)


class RecordIndex:
    """The crossings of one recorded run, each taken at most once by :meth:`take`."""

    def __init__(self, events: Sequence[TraceEvent], *, nested: bool) -> None:
        self.events = events
        self.taken = [True] * len(events)
        self.last = 0  # the highest position taken so far
        self._site: dict[tuple[object, ...], _Queue] = {}
        self._exact: dict[tuple[object, ...], _Queue] = {}
        self._content: dict[tuple[object, ...], _Queue] = {}
        self.sited = False
        self.crossings = 0
        self._floor = 0  # ``last`` before the latest take
        # module:function -> recorded line minus re-run line, from the last same-request match
        self._offset: dict[str, int] = {}
        for pos, ev in enumerate(events):
            if not is_crossing(ev, nested=nested):
                continue
            self.crossings += 1
            self.taken[pos] = False
            self.sited = self.sited or event_site(ev) is not None
            for table, key in self._keys(ev):
                table.setdefault(key, _Queue()).items.append(pos)

    def _keys(
        self, ev: TraceEvent
    ) -> tuple[tuple[dict[tuple[object, ...], _Queue], tuple[object, ...]], ...]:
        """Each table a recorded crossing is queued in, with its key there."""
        site = event_site(ev)
        content = (ev.kind, ev.request, ev.model, _seed(ev.kind, ev.seed))
        return (
            (self._site, (ev.kind, site)),
            (self._exact, (*content, site)),
            (self._content, content),
        )

    def _first(
        self, table: dict[tuple[object, ...], _Queue], key: tuple[object, ...]
    ) -> int | None:
        q = table.get(key)
        return None if q is None else q.first(self.taken)

    def take(self, probe: Probe) -> int | None:
        """The position of the recorded crossing ``probe`` aligns with, now taken; or None."""
        site = probe.site if self.sited else None
        sites = self._sites(site)
        content = (probe.kind, probe.request, probe.model, _seed(probe.kind, probe.seed))
        same = True  # the same request: what the line offset is learnt from
        pos = next((p for s in sites if (p := self._identical(content, s)) is not None), None)
        if pos is None:
            same = False
            pos = next(
                (p for s in sites if (p := self._first(self._site, (probe.kind, s))) is not None),
                None,
            )
        if pos is None:
            same = True
            pos = self._first(self._content, content)
        if pos is None:
            same = False
            pos = self._next_in_function(probe.kind, site)
        if pos is not None:
            self.taken[pos] = True
            self._floor = self.last
            self.last = max(self.last, pos)
            if same:
                self._learn(site, event_site(self.events[pos]))
        return pos

    def _identical(self, content: tuple[object, ...], site: str | None) -> int | None:
        """The recorded crossing an identical call (same site, same request) aligns with.

        The first one not taken, unless the re-run passed it over before its previous call:
        a call passed over only by the previous one is a swap of the two, one passed over
        earlier was left out, and the identical call is the next one recorded after the
        last taken (a loop's clock read, say, once one of its reads was left out).
        """
        q = self._exact.get((*content, site))
        if q is None:
            return None
        first = q.first(self.taken)
        if first is None or first > self._floor:
            return first
        later = q.after(self.taken, self.last)
        return first if later is None else later

    def _sites(self, site: str | None) -> tuple[str | None, ...]:
        """``site`` at its line moved by its function's offset, then as it is."""
        if site is None:
            return (None,)
        func, _, line = site.rpartition(":")
        offset = self._offset.get(func, 0)
        if not offset or not line.isdigit():
            return (site,)
        return (f"{func}:{int(line) + offset}", site)

    def _learn(self, site: str | None, recorded: str | None) -> None:
        if site is None or recorded is None:
            return
        func, _, line = site.rpartition(":")
        rfunc, _, rline = recorded.rpartition(":")
        if func == rfunc and line.isdigit() and rline.isdigit():
            self._offset[func] = int(rline) - int(line)

    def _next_in_function(self, kind: EventKind, site: str | None) -> int | None:
        for pos in range(self.last + 1, len(self.events)):
            if self.taken[pos]:
                continue
            ev = self.events[pos]
            if ev.kind is kind and site_function(event_site(ev)) == site_function(site):
                return pos
            return None
        return None

    def skips(self, last: int, pos: int) -> bool:
        """Whether taking ``pos`` after ``last`` passed over a crossing not taken yet."""
        return not all(self.taken[last + 1 : pos])

    def hold(self, last: int) -> None:
        """The latest take stays taken but, until :meth:`keep`, ``last`` is as before it."""
        self.last = last

    def keep(self, pos: int) -> None:
        """A held position counts as taken after all."""
        self.last = max(self.last, pos)

    def give_back(self, pos: int) -> None:
        """Untake ``pos``, a held take (:meth:`hold`) that aligned wrongly."""
        self.taken[pos] = False
        for table, key in self._keys(self.events[pos]):
            q = table[key]
            q.head = min(q.head, q.items.index(pos))

    def untaken(self) -> list[int]:
        """Positions of the recorded crossings nothing aligned with, in seq order."""
        return [pos for pos, t in enumerate(self.taken) if not t]
