"""Replay of concurrent crossings in the recorded interleaving (TraceEvent v2 ``interleave``).

Live, an agent's asyncio tasks or threads overlap their crossings and the order in which
results come back follows latency. Served in seq order with no waiting, one branch would run
straight through and the run would diverge. So a run whose record overlaps crossings is
served by an :class:`Interleaver` (docs/design.md, "Concurrency inside a run"):

* **Matching does not depend on timing.** A call its framework named (a tool-call id,
  ``tracevault.callsite.called``) is matched to the crossing recorded with that identity,
  whatever order the calls arrive in. Another call is matched to the recorded crossing of its
  *branch*: the one whose ``branch_prev`` is the crossing this task or thread completed last
  (a new task inherits its creator's, through its copied context), with the same kind and
  request; among several, the lowest seq. A call no branch explains (a thread-pool worker
  reused for another branch) is matched by request among the crossings not yet served whose
  branch got that far; a pool thread's call for one whose branch did not is held until it
  does (its ``branch_prev`` may be another branch's crossing that the worker ran before).
* **Results come back in the recorded interleaving.** The crossing recorded as the k-th to
  complete is handed back only after the k-1 before it were, and only once
  ``started_at_done`` crossings have started (been matched) under replay. An async edge
  awaits a future (consecutive ones whose turn came are woken together, in that order:
  ``_advance``), a sync edge in a thread waits on an event; a sync edge on an event loop's
  thread cannot wait without blocking the loop, so it is answered at once.
* **An abandoned crossing is not answered** (a timeout that fired, ``task.cancel()``, a
  race's loser: ``_cancel``). It waits for the agent's own cancel and for its recorded turn,
  then lets the cancel through and is marked done; the crossings recorded after it wait on
  it as they did live. Nothing cancelling it is a divergence at its seq after its recorded
  duration plus ``stall_timeout_s``.
* **A changed agent still diverges at its seq.** A call that matches nothing is a
  ``ReplayDivergence`` at its branch's next recorded crossing; a call that never comes
  (a branch that stopped early) leaves the others waiting, and after ``stall_timeout_s``
  without progress the run diverges at the first crossing that never started. Every waiting
  branch then raises the same divergence.

A record that never overlapped (each crossing done before the next began: a sequential
agent, or a v1 record with no ``interleave``) is served by the plain cursor, as before,
unless a crossing carries a call identity: calls a framework runs concurrently (ToolNode's
thread pool) may have happened not to overlap live and still arrive in any order under
replay, so such a record is served here.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import Sequence
from contextvars import ContextVar
from typing import Any, NoReturn, Protocol

from tracevault.callsite import CALL_ID_ATTRIBUTE, take_call_id
from tracevault.edges import APART_ATTRIBUTE, Crossing
from tracevault.errors import ReplayDivergence
from tracevault.replayer.rerun._cancel import abandoned, never_cancelled, ran_for_s
from tracevault.replayer.rerun._mismatch import StopReplay, gap_reason, mismatch
from tracevault.replayer.rerun._waiters import Held, Waiter, wake_when_idle
from tracevault.schemas import EventKind, TraceEvent, canonical_json

__all__ = ["STALL_TIMEOUT_S", "Interleaver", "interleaved"]

#: How long every branch may wait without any crossing starting or completing before the
#: run is declared diverged (a branch stopped making the calls the others wait for).
STALL_TIMEOUT_S = 10.0

_NOT_CROSSINGS = frozenset(
    {EventKind.RUN_STARTED, EventKind.RUN_FINISHED, EventKind.ERROR, EventKind.GAP}
)
_tokens = itertools.count(1)
# (interleaver token, seq) of the crossing this task or thread completed last under replay:
# the live Recorder's ``_BRANCH``, rebuilt the same way.
_BRANCH: ContextVar[tuple[int, int] | None] = ContextVar("tracevault_replay_branch", default=None)


class _Cursor(Protocol):
    """What the interleaver reads of ``edges.ReplayCursor``: named here, not imported, as
    the cursor's module imports this one (no cycle, docs/design.md "Layout")."""

    pos: int
    until: int | None
    stopped: bool

    def diverge(
        self,
        reason: str,
        *,
        actual_kind: str | None,
        diff: tuple[str, ...] = (),
        actual_request: Any = None,
        at: int | None = None,
    ) -> ReplayDivergence: ...


