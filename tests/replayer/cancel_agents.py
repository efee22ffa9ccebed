"""Async agents that bound latency the way production agents do: timeouts, cancel, races.

Each is recorded live against tools that really sleep (the latencies vary from run to run)
and replayed with no tool run at all. Also a mail agent whose ``send_email`` has side effects
and counts its real calls, for forks. Module-level callables, so the CLI can load them as
``tests.replayer.cancel_agents:NAME``.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

from tracevault.producer import Tool

MODEL = "gpt-4o-2024-08-06"
INPUT = {"task": "find the cheapest mirror"}
TIMEOUT_S = 0.05  # the agent's own bound on a lookup
SLOW_S = 5.0  # a lookup this slow is always cut short by the timeout
BRANCHES = 3


def model_fn(request: Any, *, model: str, seed: int | None) -> Any:
    return {"text": f"answer from {len(str(request))} chars", "model": model}


async def _lookup(args: Any) -> Any:
    """Branch 1 always times out; the others sometimes do, sometimes answer in time."""
    slow = args["branch"] == 1 or random.random() < 0.3
    await asyncio.sleep(SLOW_S if slow else random.uniform(0.001, 0.01))
    return {"branch": args["branch"], "price": 10 + args["branch"]}


async def _fallback(args: Any) -> Any:
    await asyncio.sleep(random.uniform(0.001, 0.005))
    return {"branch": args["branch"], "price": 99}


async def _step(args: Any) -> Any:
    await asyncio.sleep(random.uniform(0.001, 0.004))
    return {"n": args["n"]}


async def _long(args: Any) -> Any:
    await asyncio.sleep(SLOW_S)
    return {"never": True}


async def _poll(args: Any) -> Any:
    await asyncio.sleep(random.uniform(0.02, 0.03))
    return {"ready": True}


async def _mirror(args: Any) -> Any:
    await asyncio.sleep(args["latency"])
    return {"site": args["site"]}


TOOLS: dict[str, Any] = {
    "lookup": _lookup,
    "fallback": _fallback,
    "step": _step,
    "long": _long,
    "poll": _poll,
    "mirror": _mirror,
}


# -- wait_for timeouts that fire -----------------------------------------------------------
async def _bounded(edges: Any, branch: int, order: list[Any]) -> Any:
    try:
        found = await asyncio.wait_for(edges.atool("lookup", {"branch": branch}), TIMEOUT_S)
    except TimeoutError:
        order.append(f"timeout-{branch}")
        found = await edges.atool("fallback", {"branch": branch, "seen": list(order)})
    order.append(f"done-{branch}")
    return found


async def timeout_agent(task: Any, edges: Any) -> Any:
    order: list[Any] = []
    found = await asyncio.gather(*(_bounded(edges, b, order) for b in range(BRANCHES)))
    answer = await edges.amodel({"found": found, "order": order}, model=MODEL)
    return {"order": order, "answer": answer["text"]}


async def sequential_timeout_agent(task: Any, edges: Any) -> Any:
    """One bounded lookup at a time: a record whose crossings never overlap (seq order)."""
    order: list[Any] = []
    found = [await _bounded(edges, b, order) for b in range(BRANCHES)]
    return {"order": order, "found": found}


async def _slow_step(args: Any) -> Any:
    await asyncio.sleep(0.1)
    return {"n": args["n"]}


async def _quick(args: Any) -> Any:
    await asyncio.sleep(0.03)
    return {"quick": True}


TOOLS.update({"slow_step": _slow_step, "quick": _quick})


async def early_timer_agent(task: Any, edges: Any) -> Any:
    """A timer that did not fire live but runs ahead under replay.

    Live: A's lookup times out at 0.1 s; B's quick call starts after a 0.1 s step and ends
    at 0.13 s, after A's timeout and well inside its own 0.06 s bound. Under replay the step
    takes no time, so B's timer (0.06 s) fires before A's (0.1 s), while B's answer still
    waits for its recorded turn after A's cancel. B must get its answer, as live.
    """
    order: list[str] = []

    async def a() -> None:
        try:
            await asyncio.wait_for(edges.atool("lookup", {"branch": 1}), 0.1)
        except TimeoutError:
            order.append("a-timeout")

    async def b() -> None:
        await edges.atool("slow_step", {"n": 1})
        try:
            await asyncio.wait_for(edges.atool("quick", {}), 0.06)
            order.append("b-ok")
        except TimeoutError:
            order.append("b-timeout")

    await asyncio.gather(a(), b())
    return {"order": order}


# -- a task cancelled in the middle of a call ----------------------------------------------
async def _worker(edges: Any, log: list[str]) -> None:
    await edges.atool("step", {"n": 1})
    try:
        await edges.atool("long", {"after": list(log)})
    except asyncio.CancelledError:
        log.append("worker cancelled")
        raise


async def cancel_agent(task: Any, edges: Any) -> Any:
    log: list[str] = []
    worker = asyncio.create_task(_worker(edges, log))
    await edges.atool("poll", {"n": 0})
    worker.cancel()
    try:
        await worker
    except asyncio.CancelledError:
        log.append("main saw the cancel")
    answer = await edges.amodel({"log": log}, model=MODEL)
    return {"log": log, "answer": answer["text"]}


# -- two calls raced, the loser cancelled ---------------------------------------------------
async def _race(edges: Any, rnd: int, rng: random.Random) -> Any:
    fast, slow = rng.sample(["a", "b"], 2)
    latency = {fast: 0.003, slow: 0.5}  # the agent's input to the tool: recorded, so replayed
    tasks = [
        asyncio.create_task(edges.atool("mirror", {"site": s, "latency": latency[s], "round": rnd}))
        for s in ("a", "b")
    ]
    done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    for lost in pending:
        lost.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    return [t.result()["site"] for t in done]


async def race_agent(task: Any, edges: Any) -> Any:
    rng = edges.random("mirrors")  # which mirror is slow: drawn through the edges, so replayed
    winners = [await _race(edges, rnd, rng) for rnd in range(2)]
    answer = await edges.amodel({"winners": winners}, model=MODEL)
    return {"winners": winners, "answer": answer["text"]}


# -- a fork that must not send mail twice ---------------------------------------------------
SENT: list[tuple[Any, str | None]] = []  # every real call of send_email: (args, key)


def _send_email(args: Any, idempotency_key: str | None = None) -> Any:
    SENT.append((args, idempotency_key))
    return {"message_id": f"msg-{len(SENT)}", "to": args["to"]}


def _search(args: Any) -> Any:
    return {"hits": [f"{args['q']} result"]}


def mail_model(request: Any, *, model: str, seed: int | None) -> Any:
    return {"text": f"Dear customer, about {request['q']}: all good.", "model": model}


def changed_mail_model(request: Any, *, model: str, seed: int | None) -> Any:
    return {"text": f"Dear customer, about {request['q']}: we refund you.", "model": model}


MAIL_TOOLS: dict[str, Any] = {"search": _search, "send_email": Tool(_send_email, side_effect=True)}


def mail_agent(task: Any, edges: Any) -> Any:
    hits = edges.tool("search", {"q": task["q"]})
    draft = edges.model({"q": task["q"], "hits": hits["hits"]}, model=MODEL)
    sent = edges.tool("send_email", {"to": task["to"], "body": draft["text"]})
    return {"sent": sent["message_id"], "body": draft["text"]}


def mail_live_edges() -> Any:
    """The agent's own model and tools: the fork's request to send_email matches the record."""
    return {"model": mail_model, "tools": MAIL_TOOLS}


def mail_changed_live_edges() -> Any:
    """What if the model had written another mail: the request to send_email changes."""
    return {"model": changed_mail_model, "tools": MAIL_TOOLS}
