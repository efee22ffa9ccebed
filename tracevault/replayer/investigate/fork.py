"""What-if: serve a recorded run up to seq N, then continue it live, recorded as a new run.

``replay run RUN --until N --then live --agent MOD:FN [--live-edges MOD:FACTORY]``.
The agent runs once, against :class:`ForkEdges`: while the record has crossings up to seq N,
each crossing is checked and served from the record exactly as under replay; after that it
goes to the live model and tools the user supplies. Every crossing, served or live, goes
through a real :class:`~tracevault.producer.Recorder` into a new run whose RUN_STARTED carries
``tracevault.forked_from.run`` and ``.seq`` (``tracevault.links``), so its first N+1 events
hold the original's kinds, requests and responses and ``replay diff RUN FORK`` shows what
the live continuation changed.

The live edges come from a factory the agent's module exposes (``live_edges()`` by default,
or ``--live-edges MOD:FACTORY``), called with no arguments, returning what a Recorder is
built with: ``{"model": call_model, "tools": {"search": search, ...}}`` (either may be left
out). It is the agent's own model and tools, or changed ones: that is the what-if.

A fork is safe by default: an investigator asking "what if" does not expect mail to go out.
After seq N a side-effecting tool (``Tool(fn, side_effect=True)`` in the live edges, or one
the record gave an idempotency key) is not run unless named in ``live_tools``
(``--live-tools send_email``). Its call is answered with the recorded result of a call with
the same request made after N (each at most once; the new run's crossing names it in
``tracevault.forked_from.served``); a call the record does not have is refused with a
:class:`ForkRefusalError` naming the tool, what differs and the flag. Models and read-only tools
go live.

This module imports the producer (and so the Kafka client); ``tracevault.replayer`` itself
does not.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence, Set
from dataclasses import dataclass
from typing import Any

from tracevault.edges import JSON, tool_crossing
from tracevault.errors import ConfigError, ForkRefusalError, ReplayDivergence
from tracevault.links import FORKED_FROM_RUN, FORKED_FROM_SEQ
from tracevault.producer import Publisher, Recorder, Tool
from tracevault.replayer._json_diff import json_diff
from tracevault.replayer._results import DivergenceReport
from tracevault.replayer.rerun.edges import ReplayCursor, ReplayEdges, _response
from tracevault.schemas import EventKind, TraceEvent, canonical_json_like

__all__ = [
    "SERVED_FROM",
    "ForkEdges",
    "ForkRefusalError",
    "ForkResult",
    "fork_run",
    "live_edges_from",
]


#: Attribute of a fork's crossing answered from the record after N: ``<run>:<seq>`` it came from.
SERVED_FROM = "tracevault.forked_from.served"


@dataclass(frozen=True, slots=True)
class ForkResult:
    """The new run: its id, where it came from, how it ended, what it refused to run."""

    run_id: str
    forked_from: tuple[str, int]
    served: int
    output: Any = None
    error: str | None = None
    divergence: DivergenceReport | None = None
    refused: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "forked_from": {"run_id": self.forked_from[0], "seq": self.forked_from[1]},
            "served": self.served,
            "output": self.output,
            "error": self.error,
            "divergence": None if self.divergence is None else self.divergence.to_json(),
            "refused": list(self.refused),
        }


def live_edges_from(made: object, spec: str) -> tuple[Callable[..., Any] | None, dict[str, Any]]:
    """``(model, tools)`` from what a live-edges factory returned, or a ConfigError naming it."""
    if not isinstance(made, Mapping) or not set(made) <= {"model", "tools"}:
        raise ConfigError(
            f"--live-edges {spec} must return a mapping with 'model' and/or 'tools' "
            "(what Recorder(model=..., tools=...) takes)"
        )
    model = made.get("model")
    tools = made.get("tools") or {}
    if model is not None and not callable(model):
        raise ConfigError(f"--live-edges {spec}: 'model' is not callable")
    if not isinstance(tools, Mapping):
        raise ConfigError(f"--live-edges {spec}: 'tools' must map names to callables")
    return model, dict(tools)


class ForkEdges(ReplayEdges):
    """The agent's edges in a fork: replayed up to seq ``until``, live after, all recorded.

    The served edge (:class:`ReplayEdges`) with the new run's Recorder behind it.
    """

    def __init__(
        self, events: Sequence[TraceEvent], until: int, live_tools: Iterable[str] = ()
    ) -> None:
        self.cursor = ReplayCursor(events[0].run_id, events, until)
        super().__init__(self.cursor)
        self.until = until
        self.live_tools = frozenset(live_tools)
        self.refused: list[str] = []
        self._rec: Recorder | None = None
        # the record's calls after N, by request: what a side-effecting tool may be served
        self._after: dict[str, list[TraceEvent]] = {}
        for ev in events:
            if ev.seq > until and ev.kind is EventKind.TOOL_CALL and ev.request:
                self._after.setdefault(_tool_name(ev), []).append(ev)

    @property
    def rec(self) -> Recorder:
        """The new run's Recorder (built with this object's tool table and clock)."""
        if self._rec is None:
            raise ConfigError("ForkEdges.attach(recorder) was not called")
        return self._rec

    def attach(self, recorder: Recorder) -> None:
        self._rec = recorder

    @property
    def _live(self) -> Recorder:
        return self.rec

    @property
    def run_id(self) -> str:
        return self.rec.run_id

    def serving(self) -> bool:
        """True while the record still has a crossing at or before seq ``until`` to serve."""
        c = self.cursor
        c.raise_if_diverged()  # an agent that swallowed the divergence does not go live
        nxt = c.peek()
        return (
            nxt is not None
            and nxt.seq <= self.until
            and nxt.kind not in (EventKind.ERROR, EventKind.RUN_FINISHED, EventKind.GAP)
        )

    _serving = serving

    # -- what the Recorder calls --------------------------------------------------------
    def served_clock(self, live: Callable[[], float]) -> Callable[[str], float]:
        def read(name: str) -> float:
            return self._served_clock(name) if self.serving() else live()

        return read

    def tool_table(
        self, live: Mapping[str, Any], recorded: Set[str], effects: Set[str] = frozenset()
    ) -> dict[str, Tool]:
        """Each tool the record or the live edges know, served or live as the fork stands.

        ``effects``: tools the record shows with side effects (an idempotency key).
        """
        unknown = sorted(self.live_tools - (set(live) | recorded))
        if unknown:
            known = ", ".join(sorted(set(live) | recorded)) or "none"
            raise ConfigError(
                f"--live-tools names {', '.join(map(repr, unknown))}, not a tool of the live "
                f"edges or the record (tools: {known})"
            )
        table: dict[str, Tool] = {}
        for name in set(live) | recorded:
            fn = live.get(name)
            tool = fn if isinstance(fn, Tool) else None if fn is None else Tool(fn)
            effect = bool(tool and tool.side_effect) or name in effects
            table[name] = Tool(self._tool_fn(name, tool, effect), side_effect=effect)
        return table

    def _tool_fn(self, name: str, tool: Tool | None, effect: bool) -> Callable[..., Any]:
        held = effect and name not in self.live_tools  # safe by default: not run for real

        def call(args: JSON, idempotency_key: str | None = None) -> Any:
            if self.serving():
                return self._served_tool(name, args)
            if held:
                return self._recorded_effect(name, args)
            if tool is None:
                raise ConfigError(f"tool {name!r} is not among the live edges (--live-edges)")
            if tool.side_effect:
                return tool.fn(args, idempotency_key=idempotency_key)
            return tool.fn(args)

        return call

    def _recorded_effect(self, name: str, args: JSON) -> JSON:
        """A held side-effecting call after N: the record's answer to the same request, or no."""
        request = tool_crossing(name, args).request
        calls = self._after.get(name, [])
        for i, ev in enumerate(calls):
            if canonical_json_like(request, ev.request, field="request") == ev.request:
                del calls[i]  # each recorded call answers once: a second send is a new one
                self.rec.note_current(SERVED_FROM, f"{ev.run_id}:{ev.seq}")
                return _response(ev)
        nearest = calls[0] if calls else None
        if nearest is None:
            what = f"the record has no further {name!r} call after seq {self.until}"
        else:
            diff = json_diff(json.loads(nearest.request), request, "$.request")
            what = f"it differs from the recorded call at seq {nearest.seq}: " + "; ".join(diff[:3])
        message = (
            f"fork: tool {name!r} has side effects and was not run: {what}. A fork does "
            f"not repeat side effects unless asked; to run it for real, name it: "
            f"--live-tools {name}"
        )
        self.refused.append(message)
        raise ForkRefusalError(message)


