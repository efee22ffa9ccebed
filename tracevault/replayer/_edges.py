"""The replay edges: every crossing is served from the record, none touches the network.

Each call builds its crossing with the same ``*_crossing`` function the Recorder uses
(``tracevault.edges``), so the request compared here is byte for byte what the Recorder
would have published. The first difference becomes a :class:`ReplayDivergence`, which is
also remembered: an agent that swallows exceptions (``except Exception``) cannot hide it,
because every later call and the end of the run raise it again.
"""

from __future__ import annotations

import dataclasses
import json
import random
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from tracevault.edges import (
    JSON,
    Crossing,
    clock_crossing,
    decision_crossing,
    model_call_crossing,
    random_crossing,
    state_crossing,
    tool_crossing,
)
from tracevault.errors import ReplayDivergence
from tracevault.replayer._diff import json_diff, short_json
from tracevault.replayer._recorded_error import raise_recorded
from tracevault.replayer._results import DivergenceReport, StepSummary
from tracevault.replayer._subagents import serve_subagent
from tracevault.schemas import EventKind, TraceEvent, canonical_json_like

__all__ = ["NEXT_SHOWN", "ReplayCursor", "ReplayEdges", "StopReplay"]

NEXT_SHOWN = 3


class StopReplay(BaseException):
    """Raised inside the agent when ``--until N`` is reached.

    A BaseException so an agent's ``except Exception`` does not swallow it.
    """


def _loads(data: bytes) -> Any:
    return json.loads(data) if data else None


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
    ) -> ReplayDivergence:
        ev = self.peek()
        report = DivergenceReport(
            run_id=self.run_id,
            seq=self.next_seq(),
            expected=None if ev is None else ev.kind.value,
            actual=actual_kind,
            reason=reason,
            diff=diff,
            expected_request=None if ev is None else _loads(ev.request),
            actual_request=actual_request,
            next_in_record=tuple(
                StepSummary.of(e) for e in self.events[self.pos : self.pos + NEXT_SHOWN]
            ),
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
    def expect(self, crossing: Crossing) -> TraceEvent:
        """Match ``crossing`` against the next recorded event and consume it, or diverge."""
        self.raise_if_diverged()
        self.check_stop()
        ev = self.peek()
        actual_req = crossing.request
        # in the recorded event's own form: a record made before RFC 8785 still matches
        actual_bytes = canonical_json_like(
            actual_req, None if ev is None else ev.request, field="request"
        )
        kind = crossing.kind.value
        if ev is None:
            raise self.diverge(
                f"the agent made an extra {kind} call after the record ended",
                actual_kind=kind,
                diff=json_diff(None, actual_req, "$.request"),
                actual_request=actual_req,
            )
        if ev.kind is EventKind.GAP:
            raise self.diverge(
                f"the record has a GAP marker at seq {ev.seq} (events never reached the "
                f"sequencer: {short_json(_loads(ev.request))}); replay cannot serve past it — "
                f"use --until {ev.seq - 1} to rebuild the state before it",
                actual_kind=kind,
                actual_request=actual_req,
            )
        if ev.kind is not crossing.kind:
            raise self.diverge(
                f"the agent made a {kind} call where the record has {ev.kind.value}",
                actual_kind=kind,
                diff=json_diff(_loads(ev.request), actual_req, "$.request"),
                actual_request=actual_req,
            )
        diff: list[str] = []
        if ev.model != crossing.model:
            diff.append(
                f"$.model: expected {short_json(ev.model)}, got {short_json(crossing.model)}"
            )
        if self._seed_differs(ev, crossing):
            diff.append(f"$.seed: expected {short_json(ev.seed)}, got {short_json(crossing.seed)}")
        if actual_bytes != ev.request:
            diff.extend(json_diff(_loads(ev.request), actual_req, "$.request"))
            if len(diff) == 0:  # e.g. a record from before RFC 8785 holds 1.0, the re-run 1
                diff.append(
                    "$.request: the same JSON value, in other canonical bytes than the record's"
                )
        if diff:
            what = (
                "model"
                if diff[0].startswith("$.model")
                else "seed"
                if diff[0].startswith("$.seed")
                else "request"
            )
            raise self.diverge(
                f"the {kind} call's {what} differs from the record",
                actual_kind=kind,
                diff=tuple(diff),
                actual_request=actual_req,
            )
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

    @staticmethod
    def _seed_differs(ev: TraceEvent, crossing: Crossing) -> bool:
        if crossing.kind is EventKind.RANDOM:
            # seed=None live means "draw one and record it": replay then serves the recorded one.
            return crossing.seed is not None and crossing.seed != ev.seed
        return crossing.seed != ev.seed


def _response(ev: TraceEvent) -> JSON:
    if ev.error is not None:
        raise_recorded(ev.error)
    return _loads(ev.response)


class ReplayEdges:
    """:class:`tracevault.edges.Edges` served from a record; built by ``replay``/``areplay``."""

    def __init__(self, cursor: ReplayCursor) -> None:
        self._cursor = cursor

    @property
    def run_id(self) -> str:
        return self._cursor.run_id

    def model(
        self,
        request: JSON,
        *,
        model: str | None,
        seed: int | None = None,
        call: Callable[..., Any] | None = None,
    ) -> JSON:
        crossing = model_call_crossing(request, model=model, seed=seed, call=call)
        if crossing.model is None:
            # The build the provider reported is its output, served from the record like the
            # response; the requested model is compared inside the request (edges.py).
            ev = self._cursor.peek()
            if ev is not None and ev.kind is EventKind.MODEL_CALL:
                crossing = dataclasses.replace(crossing, model=ev.model)
        return _response(self._cursor.expect(crossing))

    async def amodel(
        self,
        request: JSON,
        *,
        model: str | None,
        seed: int | None = None,
        call: Callable[..., Any] | None = None,
    ) -> JSON:
        return self.model(request, model=model, seed=seed, call=call)

    def tool(self, name: str, args: JSON) -> JSON:
        return _response(self._cursor.expect(tool_crossing(name, args)))

    async def atool(self, name: str, args: JSON) -> JSON:
        return self.tool(name, args)

    def clock(self, name: str = "now") -> float:
        value = _response(self._cursor.expect(clock_crossing(name)))
        return float(value["time"])

    def random(self, name: str = "rng", *, seed: int | None = None) -> random.Random:
        ev = self._cursor.expect(random_crossing(name, seed))
        recorded = ev.seed
        if recorded is None:
            resp = _response(ev)
            recorded = resp.get("seed") if isinstance(resp, dict) else None
        return random.Random(recorded)

    def state(self, name: str, read: Callable[[], JSON] | None = None) -> JSON:
        return _response(self._cursor.expect(state_crossing(name)))

    async def astate(self, name: str, read: Callable[[], Awaitable[JSON]] | None = None) -> JSON:
        return self.state(name)

    def decision(self, name: str, choice: JSON, *, options: list[JSON] | None = None) -> JSON:
        self._cursor.expect(decision_crossing(name, choice, options))
        return choice

    def subagent(
        self, name: str, agent: Callable[..., Any], input: JSON, *, agent_version: str | None = None
    ) -> JSON:
        return _response(serve_subagent(self._cursor.expect, name, agent, input))

    async def asubagent(
        self, name: str, agent: Callable[..., Any], input: JSON, *, agent_version: str | None = None
    ) -> JSON:
        return self.subagent(name, agent, input, agent_version=agent_version)
