"""The links between runs, kept in TraceEvent ``attributes`` (no schema field needed).

A fork (``replay run --until N --then live``) and a sub-agent run are new runs with their own
chains; what ties them to the run they came from is a pair of attributes, written by the
Recorder and read by ``replay show --tree``, ``replay diff`` and ``--recurse``
(docs/design.md, "Investigating a run"):

================================ ==================== ======================================
attribute                        on                   value
================================ ==================== ======================================
``tracevault.site``              every crossing       ``module:function:line`` of the agent
``tracevault.forked_from.run``   a fork's RUN_STARTED the run it was forked from
``tracevault.forked_from.seq``   a fork's RUN_STARTED the last seq served from that run
``tracevault.parent.run``        a child's RUN_STARTED the parent run
``tracevault.parent.seq``        a child's RUN_STARTED the parent's crossing that started it
``tracevault.subagent.run``      that parent crossing the child run
================================ ==================== ======================================

A sub-agent crossing is a TOOL_CALL named ``subagent:<name>`` whose args are the child's
input and whose response is the child's output, so replaying the parent serves it like any
tool result.
"""

from __future__ import annotations

from collections.abc import Mapping

from tracevault.callsite import SITE_ATTRIBUTE
from tracevault.edges import JSON, Crossing, tool_crossing

__all__ = [
    "FORKED_FROM_RUN",
    "FORKED_FROM_SEQ",
    "PARENT_RUN",
    "PARENT_SEQ",
    "SITE_ATTRIBUTE",
    "SUBAGENT_PREFIX",
    "SUBAGENT_RUN",
    "link_of",
    "subagent_crossing",
]

FORKED_FROM_RUN = "tracevault.forked_from.run"
FORKED_FROM_SEQ = "tracevault.forked_from.seq"
PARENT_RUN = "tracevault.parent.run"
PARENT_SEQ = "tracevault.parent.seq"
SUBAGENT_RUN = "tracevault.subagent.run"
SUBAGENT_PREFIX = "subagent:"


def subagent_crossing(name: str, input: JSON) -> Crossing:
    """The parent's crossing of ``edges.subagent(name, agent, input)``."""
    return tool_crossing(SUBAGENT_PREFIX + name, input)


def link_of(attributes: Mapping[str, str], run_key: str, seq_key: str) -> tuple[str, int] | None:
    """``(run, seq)`` from a pair of link attributes, or None when the event has no such link."""
    run = attributes.get(run_key)
    seq = attributes.get(seq_key)
    if run is None or seq is None or not seq.isdigit():
        return None
    return run, int(seq)
