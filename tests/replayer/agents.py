"""Agents for the replayer's tests: one honest agent and the variants of the divergence corpus.

Each variant changes exactly one thing against ``research_agent`` so ``replay run`` must
name one seq and one difference. They are module-level callables so the CLI can load them
as ``tests.replayer.agents:NAME``.
"""

from __future__ import annotations

import contextlib
from typing import Any

MODEL = "gpt-4o-2024-08-06"
OTHER_MODEL = "gpt-4o-2024-11-20"
SEED = 7
INPUT = {"question": "What is the boiling point of water at 2000 m?"}


def fake_model(request: Any, *, model: str, seed: int | None) -> Any:
    """A deterministic stand-in for a model: the answer depends on the request only."""
    text = request["messages"][-1]["content"]
    if text.startswith("plan:"):
        return {"query": "boiling point altitude 2000 m", "tokens": 12}
    return {"text": f"About 93 °C ({len(text)} chars of context)", "tokens": 40}


def _search(args: Any) -> Any:
    q = args["q"]
    return {"urls": ["https://example.org/boiling", "https://example.org/altitude"], "q": q}


def _fetch(args: Any) -> Any:
    url = args["url"]
    if "missing" in url:
        raise FileNotFoundError(f"no such page: {url}")
    return {"url": url, "body": "Water boils at about 93.4 °C at 2000 m."}


class QuotaExceededError(Exception):
    """An agent-defined error: replay raises it as this class again (its module is imported)."""


def _quota(args: Any) -> Any:
    raise QuotaExceededError(f"quota of {args['user']} exhausted")


TOOLS = {"search": _search, "fetch": _fetch, "quota": _quota}
STATES = {"inventory": {"pages_cached": 3}}


def _inventory() -> Any:
    return STATES["inventory"]


async def _ainventory() -> Any:
    return STATES["inventory"]


def _agent(
    agent_input: Any,
    edges: Any,
    *,
    prompt: str = "plan: ",
    model: str = MODEL,
    seed: int = SEED,
    extra_tool: bool = False,
    skip_fetch: bool = False,
    reorder: bool = False,
    extra_clock: bool = False,
    go_choice: str = "answer",
) -> Any:
    started = edges.clock()
    rng = edges.random("sampling")
    plan = edges.model(
        {"messages": [{"role": "user", "content": prompt + agent_input["question"]}]},
        model=model,
        seed=seed,
    )
    if extra_clock:
        edges.clock("timeout_check")
    if reorder:
        page = edges.tool("fetch", {"url": "https://example.org/boiling"})
        found = edges.tool("search", {"q": plan["query"]})
    else:
        found = edges.tool("search", {"q": plan["query"]})
        page = None if skip_fetch else edges.tool("fetch", {"url": found["urls"][0]})
    if extra_tool:
        edges.tool("search", {"q": "again"})
    cached = edges.state("inventory", read=_inventory)
    go = edges.decision("next", go_choice, options=["answer", "search_more"])
    answer = edges.model(
        {
            "messages": [
                {"role": "user", "content": agent_input["question"]},
                {"role": "tool", "content": (page or {}).get("body", "")},
            ]
        },
        model=model,
        seed=seed,
    )
    return {
        "answer": answer["text"],
        "pick": rng.randint(0, 1000),
        "cached": cached["pages_cached"],
        "took": edges.clock() - started,
        "go": go,
    }


def research_agent(agent_input: Any, edges: Any) -> Any:
    return _agent(agent_input, edges)


async def async_research_agent(agent_input: Any, edges: Any) -> Any:
    started = edges.clock()
    plan = await edges.amodel(
        {"messages": [{"role": "user", "content": "plan: " + agent_input["question"]}]},
        model=MODEL,
        seed=SEED,
    )
    found = await edges.atool("search", {"q": plan["query"]})
    cached = await edges.astate("inventory", read=_ainventory)
    return {"urls": found["urls"], "cached": cached, "took": edges.clock() - started}


def changed_prompt_agent(agent_input: Any, edges: Any) -> Any:
    return _agent(agent_input, edges, prompt="plan carefully: ")


def extra_tool_agent(agent_input: Any, edges: Any) -> Any:
    return _agent(agent_input, edges, extra_tool=True)


def missing_call_agent(agent_input: Any, edges: Any) -> Any:
    return _agent(agent_input, edges, skip_fetch=True)


def reordered_tools_agent(agent_input: Any, edges: Any) -> Any:
    return _agent(agent_input, edges, reorder=True)


def extra_clock_agent(agent_input: Any, edges: Any) -> Any:
    return _agent(agent_input, edges, extra_clock=True)


def four_changes_agent(agent_input: Any, edges: Any) -> Any:
    """A changed prompt, an inserted clock read, a fetch left out, another decision."""
    return _agent(
        agent_input,
        edges,
        prompt="plan carefully: ",
        extra_clock=True,
        skip_fetch=True,
        go_choice="search_more",
    )


def other_model_agent(agent_input: Any, edges: Any) -> Any:
    return _agent(agent_input, edges, model=OTHER_MODEL)


def other_seed_agent(agent_input: Any, edges: Any) -> Any:
    return _agent(agent_input, edges, seed=SEED + 1)


def failing_tool_agent(agent_input: Any, edges: Any) -> Any:
    """Catches a tool's FileNotFoundError and goes on: replay must take the same branch."""
    try:
        edges.tool("fetch", {"url": "https://example.org/missing"})
    except FileNotFoundError as exc:
        note = f"fallback after {type(exc).__name__}"
    return {"note": note, "t": edges.clock()}


def crashing_agent(agent_input: Any, edges: Any) -> Any:
    """Lets the tool's error escape: the run records ERROR then RUN_FINISHED."""
    edges.clock()
    return edges.tool("fetch", {"url": "https://example.org/missing"})


def swallowing_agent(agent_input: Any, edges: Any) -> Any:
    """Hides every exception, the replayer's divergence included: replay must still report it."""
    with contextlib.suppress(Exception):
        edges.tool("search", {"q": "something else"})
    return {"fine": True}


def quota_agent(agent_input: Any, edges: Any) -> Any:
    try:
        edges.tool("quota", {"user": "u1"})
    except QuotaExceededError as exc:
        return {"handled": str(exc)}
    return {"handled": None}
