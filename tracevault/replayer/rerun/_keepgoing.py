"""``replay(..., keep_going=True)``: every divergence of a re-run, not only the first.

The re-run's crossings are aligned with the record by kind, call site and ordinal
(``align``) instead of by position, so one inserted or removed call is reported once and
the calls after it still match. Each crossing that aligns is answered with its recorded
response, even when its request changed, so the agent goes on as it went live; a crossing
with no recorded counterpart is *extra*: a decision is let through (it needs no answer), a
clock read gets the record's time at that point and a random draw its own seed (or 0); a
model, tool or state call stops the re-run there, since the record holds nothing to answer
it with. What nothing aligned with is *missing*. A call aligned with a crossing recorded
before one already made (two calls swapped) is *out of order*: one finding, at its seq. All
of it, and the final output, is reported in seq order.

A record whose crossings overlapped (concurrent branches) is served by a
:class:`KeepGoingInterleaver`: results come back in the recorded interleaving exactly as in a
strict replay (``_interleave``), so an agent whose requests depend on the order its branches
completed in shows no false differences. A call the strict replay would diverge on is
aligned instead: with its branch's next recorded crossing of the same kind, else as above,
and served in that crossing's recorded turn. Crossings a branch passed over, and a crossing
the others waited on for ``STALL_TIMEOUT_S`` that never started, are let go as missing, so
no branch waits on a call that will not come; one passed over that the branch then makes
after all is out of order (answered at once), not missing.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from typing import Any

from tracevault.callsite import call_site
from tracevault.edges import Crossing
from tracevault.errors import ReplayDivergence
from tracevault.recorded_error import type_name
from tracevault.replayer._json_diff import MISSING, json_diff, short_json
from tracevault.replayer._results import DivergenceReport, StepSummary
from tracevault.replayer.rerun._held import STAND_IN_KINDS, HeldReads
from tracevault.replayer.rerun._interleave import _BRANCH, Interleaver
from tracevault.replayer.rerun._mismatch import names_first
from tracevault.replayer.rerun.align import Probe, RecordIndex, event_site, is_crossing
from tracevault.replayer.rerun.edges import ReplayCursor
from tracevault.schemas import EventKind, TraceEvent, canonical_json, canonical_json_like

__all__ = ["KeepGoingCursor", "KeepGoingInterleaver"]


def _loads(data: bytes) -> Any:
    return json.loads(data) if data else None


class KeepGoingCursor(ReplayCursor):
    """A :class:`ReplayCursor` that aligns instead of walking, and collects every divergence."""

    def __init__(self, run_id: str, events: Sequence[TraceEvent]) -> None:
        self.index = RecordIndex(events, nested=False)
        self.found: list[DivergenceReport] = []
        self._lock = threading.Lock()
        # every request of a run is in one form (RFC 8785, or the older one): take it from one
        self._form = next((e.request for e in events if is_crossing(e, nested=False)), None)
        self.held = HeldReads(self.index, events)
        super().__init__(run_id, events, None)

    def _interleaver(self, events: Sequence[TraceEvent]) -> Interleaver:
        return KeepGoingInterleaver(self, events)

    def diverge(self, reason: str, **kw: Any) -> ReplayDivergence:
        """A divergence that stops the re-run (a GAP, a stall at a run's end) is one found."""
        exc = super().diverge(reason, **kw)
        assert self.report is not None
        self.found.append(self.report)
        return exc

    def _report(self, ev: TraceEvent | None, reason: str, **kw: Any) -> DivergenceReport:
        seq = kw.pop("seq", None)
        report = DivergenceReport(
            run_id=self.run_id,
            seq=ev.seq if ev is not None else self.next_seq() if seq is None else seq,
            expected=kw.pop("expected", None if ev is None else ev.kind.value),
            reason=reason,
            expected_request=None if ev is None else _loads(ev.request),
            **kw,
        )
        self.found.append(report)
        return report

    def expect(self, crossing: Crossing) -> TraceEvent:
        crossing = self.redacted(crossing)
        if self.interleave is not None:
            return self.interleave.expect(crossing)
        site = call_site()
        with self._lock:
            self.raise_if_diverged()
            request = canonical_json_like(crossing.request, self._form, field="request")
            probe = Probe(crossing.kind, site, request, crossing.model, crossing.seed)
            held = self.held
            held.inserted(probe)
            prior = self.index.last
            pos = self.index.take(probe)
            stand_in = None
            if pos is None:
                stand_in = self._stand_in(crossing)
                if stand_in is None:  # the re-run stops: what is held is judged as it stands
                    self._settle()
                    return self.extra_call(crossing, site)
                held.unaligned((None, crossing, request, site), prior)
            else:
                prior = held.passed(pos, prior)
                # taken over a crossing not made yet: an inserted read that aligned with a
                # later one of the same site, or a real skip; the calls after it tell
                hold = crossing.kind in STAND_IN_KINDS and self.index.skips(prior, pos)
                held.made(probe, pos, (self.events[pos], crossing, request, site), prior, hold)
                self.pos = self.index.last + 1
            if not held.holding:
                self._flush()
            if stand_in is not None:
                return stand_in
            assert pos is not None
            return self.events[pos]

    def _settle(self) -> None:
        """Every held crossing was what it aligned with: report what is waiting."""
        self.held.keep_all()
        self._flush()

    def _flush(self) -> None:
        for call, after, before in self.held.flush():
            ev, crossing, request, site = call
            if ev is None:
                self.extra_call(crossing, site, before)
            else:
                self.compare(ev, crossing, request, site, after=after)
        self.pos = self.index.last + 1

    def compare(
        self,
        ev: TraceEvent,
        crossing: Crossing,
        request: bytes,
        site: str | None,
        *,
        after: TraceEvent | None = None,
    ) -> None:
        """Report how ``crossing`` differs from ``ev``, the recorded crossing it aligned with.

        ``after``: a crossing recorded later than ``ev`` but made before it (out of order),
        reported with ``ev`` as one finding (a swap of two calls is one edit).
        """
        kind = crossing.kind.value
        if crossing.kind is EventKind.MODEL_CALL and crossing.model is None:
            crossing = Crossing(crossing.kind, crossing.request, ev.model, crossing.seed)
        diff: list[str] = []
        if ev.model != crossing.model:
            diff.append(f"$.model: expected {short_json(ev.model)}, got {crossing.model!r}")
        # a RANDOM crossing made without a seed is answered with the recorded one
        unseeded = crossing.kind is EventKind.RANDOM and crossing.seed is None
        if not unseeded and crossing.seed != ev.seed:
            diff.append(f"$.seed: expected {ev.seed}, got {crossing.seed}")
        if request != ev.request:
            diff.extend(names_first(json_diff(_loads(ev.request), crossing.request, "$.request")))
        recorded_site = event_site(ev)
        if diff or after is not None:
            moved = "" if recorded_site in (None, site) else f" (recorded at {recorded_site})"
            parts = []
            if after is not None:
                parts.append(
                    f"came out of order: recorded before the {after.kind.value} call at seq "
                    f"{after.seq}, made after it"
                )
            if diff:
                parts.append(f"differs from the record{moved}")
            self._report(
                ev,
                f"the {kind} call " + "; it also ".join(parts),
                actual=kind,
                diff=tuple(diff),
                actual_request=crossing.request,
                site=site or recorded_site,
            )

    def _stand_in(self, crossing: Crossing) -> TraceEvent | None:
        """An answer for an extra crossing that needs none from the record, or None."""
        if crossing.kind is EventKind.DECISION:
            response = b"null"  # the agent goes on with its own choice
        elif crossing.kind is EventKind.CLOCK:
            # the record's own time at that point: the last served crossing's
            response = canonical_json({"time": self.events[self.index.last].at / 1e6})
        elif crossing.kind is EventKind.RANDOM:
            response = canonical_json({"seed": crossing.seed or 0})
        else:
            return None
        first = self.events[0]
        return TraceEvent(self.run_id, -1, crossing.kind, first.at, first.agent, b"{}", response)

    async def aexpect(self, crossing: Crossing) -> TraceEvent:
        """Async edges align the same way; in a concurrent record they await their turn."""
        if self.interleave is not None:
            return await self.interleave.aexpect(self.redacted(crossing))
        return self.expect(crossing)

    def extra_call(
        self, crossing: Crossing, site: str | None, before: int | None = None
    ) -> TraceEvent:
        """A crossing nothing in the record aligns with: a stand-in answer, or the stop.

        It is reported at ``before`` (its branch's next recorded crossing, in a concurrent
        run), else at the first recorded crossing not yet made.
        """
        kind = crossing.kind.value
        nxt = self.peek() if before is None else self.events[before]
        where = "after the record ended" if nxt is None else f"before seq {nxt.seq}"
        stand_in = self._stand_in(crossing)
        reason = f"an extra {kind} call the record does not have ({where})"
        if stand_in is None:
            reason += "; the record holds no answer for it, so the re-run stopped here"
        report = self._report(
            None,
            reason,
            actual=kind,
            diff=json_diff(MISSING, crossing.request, "$.request"),
            actual_request=crossing.request,
            site=site,
            seq=None if nxt is None else nxt.seq,
            next_in_record=tuple(StepSummary.of(e) for e in self.events[self.pos : self.pos + 3]),
        )
        if stand_in is not None:
            return stand_in
        self.report = report
        self.divergence = ReplayDivergence(
            report.render(), seq=report.seq, expected=None, actual=kind, diff=report.diff
        )
        raise self.divergence

    # -- the end of the re-run ----------------------------------------------------------
    def missing(self) -> None:
        """Report every recorded crossing nothing aligned with (before the stop, if stopped)."""
        with self._lock:
            self._settle()
        stop = self.index.last if self.divergence is not None else len(self.events)
        for pos in self.index.untaken():
            if pos > stop:
                break
            ev = self.events[pos]
            self._report(
                ev,
                f"the re-run never made this {ev.kind.value} call",
                actual=None,
                diff=json_diff(_loads(ev.request), MISSING, "$.request")[:1],
                site=event_site(ev),
            )

    def outcome(self, output: Any, exc: BaseException | None) -> None:
        """Compare the agent's output (or error) with the record's RUN_FINISHED/ERROR."""
        if self.divergence is not None:
            return
        last = next(
            (e for e in self.events if e.kind in (EventKind.ERROR, EventKind.RUN_FINISHED)), None
        )
        if last is None:
            self._report(None, "the agent finished but the record never does", actual="END")
            return
        err = last.error
        rec_err = None if err is None else {"type": err.type, "message": err.message}
        got_err = None if exc is None else {"type": type_name(exc)[0], "message": str(exc)[:16_384]}
        same_error = (rec_err is None and exc is None) or (
            rec_err is not None
            and exc is not None
            and rec_err["type"] in type_name(exc)
            and rec_err["message"] == got_err["message"]  # type: ignore[index]
        )
        actual = EventKind.ERROR.value if exc is not None else EventKind.RUN_FINISHED.value
        if not same_error:
            self._report(
                last,
                "the agent ended differently than the record says",
                actual=actual,
                diff=json_diff({"error": rec_err}, {"error": got_err}),
            )
        elif exc is None:
            out = {"output": output}
            if canonical_json_like(out, last.response, field="response") != last.response:
                self._report(
                    last,
                    "the agent's final output differs from the record",
                    actual=actual,
                    diff=json_diff(_loads(last.response), out, "$.response"),
                )

    def reports(self) -> tuple[DivergenceReport, ...]:
        return tuple(sorted(self.found, key=lambda r: (r.seq, r.expected is None)))


class KeepGoingInterleaver(Interleaver):
    """The strict :class:`Interleaver`, but a call it cannot match is aligned, not fatal."""

    def __init__(self, cursor: KeepGoingCursor, events: Sequence[TraceEvent]) -> None:
        super().__init__(cursor, events)
        self._kg = cursor
        self._passed_over: set[int] = set()  # let go, not called (yet): missing unless called

    def _unmatched(self, crossing: Crossing, data: bytes, prev: int | None) -> int | TraceEvent:
        kg = self._kg
        site = call_site()
        late = self._late(crossing, data)
        if late is not None:  # a branch made two calls in the other order
            kg.compare(self._events[late], crossing, data, site, after=self._after(prev, late))
            _BRANCH.set((self._token, late))
            return self._events[late]
        # the same branch's next crossing of this kind: concurrent branches often make the
        # same calls from the same lines, so the call site alone would pick another branch's
        seq = next(
            (
                s
                for s in self._by_prev.get(prev, ())
                if not self._matched[s] and self._events[s].kind is crossing.kind
            ),
            None,
        )
        if seq is None:
            seq = kg.index.take(Probe(crossing.kind, site, data, crossing.model, crossing.seed))
        if seq is None:
            before = next((s for s in self._by_prev.get(prev, ()) if not self._matched[s]), None)
            try:
                return kg.extra_call(crossing, site, before)
            except ReplayDivergence as exc:
                raise self._fail(exc) from None
        ev = self._events[seq]
        kg.compare(ev, crossing, data, site)
        if not self._matched[seq]:
            return seq
        # let go as missing (passed over, or after a stall): its turn is gone, answer at once
        _BRANCH.set((self._token, seq))
        return ev

    def _reached(self, before: int | None) -> bool:
        """Any open crossing may match: a call made ahead of its branch is a swap to report.

        The strict rule (the branch's previous crossing started) would leave the later call
        of a swapped pair unmatched, and it would be aligned with the earlier one (a false
        diff). Matched here, ``_take`` lets the crossings it passed over go, and the earlier
        call, made after all, is reported out of order (``_late``).
        """
        return True

    def _take(self, seq: int, prev: int | None = None) -> None:
        """Take ``seq``; what its branch passed over since ``prev`` is missing.

        Only when ``seq``'s recorded branch leads back to ``prev``, the crossing this task or
        thread was served last: a recorded ``branch_prev`` can also name another branch's
        crossing (a pool thread reused live), which may simply not have been called yet.
        """
        skipped = []
        back = self._prev(seq)
        while back is not None and back != prev and not self._matched[back]:
            skipped.append(back)
            back = self._prev(back)
        if prev is not None and back == prev:
            for s in skipped:
                self._let_go(s)
                self._passed_over.add(s)
        super()._take(seq)
        index = self._kg.index
        index.taken[seq] = True
        index.last = max(index.last, seq)

    def _late(self, crossing: Crossing, data: bytes) -> int | None:
        """A crossing let go as passed over that this call is after all, now taken; or None.

        Its turn is gone (the crossings recorded after it came first), so it is answered at
        once and reported out of order, not missing.
        """
        seq = min(
            (s for s in self._passed_over if self._same(self._events[s], crossing, data)),
            default=None,
        )
        if seq is not None:
            self._passed_over.discard(seq)
            self._kg.index.taken[seq] = True
        return seq

    def _after(self, prev: int | None, late: int) -> TraceEvent | None:
        """The crossing recorded after ``late`` on its branch that this branch made first."""
        return None if prev is None or prev < late else self._events[prev]

    def _prev(self, seq: int) -> int | None:
        il = self._events[seq].interleave
        return None if il is None else il.branch_prev

    def _let_go(self, seq: int) -> None:
        """Complete ``seq`` in its turn without a call (reported missing at the end)."""
        self._virtual.add(seq)
        super()._take(seq)  # not this class's: nothing before it is let go with it

    def _on_stall(self, idle: float) -> bool:
        """Let the crossing the others wait on go as missing, rather than stop the re-run.

        That is the next to complete if nobody called it, else the first never started
        (the next to complete waits for it to start).
        """
        head = self._order[self._done] if self._done < len(self._order) else None
        at = head if head is not None and not self._matched[head] else self._cursor.pos
        if at >= len(self._events) or not is_crossing(self._events[at], nested=False):
            return super()._on_stall(idle)
        self._let_go(at)
        self._progress = time.monotonic()
        self._advance()
        return False
