"""The concurrency patterns of issue 34 not written elsewhere: nested gathers, a TaskGroup,
``as_completed``. Each puts what its branches saw of one another (a shared list) into its
requests, and every callee sleeps a random while, so live the order differs from run to run
and a replay that hands results back in another order than the record makes other requests.

gather, threads, race, ``wait_for`` and ``cancel()`` are ``concurrent_agents`` and
``cancel_agents``; ``tests/replayer/test_saturated_replay.py`` replays them all under load.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tests.replayer import concurrent_agents as ca

MODEL = ca.MODEL
INPUT = ca.INPUT
TOOLS = ca.ASYNC_TOOLS


async def _leaf(edges: Any, i: int, j: int, plan: Any, shared: list[str]) -> int:
    found = await edges.atool("search", {"branch": i, "leaf": j, "q": plan["text"],
                                         "seen": list(shared)})  # fmt: skip
    shared.append(f"{i}.{j}")
    return len(found["hits"])


async def _nested_branch(edges: Any, i: int, topic: str, shared: list[str]) -> Any:
    plan = await edges.amodel({"prompt": f"plan {topic}", "seen": list(shared)}, model=MODEL)
    shared.append(f"{i}:plan")
    counts = await asyncio.gather(*(_leaf(edges, i, j, plan, shared) for j in range(2)))
    stock = await edges.astate("stock", read=ca.aread_stock)
    value = await edges.atool("calc", {"branch": i, "hits": ["h"] * sum(counts),
                                       "units": stock["units"], "seen": list(shared)})  # fmt: skip
    shared.append(f"{i}:calc")
    return value["value"]


async def nested_agent(agent_input: Any, edges: Any) -> Any:
    """A gather of branches, each gathering two searches of its own."""
    shared: list[str] = []
    topics = agent_input["topics"]
    values = await asyncio.gather(
        *(_nested_branch(edges, i, t, shared) for i, t in enumerate(topics))
    )
    return {"values": list(values), "order": shared}


async def taskgroup_agent(agent_input: Any, edges: Any) -> Any:
    """The branches of ``concurrent_agents`` in a TaskGroup (Python 3.11's structured tasks)."""
    shared: list[str] = []
    async with asyncio.TaskGroup() as tg:
        tasks = [
            tg.create_task(ca._abranch(i, t, edges, shared, ()))
            for i, t in enumerate(agent_input["topics"])
        ]
    return {"values": [t.result() for t in tasks], "order": shared}


async def as_completed_agent(agent_input: Any, edges: Any) -> Any:
    """Plans made concurrently, each searched for as soon as it comes back, while the others
    are still out: the searches follow the order the plans completed in."""

    async def plan(i: int, topic: str) -> tuple[int, Any]:
        return i, await edges.amodel({"prompt": f"plan {topic}"}, model=MODEL)

    order: list[int] = []
    hits = []
    plans = [plan(i, t) for i, t in enumerate(agent_input["topics"])]
    for next_done in asyncio.as_completed(plans):
        i, got = await next_done
        order.append(i)
        found = await edges.atool("search", {"branch": i, "q": got["text"], "seen": list(order)})
        hits.append(found["hits"])
    answer = await edges.amodel({"prompt": "sum up", "order": order}, model=MODEL)
    return {"order": order, "hits": hits, "answer": answer["text"]}


# -- a swap of two calls inside one thread (strict replay must name it) --------------------
SWAPPED_BRANCH = 1


def _steps(edges: Any, i: int, order: tuple[int, ...]) -> list[Any]:
    return [edges.tool("search", {"branch": i, "q": f"step {n}"})["hits"] for n in order]


def _steps_agent(agent_input: Any, edges: Any, swap: bool) -> Any:
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = [
            pool.submit(_steps, edges, i, (0, 2, 1) if swap and i == SWAPPED_BRANCH else (0, 1, 2))
            for i in range(2)
        ]
        return {"hits": [f.result() for f in futures]}


def steps_agent(agent_input: Any, edges: Any) -> Any:
    """Two threads, three searches each: ``step 0``, ``step 1``, ``step 2``."""
    return _steps_agent(agent_input, edges, swap=False)


def swapped_steps_agent(agent_input: Any, edges: Any) -> Any:
    """Thread ``SWAPPED_BRANCH`` makes its second and third searches the other way round."""
    return _steps_agent(agent_input, edges, swap=True)
