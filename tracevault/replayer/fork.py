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

This module imports the producer (and so the Kafka client); ``tracevault.replayer`` itself
does not.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tracevault.edges import JSON
from tracevault.errors import ConfigError, ReplayDivergence
from tracevault.links import FORKED_FROM_RUN, FORKED_FROM_SEQ
from tracevault.producer import Publisher, Recorder, Tool
from tracevault.replayer._edges import ReplayCursor, ReplayEdges
from tracevault.replayer._results import DivergenceReport
from tracevault.schemas import EventKind, TraceEvent

__all__ = ["ForkEdges", "ForkResult", "fork_run", "live_edges_from"]


@dataclass(frozen=True, slots=True)
class ForkResult:
    """The new run: its id, where it came from, how it ended."""

    run_id: str
    forked_from: tuple[str, int]
    served: int
    output: Any = None
    error: str | None = None
    divergence: DivergenceReport | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "forked_from": {"run_id": self.forked_from[0], "seq": self.forked_from[1]},
            "served": self.served,
            "output": self.output,
            "error": self.error,
            "divergence": None if self.divergence is None else self.divergence.to_json(),
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

    def __init__(self, events: Sequence[TraceEvent], until: int) -> None:
        self.cursor = ReplayCursor(events[0].run_id, events, until)
        super().__init__(self.cursor)
        self.until = until
        self._rec: Recorder | None = None

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

    def tool_table(self, live: Mapping[str, Any], recorded: set[str]) -> dict[str, Tool]:
        """Each tool the record or the live edges know, served or live as the fork stands."""
        table: dict[str, Tool] = {}
        for name in set(live) | recorded:
            fn = live.get(name)
            tool = fn if isinstance(fn, Tool) else None if fn is None else Tool(fn)
            table[name] = Tool(
                self._tool_fn(name, tool), side_effect=bool(tool and tool.side_effect)
            )
        return table

    def _tool_fn(self, name: str, tool: Tool | None) -> Callable[..., Any]:
        def call(args: JSON, idempotency_key: str | None = None) -> Any:
            if self.serving():
                return self._served_tool(name, args)
            if tool is None:
                raise ConfigError(f"tool {name!r} is not among the live edges (--live-edges)")
            if tool.side_effect:
                return tool.fn(args, idempotency_key=idempotency_key)
            return tool.fn(args)

        return call


def _recorded_tools(events: Sequence[TraceEvent]) -> set[str]:
    names = set()
    for ev in events:
        if ev.kind is EventKind.TOOL_CALL and ev.request:
            tool = json.loads(ev.request).get("tool")
            if isinstance(tool, str) and tool:
                names.add(tool)
    return names


def fork_run(
    events: Sequence[TraceEvent],
    agent: Callable[..., Any],
    *,
    until: int,
    publisher: Publisher,
    model: Callable[..., Any] | None = None,
    tools: Mapping[str, Any] | None = None,
    run_id: str | None = None,
) -> ForkResult:
    """Serve ``events`` to ``agent`` up to seq ``until``, then go on live; record a new run.

    ``model`` and ``tools`` are the live edges (as ``Recorder`` takes them). The new run is
    published through ``publisher``; call ``publisher.flush()`` before reading it back.
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
    edges = ForkEdges(events, until)
    recorder = Recorder(
        publisher=publisher,
        agent_id=first.agent.agent_id,
        agent_version=first.agent.agent_version,
        model=model,
        tools=edges.tool_table(dict(tools or {}), _recorded_tools(events)),
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
    )
