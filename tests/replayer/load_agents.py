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


# -- results that came back apart, and together (a framework's asyncio.wait sees them so) --
_GATES: dict[int, dict[str, asyncio.Event]] = {}


def _gate(name: str) -> asyncio.Event:
    gates = _GATES.setdefault(id(asyncio.get_running_loop()), {})
    return gates.setdefault(name, asyncio.Event())


async def arrive(args: Any) -> Any:
    """The live callee: ``fast`` answers at once and lets ``slow`` go, which answers 10 ms
    later (apart); ``x`` and ``y`` both answer when ``open`` is set (in one loop iteration),
    ``y`` having waited first."""
    name = args["name"]
    if name == "slow":
        await _gate("fast").wait()
        await asyncio.sleep(0.01)
    elif name in ("x", "y"):
        if name == "x":
            await asyncio.sleep(0)  # y waits on the gate first: y completes first
        await _gate("open").wait()
    result = {"name": name}
    if name == "fast":
        _gate("fast").set()
    return result


ARRIVE_TOOLS = {"arrive": arrive}


async def _as_a_framework_sees_them(edges: Any, names: list[str]) -> list[str]:
    """Tasks yielded as ``asyncio.wait`` reports them done; those done in one wakeup in task
    order (Pydantic AI's parallel tool calls, ``_iter_completed_or_buffered``)."""
    tasks = [asyncio.create_task(edges.atool("arrive", {"name": n})) for n in names]
    seen: list[str] = []
    pending: set[asyncio.Task[Any]] = set(tasks)
    while pending:
        done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        seen += [t.result()["name"] for t in sorted(done, key=tasks.index)]
    return seen


async def arrivals_agent(agent_input: Any, edges: Any) -> Any:
    """Round 1: ``slow`` (asked first) comes back apart from, and after, ``fast``: live the
    framework yields ``fast, slow``. Round 2: ``x`` and ``y`` come back in one iteration,
    ``y`` first: live it yields them in task order, ``x, y``."""
    loop = asyncio.get_running_loop()
    _GATES.pop(id(loop), None)  # a loop of an earlier run may have had this id
    apart = await _as_a_framework_sees_them(edges, ["slow", "fast"])
    # not a crossing: live it lets x and y go; under replay nobody waits on it
    loop.call_later(0.01, _gate("open").set)
    together = await _as_a_framework_sees_them(edges, ["x", "y"])
    return {"apart": apart, "together": together}
