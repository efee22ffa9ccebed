"""Runs linked by sub-agent crossings: the tree ``replay show --tree`` draws, and ``--recurse``.

A parent's sub-agent crossing names its child run in its attributes, and the child's
RUN_STARTED names the parent and the crossing's seq (``tracevault.links``). A tree is read
from the parent down, loading each child by id with the same ``load`` as the parent (topic or
archive, verified); a child whose RUN_STARTED does not point back at that crossing is
reported, not followed, so a forged link cannot graft another run into the tree.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tracevault.errors import ConfigError
from tracevault.links import (
    FORKED_FROM_RUN,
    FORKED_FROM_SEQ,
    PARENT_RUN,
    PARENT_SEQ,
    SUBAGENT_PREFIX,
    SUBAGENT_RUN,
    link_of,
)
from tracevault.replayer._results import ReplayResult
from tracevault.replayer.rerun.replay import areplay, replay
from tracevault.replayer.rerun.subagents import collect_children
from tracevault.schemas import EventKind, TraceEvent

__all__ = ["RunNode", "TreeReplay", "children_of", "replay_tree", "run_tree"]

Loader = Callable[[str], Sequence[TraceEvent]]
_MAX_DEPTH = 32


@dataclass(frozen=True, slots=True)
class Child:
    """A sub-agent crossing of a parent: its seq, the sub-agent's name, the child run id."""

    seq: int
    name: str
    run_id: str


def children_of(events: Sequence[TraceEvent]) -> list[Child]:
    out = []
    for ev in events:
        child = ev.attributes.get(SUBAGENT_RUN) if ev.attributes else None
        if child and ev.kind is EventKind.TOOL_CALL:
            tool = json.loads(ev.request).get("tool", "") if ev.request else ""
            out.append(Child(ev.seq, str(tool).removeprefix(SUBAGENT_PREFIX), child))
    return out


def _check_parent(events: Sequence[TraceEvent], parent: str, seq: int) -> str | None:
    first = events[0] if events else None
    link = None if first is None else link_of(first.attributes, PARENT_RUN, PARENT_SEQ)
    if link != (parent, seq):
        return f"its RUN_STARTED names parent {link}, not ({parent!r}, {seq}): not followed"
    return None


@dataclass(frozen=True, slots=True)
class RunNode:
    """One run of a tree, with what ``show --tree`` says of it."""

    run_id: str
    agent: str
    count: int
    finished: bool
    parent: tuple[str, int] | None
    forked_from: tuple[str, int] | None
    children: tuple[tuple[Child, RunNode | str], ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "agent": self.agent,
            "count": self.count,
            "finished": self.finished,
            "parent": None if self.parent is None else list(self.parent),
            "forked_from": None if self.forked_from is None else list(self.forked_from),
            "children": [
                {
                    "seq": c.seq,
                    "name": c.name,
                    "run_id": c.run_id,
                    **({"error": n} if isinstance(n, str) else {"run": n.to_json()}),
                }
                for c, n in self.children
            ],
        }


def run_tree(load: Loader, run_id: str, events: Sequence[TraceEvent], depth: int = 0) -> RunNode:
    """The run and every sub-agent run below it (a child that fails to load says why)."""
    first = events[0] if events else None
    attrs = first.attributes if first is not None else {}
    kids: list[tuple[Child, RunNode | str]] = []
    for child in children_of(events):
        try:
            if depth >= _MAX_DEPTH:
                raise ConfigError(f"sub-agents nested deeper than {_MAX_DEPTH}")
            sub = load(child.run_id)
            problem = _check_parent(sub, run_id, child.seq)
            kids.append((child, problem or run_tree(load, child.run_id, sub, depth + 1)))
        except Exception as exc:  # one missing child must not hide the rest of the tree
            kids.append((child, f"{type(exc).__name__}: {exc}"))
    return RunNode(
        run_id=run_id,
        agent="" if first is None else f"{first.agent.agent_id} {first.agent.agent_version}",
        count=len(events),
        finished=bool(events) and events[-1].kind is EventKind.RUN_FINISHED,
        parent=link_of(attrs, PARENT_RUN, PARENT_SEQ),
        forked_from=link_of(attrs, FORKED_FROM_RUN, FORKED_FROM_SEQ),
        children=tuple(kids),
    )


@dataclass(frozen=True, slots=True)
class TreeReplay:
    """A re-run and, with ``--recurse``, the re-runs of the sub-agents it served."""

    result: ReplayResult
    children: tuple[tuple[Child, TreeReplay | str], ...] = ()

    @property
    def matched(self) -> bool:
        return self.result.matched and all(
            not isinstance(n, str) and n.matched for _, n in self.children
        )

    def to_json(self) -> dict[str, Any]:
        return {
            **self.result.to_json(),
            "tree_matched": self.matched,
            "children": [
                {
                    "seq": c.seq,
                    "name": c.name,
                    "run_id": c.run_id,
                    **({"error": n} if isinstance(n, str) else {"replay": n.to_json()}),
                }
                for c, n in self.children
            ],
        }


def _one(events: Sequence[TraceEvent], agent: Callable[..., Any]) -> ReplayResult:
    if inspect.iscoroutinefunction(agent):
        return asyncio.run(areplay(events, agent, raise_on_divergence=False))
    return replay(events, agent, raise_on_divergence=False)


def replay_tree(
    load: Loader,
    events: Sequence[TraceEvent],
    agent: Callable[..., Any],
    *,
    recurse: bool = True,
    depth: int = 0,
) -> TreeReplay:
    """Re-run ``agent``; with ``recurse``, re-run each served sub-agent against its own run."""
    with collect_children() as agents:
        result = _one(events, agent)
    if not recurse:
        return TreeReplay(result)
    run_id = events[0].run_id if events else ""
    kids: list[tuple[Child, TreeReplay | str]] = []
    for child in children_of(result.served):
        fn = agents.get(child.run_id)
        if fn is None:
            continue
        try:
            if depth >= _MAX_DEPTH:
                raise ConfigError(f"sub-agents nested deeper than {_MAX_DEPTH}")
            sub = load(child.run_id)
            problem = _check_parent(sub, run_id, child.seq)
            kids.append((child, problem or replay_tree(load, sub, fn, depth=depth + 1)))
        except Exception as exc:  # report it under the child; the others still run
            kids.append((child, f"{type(exc).__name__}: {exc}"))
    return TreeReplay(result, tuple(kids))
