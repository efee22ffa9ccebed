"""The replay edges: every crossing is served from the record, none touches the network.

Each call builds its crossing with the same ``*_crossing`` function the Recorder uses
(``tracevault.edges``), so the request compared here is byte for byte what the Recorder
would have published. The first difference becomes a :class:`ReplayDivergence`, which is
also remembered: an agent that swallows exceptions (``except Exception``) cannot hide it,
because every later call and the end of the run raise it again.

:class:`ReplayEdges` is the one served edge: a fork's edges (``fork.ForkEdges``) are the
same class with the new run's Recorder behind it, not a second copy of the serving.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Awaitable, Callable, Sequence
from contextvars import ContextVar
from typing import Any

from tracevault.callsite import call_site, sited
from tracevault.edges import (
    JSON,
    Crossing,
    Edges,
    clock_crossing,
    decision_crossing,
    model_call_crossing,
    random_crossing,
    state_crossing,
    tool_crossing,
)
from tracevault.errors import ReplayDivergence
from tracevault.links import subagent_crossing
from tracevault.recorded_error import raise_recorded
from tracevault.replayer._json_diff import json_diff
from tracevault.replayer._results import DivergenceReport, StepSummary
from tracevault.replayer.rerun import _interleave
from tracevault.replayer.rerun._cancel import abandoned, cancelled, raise_cancelled, until_cancelled
from tracevault.replayer.rerun._interleave import Interleaver, interleaved
from tracevault.replayer.rerun._mismatch import StopReplay, gap_reason, loads, mismatch
from tracevault.replayer.rerun._redaction import run_redactor
from tracevault.replayer.rerun.subagents import note_child, serve_subagent
from tracevault.schemas import EventKind, TraceEvent, canonical_json_like

__all__ = ["NEXT_SHOWN", "ReplayCursor", "ReplayEdges", "StopReplay", "gap_reason", "mismatch"]

NEXT_SHOWN = 3
# Set while a fork's async tool edge runs: its served answer may be awaited (``_served_tool``).
_AWAITED: ContextVar[bool] = ContextVar("tracevault_fork_awaited", default=False)


_loads = loads


class ReplayCursor:
    """The position in the record and the first divergence, shared by every edge call."""

    def __init__(self, run_id: str, events: Sequence[TraceEvent], until: int | None) -> None:
        self.run_id = run_id
        self.events = events
        self.pos = 1  # seq 0 is RUN_STARTED, consumed by replay() itself
        self.until = until
        self.divergence: ReplayDivergence | None = None
        self.report: DivergenceReport | None = None
        self.stopped = False
        # a record whose crossings overlapped is served in its recorded interleaving
        self.interleave = self._interleaver(events) if interleaved(events) else None
        self.redactor = run_redactor(events)

    def redacted(self, crossing: Crossing) -> Crossing:
        """The crossing as the Recorder would have recorded it: the run's redaction rules
        applied to its request (docs/confidentiality.md, "Redaction")."""
        if self.redactor is None:
            return crossing
        return dataclasses.replace(
            crossing, request=self.redactor.apply(crossing.request, "request")
        )

    def _interleaver(self, events: Sequence[TraceEvent]) -> Interleaver:
        return Interleaver(self, events)

    # -- reading the record -------------------------------------------------------------
    def peek(self) -> TraceEvent | None:
        return self.events[self.pos] if self.pos < len(self.events) else None

    def next_seq(self) -> int:
        ev = self.peek()
        if ev is not None:
            return ev.seq
        return self.events[-1].seq + 1 if self.events else 0

    def check_stop(self) -> None:
        if self.until is not None and self.next_seq() > self.until:
            self.stopped = True
            raise StopReplay

    # -- divergence ---------------------------------------------------------------------
    def diverge(
        self,
        reason: str,
        *,
        actual_kind: str | None,
        diff: tuple[str, ...] = (),
        actual_request: Any = None,
        at: int | None = None,
    ) -> ReplayDivergence:
        """The divergence at the next event, or at index ``at`` (a concurrent branch's)."""
        pos = self.pos if at is None else at
        ev = self.events[pos] if pos < len(self.events) else None
        report = DivergenceReport(
            run_id=self.run_id,
            seq=self.next_seq() if at is None else (pos if ev is None else ev.seq),
            expected=None if ev is None else ev.kind.value,
            actual=actual_kind,
            reason=reason,
            diff=diff,
            expected_request=None if ev is None else _loads(ev.request),
            actual_request=actual_request,
            next_in_record=tuple(StepSummary.of(e) for e in self.events[pos : pos + NEXT_SHOWN]),
            # the agent's line that made the diverging call (none when it made no call)
            site=None if actual_kind is None else call_site(),
        )
        exc = ReplayDivergence(
            report.render(),
            seq=report.seq,
            expected=report.expected,
            actual=report.actual,
            diff=diff,
        )
        self.divergence = exc
        self.report = report
        return exc

    def raise_if_diverged(self) -> None:
        if self.divergence is not None:
            raise self.divergence

    # -- one crossing -------------------------------------------------------------------
    async def aexpect(self, crossing: Crossing) -> TraceEvent:
        """:meth:`expect` for async edges: awaits its turn in a concurrent record."""
        if self.interleave is not None:
            return await self.interleave.aexpect(self.redacted(crossing))
        return self.expect(crossing)

    def expect(self, crossing: Crossing) -> TraceEvent:
        """Match ``crossing`` against the next recorded event and consume it, or diverge."""
        crossing = self.redacted(crossing)
        if self.interleave is not None:
            return self.interleave.expect(crossing)
        self.raise_if_diverged()
        self.check_stop()
        ev = self.peek()
        actual_req = crossing.request
        kind = crossing.kind.value
        if ev is None:
            canonical_json_like(actual_req, None, field="request")  # unrecordable: say so
            raise self.diverge(
                f"the agent made an extra {kind} call after the record ended",
                actual_kind=kind,
                diff=json_diff(None, actual_req, "$.request"),
                actual_request=actual_req,
            )
        why = mismatch(ev, crossing)
        if why is not None:
            raise self.diverge(why[0], actual_kind=kind, diff=why[1], actual_request=actual_req)
        self.pos += 1
        self._skip_nested(ev.seq)
        return ev

    def _skip_nested(self, seq: int) -> None:
        """Skip crossings recorded *inside* the one just served (``parent_seq`` under it).

        Live, a tool may call the model through the edges; under replay the tool is not run
        (its recorded result is served), so its nested crossings are not made again.
        """
        inside = {seq}
        while (nxt := self.peek()) is not None and nxt.parent_seq in inside:
            inside.add(nxt.seq)
            self.pos += 1


def _response(ev: TraceEvent) -> JSON:
    if ev.error is not None:
        if cancelled(ev):
            raise_cancelled(ev)  # the real one: ``except Exception`` must not catch it
        raise_recorded(ev.error)
    return _loads(ev.response)


async def _aresponse(
    cursor: ReplayCursor, crossing: Crossing, child: Callable[..., Any] | None = None
) -> JSON:
    """An async edge's answer; an abandoned crossing waits for the agent to cancel it.

    Only a record served in seq order returns one here: the Interleaver waits for the
    cancellation itself, in the crossing's recorded turn (``_cancel``). ``child`` is a
    sub-agent crossing's agent callable, noted for ``--recurse``.
    """
    ev = await cursor.aexpect(crossing)
    if child is not None:
        note_child(ev, child)
    if abandoned(ev):
        at = ev.seq
        await until_cancelled(
            ev,
            _interleave.STALL_TIMEOUT_S,
            lambda reason: cursor.diverge(reason, actual_kind=None, at=at),
        )
    return _response(ev)


def _constant(value: JSON) -> Callable[..., JSON]:
    return lambda *_, **__: value


class ReplayEdges:
    """:class:`tracevault.edges.Edges` served from a record; built by ``replay``/``areplay``.

    The one served edge: a fork (``fork.ForkEdges``) is this class with a live Recorder
    behind it (``_live``). There each crossing is served from the record while
    ``_serving()`` (the record has crossings left up to the fork's seq) and handed to the
    Recorder with the served answer as its callee, so the new run records it; after that the
    Recorder makes it live. A Recorder takes tools and clock reads from its tool table and
    clock source, so a fork serves those with :meth:`_served_tool` and :meth:`_served_clock`.
    """

    def __init__(self, cursor: ReplayCursor) -> None:
        self._cursor = cursor

    # -- what a fork changes --------------------------------------------------------------
    @property
    def _live(self) -> Edges | None:
        """The Recorder that records every crossing into a new run; None under replay."""
        return None

    def _serving(self) -> bool:
        """Whether the next crossing is served from the record (always, under replay)."""
        return True

    @property
    def run_id(self) -> str:
        return self._cursor.run_id

    # -- served from the record -------------------------------------------------------------
    def _served(self, crossing: Crossing, awaited: bool = False) -> Callable[..., Any]:
        """The record's answer to ``crossing`` as a callee (a recorded error raised now).

        ``awaited``: an async edge's callee, a coroutine that awaits the crossing's turn in
        a concurrent record, and for an abandoned crossing the agent's cancel (so the fork's
        Recorder records that cancel again), as replay does.
        """
        if awaited:
            return lambda *_, **__: _aresponse(self._cursor, crossing)
        return _constant(_response(self._cursor.expect(crossing)))

    def _callee(
        self,
        request: JSON,
        model: str | None,
        seed: int | None,
        call: Callable[..., Any] | None,
        awaited: bool = False,
    ) -> Callable[..., Any] | None:
        """The model call's callee for a fork's Recorder: the record's answer while serving."""
        if not self._serving():
            return call
        return self._served(self._model_crossing(request, model, seed, call), awaited)

    def _served_tool(self, name: str, args: JSON) -> Any:
        """A tool's recorded answer; in a fork's async edge, awaited (see :meth:`_served`)."""
        if _AWAITED.get():
            return _aresponse(self._cursor, tool_crossing(name, args))
        return _response(self._cursor.expect(tool_crossing(name, args)))

    def _served_clock(self, name: str) -> float:
        value = _response(self._cursor.expect(clock_crossing(name)))
        return float(value["time"])

    def _model_crossing(
        self, request: JSON, model: str | None, seed: int | None, call: Callable[..., Any] | None
    ) -> Crossing:
        crossing = model_call_crossing(request, model=model, seed=seed, call=call)
        if crossing.model is None and self._cursor.interleave is None:
            # The build the provider reported is its output, served from the record like the
            # response; the requested model is compared inside the request (edges.py). (The
            # Interleaver does the same for the crossing it matches.)
            ev = self._cursor.peek()
            if ev is not None and ev.kind is EventKind.MODEL_CALL:
                crossing = dataclasses.replace(crossing, model=ev.model)
        return crossing

    # -- the edges --------------------------------------------------------------------------
    def model(
        self,
        request: JSON,
        *,
        model: str | None,
        seed: int | None = None,
        call: Callable[..., Any] | None = None,
    ) -> JSON:
        live = self._live
        if live is None:
            return _response(self._cursor.expect(self._model_crossing(request, model, seed, call)))
        return live.model(
            request, model=model, seed=seed, call=self._callee(request, model, seed, call)
        )

    @sited
    async def amodel(
        self,
        request: JSON,
        *,
        model: str | None,
        seed: int | None = None,
        call: Callable[..., Any] | None = None,
    ) -> JSON:
        live = self._live
        if live is None:
            crossing = self._model_crossing(request, model, seed, call)
            return await _aresponse(self._cursor, crossing)
        callee = self._callee(request, model, seed, call, awaited=True)
        return await live.amodel(request, model=model, seed=seed, call=callee)

    def tool(self, name: str, args: JSON) -> JSON:
        live = self._live
        return self._served_tool(name, args) if live is None else live.tool(name, args)

    @sited
    async def atool(self, name: str, args: JSON) -> JSON:
        live = self._live
        if live is None:
            return await _aresponse(self._cursor, tool_crossing(name, args))
        token = _AWAITED.set(True)  # the Recorder's tool table serves it: say it is awaited
        try:
            return await live.atool(name, args)
        finally:
            _AWAITED.reset(token)

    def clock(self, name: str = "now") -> float:
        live = self._live
        return self._served_clock(name) if live is None else live.clock(name)

    def random(self, name: str = "rng", *, seed: int | None = None) -> random.Random:
        recorded = None
        if self._serving():
            ev = self._cursor.expect(random_crossing(name, seed))
            recorded = ev.seed
            if recorded is None:
                resp = _response(ev)
                recorded = resp.get("seed") if isinstance(resp, dict) else None
        live = self._live
        if live is None:
            return random.Random(recorded)
        return live.random(name, seed=seed if recorded is None else recorded)

    def state(self, name: str, read: Callable[[], JSON] | None = None) -> JSON:
        live = self._live
        if live is None:
            return _response(self._cursor.expect(state_crossing(name)))
        if self._serving():
            read = self._served(state_crossing(name))
        return live.state(name, read=read)

    @sited
    async def astate(self, name: str, read: Callable[[], Awaitable[JSON]] | None = None) -> JSON:
        live = self._live
        if live is None:
            return await _aresponse(self._cursor, state_crossing(name))
        if self._serving():
            read = self._served(state_crossing(name), awaited=True)
        return await live.astate(name, read=read)

    def decision(self, name: str, choice: JSON, *, options: list[JSON] | None = None) -> JSON:
        if self._serving():
            self._cursor.expect(decision_crossing(name, choice, options))
        live = self._live
        return choice if live is None else live.decision(name, choice, options=options)

    def subagent(
        self, name: str, agent: Callable[..., Any], input: JSON, *, agent_version: str | None = None
    ) -> JSON:
        live = self._live
        if not self._serving():
            assert live is not None  # replay always serves
            return live.subagent(name, agent, input, agent_version=agent_version)
        served = _response(serve_subagent(self._cursor.expect, name, agent, input))
        return served if live is None else live.subagent(name, _constant(served), input)

    @sited
    async def asubagent(
        self, name: str, agent: Callable[..., Any], input: JSON, *, agent_version: str | None = None
    ) -> JSON:
        live = self._live
        if live is None:
            return await _aresponse(self._cursor, subagent_crossing(name, input), agent)
        if self._serving():
            return self.subagent(name, agent, input, agent_version=agent_version)
        return await live.asubagent(name, agent, input, agent_version=agent_version)