def _tool_name(ev: TraceEvent) -> str:
    tool = json.loads(ev.request).get("tool")
    return tool if isinstance(tool, str) else ""


def _recorded_tools(events: Sequence[TraceEvent]) -> tuple[set[str], set[str]]:
    """The tools the record calls, and those of them it gave an idempotency key."""
    names: set[str] = set()
    effects: set[str] = set()
    for ev in events:
        if ev.kind is EventKind.TOOL_CALL and ev.request and (tool := _tool_name(ev)):
            names.add(tool)
            if ev.idempotency_key is not None:
                effects.add(tool)
    return names, effects


def fork_run(
    events: Sequence[TraceEvent],
    agent: Callable[..., Any],
    *,
    until: int,
    publisher: Publisher,
    model: Callable[..., Any] | None = None,
    tools: Mapping[str, Any] | None = None,
    run_id: str | None = None,
    live_tools: Iterable[str] = (),
) -> ForkResult:
    """Serve ``events`` to ``agent`` up to seq ``until``, then go on live; record a new run.

    ``model`` and ``tools`` are the live edges (as ``Recorder`` takes them); of the
    side-effecting tools only those in ``live_tools`` run for real after ``until`` (module
    docstring). The new run is published through ``publisher``; call ``publisher.flush()``
    before reading it back.
    """
    if not events or events[0].kind is not EventKind.RUN_STARTED:
        raise ConfigError("fork needs the whole run, from its RUN_STARTED at seq 0")
    if until < 0:
        raise ConfigError(f"--until must be a seq >= 0, got {until}")
    first = events[0]
    req = json.loads(first.request) if first.request else None
    if not isinstance(req, dict) or "input" not in req:
        raise ConfigError(f"run {first.run_id}: seq 0 request has no 'input'")
    new_id = run_id or str(uuid.uuid4())
    edges = ForkEdges(events, until, live_tools)
    recorded, effects = _recorded_tools(events)
    recorder = Recorder(
        publisher=publisher,
        agent_id=first.agent.agent_id,
        agent_version=first.agent.agent_version,
        model=model,
        tools=edges.tool_table(dict(tools or {}), recorded, effects),
        run_id=new_id,
        attributes={FORKED_FROM_RUN: first.run_id, FORKED_FROM_SEQ: str(until)},
        clock=edges.served_clock(time.time),
    )
    edges.attach(recorder)
    output: Any = None
    error: str | None = None
    try:
        if inspect.iscoroutinefunction(agent):
            output = asyncio.run(recorder.arun(lambda i, _r: agent(i, edges), req["input"]))
        else:
            output = recorder.run(lambda i, _r: agent(i, edges), req["input"])
    except ReplayDivergence:
        error = f"the agent left the record before seq {until} (see divergence)"
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
    return ForkResult(
        run_id=new_id,
        forked_from=(first.run_id, until),
        served=edges.cursor.pos,
        output=output,
        error=error,
        divergence=edges.cursor.report,
        refused=tuple(edges.refused),
    )