def interleaved(events: Sequence[TraceEvent]) -> bool:
    """Whether the record overlaps crossings, so it must be served by an Interleaver."""
    if not events or any(ev.seq != i for i, ev in enumerate(events)):
        return False
    overlapped = False
    for i, ev in enumerate(events):
        il = ev.interleave
        if il is None:
            if ev.kind is not EventKind.GAP:
                return False  # a v1 record (or a mix): served in seq order, as it always was
            continue
        if il.done_order != i or il.started_at_done != i + 1:
            overlapped = True
        if CALL_ID_ATTRIBUTE in ev.attributes:
            overlapped = True  # named concurrent calls: matched by name (module docstring)
    return overlapped


class Interleaver:
    """Serves a run's crossings to concurrent branches in the recorded interleaving."""

    def __init__(
        self,
        cursor: _Cursor,
        events: Sequence[TraceEvent],
        stall_timeout_s: float | None = None,
    ) -> None:
        self._cursor = cursor
        self._events = events
        self._stall = STALL_TIMEOUT_S if stall_timeout_s is None else stall_timeout_s
        self._token = next(_tokens)
        n = len(events)
        self._matched = [False] * n
        self._matched[0] = True  # RUN_STARTED: consumed by replay() itself
        self._virtual: set[int] = set()  # matched without a call: nested in a served crossing
        self._slot = [-1] * n  # seq -> position among completions
        order: dict[int, int] = {}
        self._by_prev: dict[int | None, list[int]] = {}
        self._children: dict[int, list[int]] = {}
        self._by_id: dict[str, list[int]] = {}
        self._apart: set[int] = set()
        for ev in events:
            identity = ev.attributes.get(CALL_ID_ATTRIBUTE)
            if APART_ATTRIBUTE in ev.attributes:
                self._apart.add(ev.seq)
            if identity is not None:
                self._by_id.setdefault(identity, []).append(ev.seq)
            il = ev.interleave
            if il is not None:
                order[il.done_order] = ev.seq
            if ev.parent_seq is not None:
                self._children.setdefault(ev.parent_seq, []).append(ev.seq)
            elif ev.kind not in _NOT_CROSSINGS and il is not None:
                self._by_prev.setdefault(il.branch_prev, []).append(ev.seq)
        self._order = [order[k] for k in sorted(order)]
        for k, seq in enumerate(self._order):
            self._slot[seq] = k
        self._completed = [False] * len(self._order)
        self._done = 0
        self._waiters: dict[int, Waiter] = {}
        self._held: list[Held] = []
        self._lock = threading.Lock()
        self._progress = time.monotonic()
        self._failed: BaseException | None = None
        self._complete(0)
        _BRANCH.set((self._token, 0))

    # -- the edges' entry points ------------------------------------------------------------
    def expect(self, crossing: Crossing) -> TraceEvent:
        """Match a sync edge's call and wait (in a thread) for its turn."""
        on_loop = asyncio.events._get_running_loop() is not None
        ev, waiter = self._arrive(crossing, None, wait=not on_loop)
        if waiter is not None:
            assert waiter.event is not None
            while not waiter.event.wait(min(self._stall, 0.5)):
                with self._lock:
                    if self._stalled():
                        raise self._failed  # type: ignore[misc]
            self._resume(ev.seq)
        return ev

    async def aexpect(self, crossing: Crossing) -> TraceEvent:
        """Match an async edge's call and await its turn.

        A plain ``await`` of one future: woken, the task resumes on the next loop iteration,
        as it did live when its callee's result arrived.
        """
        loop = asyncio.get_running_loop()
        ev, waiter = self._arrive(crossing, loop, wait=True)
        if waiter is not None:
            watch = loop.call_later(self._stall, self._watch, loop)
            try:
                if waiter.abandoned:
                    await self._until_cancelled(ev, waiter)  # raises the agent's cancel
                else:
                    await self._turn(waiter)
            finally:
                watch.cancel()
            self._resume(ev.seq)
        return ev

    async def _turn(self, waiter: Waiter) -> None:
        """Await the crossing's turn; a cancel that comes first waits for it (see below).

        The record says this crossing completed, so live no cancellation reached it: one
        arriving now comes from the agent's own timer running ahead of a replay whose served
        calls take no time (a ``wait_for`` that did not fire live). The recorded answer is
        served in its turn, as live, and the cancel is let go: ``wait_for`` then returns it.
        """
        while not waiter.woken:
            try:
                await waiter.wait()
            except asyncio.CancelledError:
                continue

    async def _until_cancelled(self, ev: TraceEvent, waiter: Waiter) -> NoReturn:
        """An abandoned crossing: wait for the agent's cancel *and* its turn, then let it go.

        The cancel may come before the turn (held until then: the crossings recorded as
        completing before it still come back first) or after (the later crossings wait on
        it, as they did live). Nothing here raises ``CancelledError`` on its own.
        """
        cancel: asyncio.CancelledError | None = None
        while True:
            if self._failed is not None:
                self._drop(ev.seq)
                raise self._failed
            if cancel is not None and waiter.woken:
                break
            try:
                await waiter.wait()  # after its turn, only a cancel or a failure ends it
            except asyncio.CancelledError as exc:
                cancel = exc
        self._resume(ev.seq)
        raise cancel

    def _drop(self, seq: int) -> None:
        with self._lock:
            self._waiters.pop(seq, None)

    # -- matching ---------------------------------------------------------------------------
    def _arrive(
        self, crossing: Crossing, loop: asyncio.AbstractEventLoop | None, *, wait: bool
    ) -> tuple[TraceEvent, Waiter | None]:
        """The recorded crossing that answers this call, and what to wait on for its turn."""
        data = canonical_json(crossing.request, field="request")
        identity = take_call_id()
        last = _BRANCH.get()
        prev = last[1] if last is not None and last[0] == self._token else None
        with self._lock:
            self._raise_if_failed()
            gap = self._events[self._cursor.pos] if self._cursor.pos < len(self._events) else None
            if gap is not None and gap.kind is EventKind.GAP:
                raise self._fail(
                    self._cursor.diverge(
                        gap_reason(gap),
                        actual_kind=crossing.kind.value,
                        actual_request=crossing.request,
                        at=gap.seq,
                    )
                )
            seq = self._named(crossing, data, identity)
            if seq is None:
                seq = self._match(crossing, data, prev)
            held = None
            if seq is None and loop is None and wait and self._ahead(crossing, data):
                held = Held(crossing, data, prev)
                self._held.append(held)
            elif seq is None:
                found = self._unmatched(crossing, data, prev)
                if isinstance(found, TraceEvent):
                    return found, None  # answered outside the recorded order
                seq = found
            if held is None:
                assert seq is not None
                served = self._serve(seq, prev, loop, wait=wait)
                self._release_held()
        if held is not None:
            served = self._hold(held)
        _BRANCH.set((self._token, served[0].seq))
        return served

    def _serve(
        self, seq: int, prev: int | None, loop: asyncio.AbstractEventLoop | None, *, wait: bool
    ) -> tuple[TraceEvent, Waiter | None]:
        """Start matched crossing ``seq``: complete it now if its turn came, else a waiter."""
        until = self._cursor.until
        if until is not None and seq > until:
            raise self._fail(self._stop())
        self._take(seq, prev)
        self._progress = time.monotonic()
        slot = self._slot[seq]
        # an abandoned async crossing always waits: for its turn and the agent's cancel
        hold = loop is not None and wait and abandoned(self._events[seq])
        turn = self._done == slot and self._cursor.pos >= self._started(seq)
        if not hold and (not wait or turn):
            self._complete(slot)
            return self._events[seq], None
        waiter = Waiter(loop, abandoned=hold)
        self._waiters[seq] = waiter
        self._advance()
        return self._events[seq], waiter

    # -- a pool thread's call ahead of the crossing its record names before it --------------
    def _ahead(self, crossing: Crossing, data: bytes) -> bool:
        """Whether an open crossing has this request but its ``branch_prev`` has not started.

        In a thread pool that ``branch_prev`` may be another branch's crossing: the worker
        that ran the branch live had run that one before (its context keeps the last seq), so
        the record orders them although the agent does not. Under replay the branch may run
        on another thread and arrive first; it is held (:meth:`_hold`) until the record's
        order reaches it, as live it started only after that crossing.
        """
        return any(
            not self._matched[seq] and self._same(self._events[seq], crossing, data)
            for before, seqs in self._by_prev.items()
            if not self._reached(before)
            for seq in seqs
        )

    def _release_held(self) -> None:
        """Match every held call whose crossing's ``branch_prev`` has now started."""
        moved = True
        while moved:
            moved = False
            for held in self._held:
                seq = self._match(held.crossing, held.data, held.prev)
                if seq is None:
                    continue
                self._held.remove(held)
                try:
                    held.served = self._serve(seq, held.prev, None, wait=True)
                finally:
                    held.ready.set()
                moved = True
                break

    def _hold(self, held: Held) -> tuple[TraceEvent, Waiter | None]:
        """Wait in the pool thread until :meth:`_release_held` matched the call, or a failure."""
        while not held.ready.wait(min(self._stall, 0.5)):
            with self._lock:
                if held.ready.is_set():
                    break
                if self._stalled():
                    break
        with self._lock:
            if held.served is None:
                if held in self._held:
                    self._held.remove(held)
                self._raise_if_failed()
            assert held.served is not None
            return held.served

    def _named(self, crossing: Crossing, data: bytes, identity: str | None) -> int | None:
        """The open crossing recorded under the call's identity, with the same request."""
        for seq in self._by_id.get(identity, ()) if identity is not None else ():
            if not self._matched[seq] and self._same(self._events[seq], crossing, data):
                return seq
        return None

    def _match(self, crossing: Crossing, data: bytes, prev: int | None) -> int | None:
        for seq in self._by_prev.get(prev, ()):
            if not self._matched[seq] and self._same(self._events[seq], crossing, data):
                return seq
        # A branch the record cannot name: a thread-pool worker's context still holds the
        # last crossing of the branch it ran before. Match by request among all open ones
        # whose branch has got that far (its previous crossing started): live, a crossing is
        # made only after the one before it in its branch, so an extra or swapped call is
        # never handed a later crossing's answer (it diverges at its own seq instead).
        for before, seqs in self._by_prev.items():
            if not self._reached(before):
                continue
            for seq in seqs:
                if not self._matched[seq] and self._same(self._events[seq], crossing, data):
                    return seq
        return None

    def _reached(self, before: int | None) -> bool:
        """Whether the branch whose previous crossing is ``before`` got that far (started it)."""
        return before is None or self._matched[before]

    def _unmatched(self, crossing: Crossing, data: bytes, prev: int | None) -> int | TraceEvent:
        """A call no recorded crossing explains: strict replay diverges (keep-going aligns).

        Returns the seq to serve in the recorded order, or an event answered at once.
        """
        raise self._fail(self._mismatch(crossing, prev))

    @staticmethod
    def _same(ev: TraceEvent, crossing: Crossing, data: bytes) -> bool:
        if ev.kind is not crossing.kind or ev.request != data:
            return False
        if crossing.kind is EventKind.MODEL_CALL and crossing.model is None:
            return ev.seed == crossing.seed  # the build the provider reported is served
        if crossing.kind is EventKind.RANDOM:
            return crossing.seed is None or crossing.seed == ev.seed
        return ev.model == crossing.model and ev.seed == crossing.seed

    def _take(self, seq: int, prev: int | None = None) -> None:
        """Mark ``seq`` started, with every crossing recorded inside it (not made again).

        ``prev`` is the calling branch's last served crossing (keep-going uses it).
        """
        todo = [seq]
        while todo:
            s = todo.pop()
            self._matched[s] = True
            for child in self._children.get(s, ()):
                self._virtual.add(child)
                todo.append(child)
        c = self._cursor
        while c.pos < len(self._events) and self._matched[c.pos]:
            c.pos += 1

    def _started(self, seq: int) -> int:
        il = self._events[seq].interleave
        return 0 if il is None else il.started_at_done

    # -- completing in the recorded order ---------------------------------------------------
    def _complete(self, slot: int) -> None:
        if slot >= 0:
            self._completed[slot] = True
        while self._done < len(self._completed) and self._completed[self._done]:
            self._done += 1
        self._advance()

    def _advance(self) -> None:
        """Wake the next crossings to complete, or complete the nested ones nobody calls.

        The head of the recorded completions is woken; so are the async crossings recorded
        right after it, on its event loop, whose turn came too (matched, their
        ``started_at_done`` reached). Live they completed in one loop iteration, before any
        task they let go ran (a nested gather's new tasks); woken in one go their futures
        resolve in the recorded order and the loop resumes their tasks in it, first. Woken
        one per iteration, a task resumed first would run ahead of the others' results.
        A thread's waiter, or an abandoned one, is only woken at the head; so is one whose
        task has not parked on it yet (the task calling now: it would go on at once, ahead of
        those woken before it), which a later ``_advance`` wakes in its place. One recorded
        apart (``APART_ATTRIBUTE``) is woken alone, once its loop runs idle (``wake_when_idle``).
        """
        pos = self._cursor.pos
        loop: asyncio.AbstractEventLoop | None = None
        k = self._done
        while k < len(self._order):
            seq = self._order[k]
            if not self._matched[seq] or pos < self._started(seq):
                return
            if seq in self._virtual:
                if k != self._done:
                    return
                self._completed[k] = True
                self._done += 1
                k += 1
                continue
            if self._completed[k]:
                k += 1
                continue
            waiter = self._waiters.get(seq)
            apart = seq in self._apart
            if waiter is None or (
                k != self._done and (apart or not (waiter.loop is loop and waiter.parked))
            ):
                return  # not yet parked: the calling task, woken now, would run ahead
            if apart and waiter.loop is not None and not waiter.woken:
                if not waiter.deferred:
                    waiter.deferred = True
                    waiter.loop.call_soon_threadsafe(wake_when_idle, waiter, self._lock, 0)
                return
            if not waiter.woken:
                waiter.wake()
            if waiter.loop is None or waiter.abandoned:
                return
            loop = waiter.loop
            k += 1

    def _resume(self, seq: int) -> None:
        with self._lock:
            self._waiters.pop(seq, None)
            self._raise_if_failed()
            self._progress = time.monotonic()
            self._complete(self._slot[seq])

    def finished(self, upto: int) -> None:
        """The agent's end (RUN_FINISHED, or ERROR then RUN_FINISHED) below ``upto`` matched.

        Live a crossing may complete after the run's end: a gather's sibling left running
        when another branch failed, cancelled by ``asyncio.run`` at shutdown. Its turn comes
        after the end's, so the end completes here; otherwise that sibling waits for a turn
        that never comes and diverges at shutdown, after a replay that matched."""
        with self._lock:
            for seq in range(min(upto, len(self._events))):
                if self._events[seq].kind in (EventKind.RUN_FINISHED, EventKind.ERROR):
                    self._matched[seq] = True
                    if self._slot[seq] >= 0:
                        self._completed[self._slot[seq]] = True
            self._progress = time.monotonic()
            self._complete(-1)

    # -- divergence and stalls --------------------------------------------------------------
    def _raise_if_failed(self) -> None:
        if self._failed is not None:
            raise self._failed

    def _fail(self, exc: BaseException) -> BaseException:
        """Make ``exc`` the outcome of every waiting branch too (none may hang)."""
        self._failed = exc
        for waiter in self._waiters.values():
            waiter.wake()
        for held in self._held:
            held.ready.set()
        return exc

    def _stop(self) -> BaseException:
        self._cursor.stopped = True
        return StopReplay()

    def _mismatch(self, crossing: Crossing, prev: int | None) -> ReplayDivergence:
        """The divergence for a call no recorded crossing explains, at its branch's next."""
        at = next((s for s in self._by_prev.get(prev, ()) if not self._matched[s]), None)
        if at is None:
            at = self._cursor.pos
        c = self._cursor
        if c.until is not None and at > c.until:
            raise self._fail(self._stop())
        kind = crossing.kind.value
        diff: tuple[str, ...] = ()
        if at >= len(self._events) or self._events[at].kind is EventKind.RUN_FINISHED:
            reason = f"the agent made an extra {kind} call after the record ended"
        else:
            reason, diff = mismatch(self._events[at], crossing) or (
                f"the {kind} call was already served to another branch",
                (),
            )
        return c.diverge(
            reason, actual_kind=kind, diff=diff, actual_request=crossing.request, at=at
        )

    def _watch(self, loop: asyncio.AbstractEventLoop) -> None:
        """The event loop's stall check, while async branches wait."""
        with self._lock:
            if self._failed is not None or not self._waiters or self._stalled():
                return
            idle = time.monotonic() - self._progress
            loop.call_later(max(self._stall - idle, 0.05), self._watch, loop)

    def _stalled(self) -> bool:
        """Whether nothing started or completed for ``stall_timeout_s``; if so, diverge."""
        if self._failed is not None:
            return True
        idle = time.monotonic() - self._progress
        if idle < self._stall + self._patience():
            return False
        head = self._abandoned_head()
        if head is not None:  # the agent no longer cancels what it cancelled live
            reason = never_cancelled(head, idle)
            self._fail(self._cursor.diverge(reason, actual_kind=None, at=head.seq))
            return True
        return self._on_stall(idle)

    def _abandoned_head(self) -> TraceEvent | None:
        """The next crossing to complete, when it is abandoned and waits for its cancel."""
        if self._done >= len(self._order):
            return None
        seq = self._order[self._done]
        waiter = self._waiters.get(seq)
        if waiter is None or not waiter.abandoned or not waiter.woken:
            return None
        return self._events[seq]

    def _patience(self) -> float:
        """Extra time to wait when the run waits on the agent's own cancel of a crossing.

        Live that cancel arrived the crossing's recorded duration after it started (a
        ``wait_for`` of 30 s that fired took 30 s); the agent's timer takes as long again.
        """
        head = self._abandoned_head()
        return 0.0 if head is None else ran_for_s(head)

    def _on_stall(self, idle: float) -> bool:
        """Nothing moved for ``idle`` seconds: diverge at the first crossing never started.

        A call held because its branch never made the crossing it waits for (two calls of
        one thread swapped) diverges as it would have at once: at its branch's next crossing.
        """
        swapped = next(
            (
                h
                for h in self._held
                if h.prev is not None
                and any(not self._matched[s] for s in self._by_prev.get(h.prev, ()))
            ),
            None,
        )
        if swapped is not None:
            self._fail(self._mismatch(swapped.crossing, swapped.prev))
            return True
        at = self._cursor.pos
        ev = self._events[at] if at < len(self._events) else None
        if ev is not None and ev.kind is EventKind.GAP:
            reason = gap_reason(ev)
        else:
            what = "call" if ev is None else f"{ev.kind.value} call"
            reason = (
                f"the agent never made the {what} recorded at seq {at}: its other branches "
                f"waited {idle:.1f}s for it (a branch stopped early or took another path)"
            )
        self._fail(self._cursor.diverge(reason, actual_kind=None, at=at))
        return True
