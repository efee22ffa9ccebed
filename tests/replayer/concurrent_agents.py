"""Agents whose branches cross the harness boundary concurrently (asyncio tasks, threads).

Each of ``BRANCHES`` branches makes a model call, a search, a state read and a calculation,
every callee with a random latency, so live the crossings of the branches interleave
differently on every run. The async agent also keeps a list shared by its branches and puts
its length into each request: a replay that hands results back in another order than the
record makes different requests and diverges. ``perturbed`` agents change the search request
of branch ``PERTURBED`` only; ``twice_perturbed`` ones that of each branch in ``TWICE``.
"""

from __future__ import annotations

import asyncio
import random
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

BRANCHES = 3
PERTURBED = 2
TWICE = (0, 2)
MODEL = "fake-model-2024-01-01"
INPUT = {"topics": ["kafka", "avro", "merkle"]}
_rng = random.Random()
_stock = [0]
_stock_lock = threading.Lock()


def _latency() -> float:
    return _rng.uniform(0.0, 0.003)


def _answer(request: Any) -> Any:
    return {"text": f"{request['prompt']}#{_rng.randrange(1000)}"}


def _read_stock() -> Any:
    with _stock_lock:
        _stock[0] += 1
        return {"units": _stock[0]}


async def amodel_fn(request: Any, *, model: str, seed: int | None) -> Any:
    await asyncio.sleep(_latency())
    return _answer(request)


async def asearch(args: Any) -> Any:
    await asyncio.sleep(_latency())
    return {"hits": [f"{args['q']}/{k}" for k in range(_rng.randrange(1, 4))]}


async def acalc(args: Any) -> Any:
    await asyncio.sleep(_latency())
    return {"value": len(args["hits"]) * args["units"]}


async def aread_stock() -> Any:
    await asyncio.sleep(_latency())
    return _read_stock()


def _pause() -> None:
    threading.Event().wait(_latency())  # the callee's simulated latency, not a test wait


def model_fn(request: Any, *, model: str, seed: int | None) -> Any:
    _pause()
    return _answer(request)


def search(args: Any) -> Any:
    _pause()
    return {"hits": [f"{args['q']}/{k}" for k in range(_rng.randrange(1, 4))]}


def calc(args: Any) -> Any:
    _pause()
    return {"value": len(args["hits"]) * args["units"]}


def read_stock() -> Any:
    _pause()
    return _read_stock()


ASYNC_TOOLS = {"search": asearch, "calc": acalc}
THREAD_TOOLS = {"search": search, "calc": calc}


def _search_args(i: int, plan: Any, seen: int, perturbed: tuple[int, ...]) -> Any:
    args: dict[str, Any] = {"branch": i, "q": plan["text"], "seen": seen}
    if i in perturbed:
        args["perturbed"] = True
    return args


async def _abranch(
    i: int, topic: str, edges: Any, shared: list[str], perturbed: tuple[int, ...]
) -> Any:
    plan = await edges.amodel({"prompt": f"plan {topic}", "seen": len(shared)}, model=MODEL)
    shared.append(f"{i}:plan")
    hits = await edges.atool("search", _search_args(i, plan, len(shared), perturbed))
    shared.append(f"{i}:search")
    stock = await edges.astate("stock", read=aread_stock)
    shared.append(f"{i}:stock")
    value = await edges.atool(
        "calc", {"branch": i, "hits": hits["hits"], "units": stock["units"], "seen": len(shared)}
    )
    shared.append(f"{i}:calc")
    return value["value"]


async def _async_agent(agent_input: Any, edges: Any, perturbed: tuple[int, ...]) -> Any:
    shared: list[str] = []
    values = await asyncio.gather(
        *(
            _abranch(i, topic, edges, shared, perturbed)
            for i, topic in enumerate(agent_input["topics"])
        )
    )
    return {"values": list(values), "order": shared}


async def async_agent(agent_input: Any, edges: Any) -> Any:
    return await _async_agent(agent_input, edges, ())


async def async_perturbed_agent(agent_input: Any, edges: Any) -> Any:
    return await _async_agent(agent_input, edges, (PERTURBED,))


async def async_twice_perturbed_agent(agent_input: Any, edges: Any) -> Any:
    return await _async_agent(agent_input, edges, TWICE)


async def async_stopping_agent(agent_input: Any, edges: Any) -> Any:
    """Branch 0 stops after its plan: the crossings the others wait for never start."""

    async def short(i: int, topic: str, shared: list[str]) -> Any:
        if i == 0:
            await edges.amodel({"prompt": f"plan {topic}", "seen": len(shared)}, model=MODEL)
            shared.append(f"{i}:plan")
            return 0
        return await _abranch(i, topic, edges, shared, ())

    shared: list[str] = []
    topics = agent_input["topics"]
    values = await asyncio.gather(*(short(i, t, shared) for i, t in enumerate(topics)))
    return {"values": list(values), "order": shared}


def _tbranch(i: int, topic: str, edges: Any, perturbed: tuple[int, ...]) -> Any:
    plan = edges.model({"prompt": f"plan {topic}"}, model=MODEL)
    hits = edges.tool("search", _search_args(i, plan, 0, perturbed))
    stock = edges.state("stock", read=read_stock)
    value = edges.tool("calc", {"branch": i, "hits": hits["hits"], "units": stock["units"]})
    return value["value"]


def _thread_agent(
    agent_input: Any, edges: Any, perturbed: tuple[int, ...], workers: int | None = None
) -> Any:
    topics = agent_input["topics"]
    with ThreadPoolExecutor(max_workers=workers or len(topics)) as pool:
        futures = [pool.submit(_tbranch, i, t, edges, perturbed) for i, t in enumerate(topics)]
        return {"values": [f.result() for f in futures]}


def thread_agent(agent_input: Any, edges: Any) -> Any:
    return _thread_agent(agent_input, edges, ())


def thread_perturbed_agent(agent_input: Any, edges: Any) -> Any:
    return _thread_agent(agent_input, edges, (PERTURBED,))


def thread_twice_perturbed_agent(agent_input: Any, edges: Any) -> Any:
    return _thread_agent(agent_input, edges, TWICE)


def thread_agent_two_workers(agent_input: Any, edges: Any) -> Any:
    """Three branches on two pool threads: the third runs on a reused thread, whose context
    still names the crossing the branch before it completed last (its ``branch_prev``)."""
    return _thread_agent(agent_input, edges, (), workers=2)
