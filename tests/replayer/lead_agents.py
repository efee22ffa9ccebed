"""A lead agent that hands research to a sub-agent, for the fork, tree and diff tests.

Module-level callables, so the CLI can load them as ``tests.replayer.lead_agents:NAME``.
"""

from __future__ import annotations

from typing import Any

from tests.replayer import agents

ROUTE = {"choice": "answer"}  # read behind the edges' back: what a diff must find


def _research(task: Any, edges: Any, seed: int) -> Any:
    hits = edges.tool("search", {"q": task["q"]})
    summary = edges.model(
        {"messages": [{"role": "user", "content": f"summarize {hits['urls'][0]}"}]},
        model=agents.MODEL,
        seed=seed,
    )
    return {"summary": summary["text"], "n": len(hits["urls"])}


def researcher(task: Any, edges: Any) -> Any:
    return _research(task, edges, 1)


def sloppy_researcher(task: Any, edges: Any) -> Any:
    """The researcher after a change: another seed, so its own run diverges at seq 2."""
    return _research(task, edges, 2)


def _lead(task: Any, edges: Any, research: Any) -> Any:
    edges.clock()
    edges.random("jitter")
    plan = edges.model(
        {"messages": [{"role": "user", "content": "plan: " + task["question"]}]},
        model=agents.MODEL,
        seed=agents.SEED,
    )
    found = edges.subagent("researcher", research, {"q": plan["query"]})
    page = edges.tool("fetch", {"url": "https://example.org/boiling"})
    edges.decision("route", ROUTE["choice"], options=["answer", "escalate"])
    answer = edges.model(
        {"messages": [{"role": "user", "content": task["question"]},
                      {"role": "tool", "content": page["body"]}]},
        model=agents.MODEL,
        seed=agents.SEED,
    )  # fmt: skip
    return {"answer": answer["text"], "found": found["n"]}


def lead_agent(task: Any, edges: Any) -> Any:
    return _lead(task, edges, researcher)


def lead_with_sloppy_researcher(task: Any, edges: Any) -> Any:
    return _lead(task, edges, sloppy_researcher)


def live_edges() -> Any:
    """The agent's own model and tools, for a fork's live part (the default factory)."""
    return {"model": agents.fake_model, "tools": agents.TOOLS}


def _hotter_fetch(args: Any) -> Any:
    return {"url": args["url"], "body": "Water boils at about 99 °C at 2000 m (a bad page)."}


def changed_fetch() -> Any:
    """What if the page had said something else: the fetch tool changed, the rest live."""
    return {"model": agents.fake_model, "tools": {**agents.TOOLS, "fetch": _hotter_fetch}}


def failing_researcher(task: Any, edges: Any) -> Any:
    edges.tool("fetch", {"url": "https://example.org/missing"})  # raises FileNotFoundError
    return {"n": 0}


async def async_lead(task: Any, edges: Any) -> Any:
    """Async, and its sub-agent fails: the parent catches the child's error and goes on."""
    try:
        found = await edges.asubagent("researcher", failing_researcher, {"q": task["question"]})
    except FileNotFoundError as exc:
        found = {"n": -1, "why": str(exc)}
    await edges.atool("search", {"q": "fallback"})
    return found
