"""Sub-agent crossings under replay: served from the record, remembered for ``--recurse``.

Replaying a parent serves each ``edges.subagent(name, agent, input)`` the child's recorded
output without running the child. To replay the child as well, the agent callable the parent
passed is noted against the child run id found in the crossing's attributes
(``tracevault.links``), in a context variable that :func:`collect_children` opens around a
re-run; ``replay_tree`` (``investigate.tree``) then re-runs each child with it.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator
from typing import Any

from tracevault.edges import JSON, Crossing
from tracevault.links import SUBAGENT_RUN, subagent_crossing
from tracevault.schemas import TraceEvent

__all__ = ["collect_children", "note_child", "serve_subagent"]

_CHILDREN: contextvars.ContextVar[dict[str, Callable[..., Any]] | None] = contextvars.ContextVar(
    "tracevault_replay_children", default=None
)


def serve_subagent(
    expect: Callable[[Crossing], TraceEvent], name: str, agent: Callable[..., Any], input: JSON
) -> TraceEvent:
    """The recorded sub-agent crossing (``expect`` is the replay cursor's), its agent noted."""
    ev = expect(subagent_crossing(name, input))
    note_child(ev, agent)
    return ev


def note_child(ev: TraceEvent, agent: Callable[..., Any]) -> None:
    """Remember ``agent`` as the callable of the child run ``ev`` started (when collecting)."""
    found = _CHILDREN.get()
    child = ev.attributes.get(SUBAGENT_RUN) if ev.attributes else None
    if found is not None and child:
        found[child] = agent


@contextlib.contextmanager
def collect_children() -> Iterator[dict[str, Callable[..., Any]]]:
    """Child run id → the agent callable the parent passed, for every sub-agent it served."""
    found: dict[str, Callable[..., Any]] = {}
    token = _CHILDREN.set(found)
    try:
        yield found
    finally:
        _CHILDREN.reset(token)
