"""Agents whose crossings run in tasks and threads they start: the call site must be theirs.

Each crossing's line carries a ``# site: NAME`` marker; :func:`line` finds it, so the tests
do not hard-code line numbers.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

_SOURCE = Path(__file__).read_text(encoding="utf-8").splitlines()


def line(marker: str) -> int:
    """The line number holding ``# site: marker``."""
    (found,) = [i + 1 for i, text in enumerate(_SOURCE) if text.endswith(f"# site: {marker}")]
    return found


async def gather_agent(agent_input: Any, edges: Any) -> Any:
    first, second = await asyncio.gather(
        edges.atool("search", {"q": "a"}),  # site: gather-a
        edges.atool("search", {"q": "b"}),  # site: gather-b
    )
    edges.decision("done", "yes")  # site: gather-done
    return [first["q"], second["q"]]


async def taskgroup_agent(agent_input: Any, edges: Any) -> Any:
    async with asyncio.TaskGroup() as tg:
        one = tg.create_task(edges.atool("search", {"q": "x"}))  # site: tg-x
        two = tg.create_task(edges.astate("inventory", _inventory))  # site: tg-state
    return [one.result()["q"], two.result()]


async def _inventory() -> Any:
    return {"umbrellas": 3}


def _branch(edges: Any, q: str) -> Any:
    return edges.tool("search", {"q": q})  # site: thread


def thread_agent(agent_input: Any, edges: Any) -> Any:
    with ThreadPoolExecutor(max_workers=2) as pool:
        found = list(pool.map(lambda q: _branch(edges, q), ["p", "q"]))
    return [f["q"] for f in found]


# -- a concurrent agent and its changed versions (right seq, right headline) ----------------
BUILD = "gpt-4o-mini-2024-07-18"


async def asearch(args: Any) -> Any:
    await asyncio.sleep(0)  # the branches overlap: the record is interleaved
    return {"q": args["q"], "hits": len(args["q"])}


async def acalc(args: Any) -> Any:
    await asyncio.sleep(0)
    return {"value": args["x"] * 2}


async def amodel(request: Any, *, model: Any, seed: Any) -> Any:
    """An SDK-style provider: the build that answered is in its response (model=None)."""
    await asyncio.sleep(0)
    return {"model": BUILD, "text": f"said {request['messages'][-1]['content']}"}


ATOOLS = {"search": asearch, "calc": acalc}


async def _branch_model(edges: Any, prompt: str) -> Any:
    request = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": prompt}]}
    return await edges.amodel(request, model=None, call=amodel)


async def _concurrent(edges: Any, *, extra_clock: bool, swap: bool, prompt: str) -> Any:
    edges.clock()
    if extra_clock:
        edges.clock()  # site: extra-clock
    a, b = await asyncio.gather(
        edges.atool("search", {"q": "alpha"}), edges.atool("search", {"q": "beta"})
    )
    said = await asyncio.gather(_branch_model(edges, prompt), _branch_model(edges, "two"))
    if swap:
        first = await edges.atool("calc", {"x": a["hits"]})  # site: swapped
        second = await edges.atool("search", {"q": "gamma"})
    else:
        second = await edges.atool("search", {"q": "gamma"})
        first = await edges.atool("calc", {"x": a["hits"]})
    edges.clock()  # site: last-clock
    return [a["q"], b["q"], first["value"], second["q"], [s["text"] for s in said]]


async def concurrent_agent(agent_input: Any, edges: Any) -> Any:
    return await _concurrent(edges, extra_clock=False, swap=False, prompt="one")


async def extra_clock_agent(agent_input: Any, edges: Any) -> Any:
    return await _concurrent(edges, extra_clock=True, swap=False, prompt="one")


async def swapped_agent(agent_input: Any, edges: Any) -> Any:
    return await _concurrent(edges, extra_clock=False, swap=True, prompt="one")


async def changed_prompt_agent(agent_input: Any, edges: Any) -> Any:
    return await _concurrent(edges, extra_clock=False, swap=False, prompt="ONE")
