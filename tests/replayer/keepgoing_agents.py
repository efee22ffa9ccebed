"""A support agent and its perturbations, for the keep-going property test.

``support_agent`` is recorded once through the real pipeline; ``perturbed(kinds)`` is the same
agent with a set of the eight edits in ``KINDS`` applied, each to its own call, and
``expected(kinds)`` the findings keep-going must report for it: one per edit, at the seq of
the recorded call it touched (an extra call: the recorded call it came before). The agent's
output does not depend on any of the edits, so nothing else may be reported.

The recorded run (crossings in seq order)::

    1 CLOCK started          5 TOOL fetch      [arg]         8 TOOL audit     [missing]
    2 MODEL plan   [prompt]  6 STATE inventory               9 MODEL answer
      + extra CLOCK          7 DECISION route  [decision]   10 CLOCK took
    3 TOOL search  [swap]      + extra RANDOM, + extra DECISION
    4 TOOL lookup  [swap]
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from tracevault.schemas import TraceEvent

MODEL = "gpt-4o-mini-2024-07-18"
SEED = 11
INPUT = {"ticket": "T-41", "question": "Why was I charged twice?"}

#: the eight edits, each applied to its own call
KINDS = (
    "swap",  # search and lookup made in the other order (from the same line)
    "arg",  # fetch asks for another page
    "decision",  # route chooses "refund" over "explain"
    "extra_random",  # a random draw after the state read
    "extra_clock",  # a clock read after the plan
    "extra_decision",  # a second decision after route
    "missing",  # the audit call left out
    "prompt",  # the plan's prompt reworded
)


def model_fn(request: Any, *, model: str, seed: int | None) -> Any:
    text = request["messages"][-1]["content"]
    if text.startswith("plan"):
        return {"steps": ["search", "lookup"], "tokens": 9}
    return {"text": f"Answered from {len(text)} chars", "tokens": 21}


TOOLS: dict[str, Callable[[Any], Any]] = {
    "search": lambda a: {"hits": [f"kb/{a['q'][:8]}", "kb/billing"]},
    "lookup": lambda a: {"ticket": a["id"], "charges": 2},
    "fetch": lambda a: {"page": a["url"], "body": "Duplicate charges are refunded in 3 days."},
    "audit": lambda a: {"logged": True},
}


def _inventory() -> Any:
    return {"refunds_open": 4}


def _agent(task: Any, edges: Any, kinds: frozenset[str]) -> Any:
    started = edges.clock("started")
    prompt = "plan, briefly: " if "prompt" in kinds else "plan: "
    plan = edges.model(
        {"messages": [{"role": "user", "content": prompt + task["question"]}]},
        model=MODEL,
        seed=SEED,
    )
    if "extra_clock" in kinds:
        edges.clock("deadline")
    calls = {"search": {"q": task["question"]}, "lookup": {"id": task["ticket"]}}
    order = ["lookup", "search"] if "swap" in kinds else ["search", "lookup"]
    got = {name: edges.tool(name, calls[name]) for name in order}
    url = "kb/billing#v2" if "arg" in kinds else got["search"]["hits"][1]
    page = edges.tool("fetch", {"url": url})
    stock = edges.state("refunds" if "rename" in kinds else "inventory", read=_inventory)
    if "extra_random" in kinds:
        edges.random("jitter").random()
    edges.decision("route", "refund" if "decision" in kinds else "explain",
                   options=["explain", "refund"])  # fmt: skip
    if "extra_decision" in kinds:
        edges.decision("escalate", False, options=[False, True])
    if "missing" not in kinds:
        edges.tool("audit", {"ticket": task["ticket"]})
    answer = edges.model(
        {"messages": [{"role": "user", "content": task["question"]},
                      {"role": "tool", "content": page["body"]}]},
        model=MODEL,
        seed=SEED,
    )  # fmt: skip
    return {
        "answer": answer["text"],
        "steps": plan["steps"],
        "charges": got["lookup"]["charges"],
        "open": stock["refunds_open"],
        "took": edges.clock("took") - started,
    }


def support_agent(task: Any, edges: Any) -> Any:
    return _agent(task, edges, frozenset())


def perturbed(kinds: Iterable[str]) -> Callable[[Any, Any], Any]:
    chosen = frozenset(kinds)
    assert chosen <= {*KINDS, "rename"}, chosen
    return lambda task, edges: _agent(task, edges, chosen)


#: (seq, recorded kind, re-run kind) each edit must be reported as
_FINDING = {
    "prompt": (2, "MODEL_CALL", "MODEL_CALL"),
    "extra_clock": (3, None, "CLOCK"),
    "swap": (3, "TOOL_CALL", "TOOL_CALL"),  # search, made after lookup
    "arg": (5, "TOOL_CALL", "TOOL_CALL"),
    "extra_random": (7, None, "RANDOM"),
    "decision": (7, "DECISION", "DECISION"),
    "extra_decision": (8, None, "DECISION"),
    "missing": (8, "TOOL_CALL", None),
    "rename": (6, "EXTERNAL_STATE", "EXTERNAL_STATE"),  # the state read under a new name
}
assert set(_FINDING) == {*KINDS, "rename"}


def expected(kinds: Iterable[str]) -> list[tuple[int, str | None, str | None]]:
    """The findings for ``kinds``, in the order keep-going reports them."""
    found = [_FINDING[k] for k in set(kinds)]
    return sorted(found, key=lambda f: (f[0], f[1] is None))


# -- the same edits in a concurrent agent: two branches under asyncio.gather ---------------

#: the edits the concurrent agent makes, all in branch 0
CONCURRENT_KINDS = ("swap", "arg", "decision", "extra_clock", "missing", "prompt")


async def _latency() -> None:
    await asyncio.sleep(_rng.uniform(0.0, 0.003))


def _atool(name: str) -> Callable[[Any], Any]:
    async def call(args: Any) -> Any:
        await _latency()
        return TOOLS[name](args)

    return call


#: the async tools of the concurrent agent: each with a random latency, so live the two
#: branches' crossings interleave differently on every run
ATOOLS = {name: _atool(name) for name in TOOLS}
_rng = random.Random()


async def amodel_fn(request: Any, *, model: str, seed: int | None) -> Any:
    await _latency()
    return model_fn(request, model=model, seed=seed)


async def _abranch(i: int, task: Any, edges: Any, kinds: frozenset[str]) -> Any:
    edits = kinds if i == 0 else frozenset()
    calls = {"search": {"q": f"{task['question']} #{i}"}, "lookup": {"id": f"{task['ticket']}-{i}"}}
    order = ["lookup", "search"] if "swap" in edits else ["search", "lookup"]
    got = {}
    for name in order:
        got[name] = await edges.atool(name, calls[name])
    url = "kb/billing#v2" if "arg" in edits else f"{got['search']['hits'][1]}#{i}"
    page = await edges.atool("fetch", {"url": url})
    if "extra_clock" in edits:
        edges.clock("deadline")
    edges.decision(f"route-{i}", "refund" if "decision" in edits else "explain",
                   options=["explain", "refund"])  # fmt: skip
    if "missing" not in edits:
        await edges.atool("audit", {"ticket": f"{task['ticket']}-{i}"})
    return page["body"]


async def _async_agent(task: Any, edges: Any, kinds: frozenset[str]) -> Any:
    started = edges.clock("started")
    prompt = "plan, briefly: " if "prompt" in kinds else "plan: "
    plan = await edges.amodel(
        {"messages": [{"role": "user", "content": prompt + task["question"]}]},
        model=MODEL,
        seed=SEED,
    )
    bodies = await asyncio.gather(*(_abranch(i, task, edges, kinds) for i in range(2)))
    return {"steps": plan["steps"], "bodies": list(bodies), "took": edges.clock("took") - started}


async def concurrent_agent(task: Any, edges: Any) -> Any:
    return await _async_agent(task, edges, frozenset())


def concurrent_perturbed(kinds: Iterable[str]) -> Callable[[Any, Any], Any]:
    chosen = frozenset(kinds)
    assert chosen <= set(CONCURRENT_KINDS), chosen

    async def agent(task: Any, edges: Any) -> Any:
        return await _async_agent(task, edges, chosen)

    return agent


def concurrent_expected(
    kinds: Iterable[str], events: Sequence[TraceEvent]
) -> list[tuple[int, str | None, str | None]]:
    """The findings for ``kinds`` in this recording (its interleaving fixes branch 0's seqs).

    An extra call is reported at its branch's next recorded crossing.
    """

    def seq_of(kind: str, **fields: Any) -> int:
        for ev in events:
            req = json.loads(ev.request) if ev.request else None
            ok = ev.kind.value == kind and isinstance(req, dict)
            if ok and all(req.get(k) == v for k, v in fields.items()):
                return ev.seq
        raise AssertionError(f"no {kind} {fields} in the record")

    t = INPUT["ticket"]
    where = {
        "prompt": (seq_of("MODEL_CALL"), "MODEL_CALL", "MODEL_CALL"),
        "swap": (
            seq_of("TOOL_CALL", tool="search", args={"q": f"{INPUT['question']} #0"}),
            "TOOL_CALL",
            "TOOL_CALL",
        ),
        "arg": (
            seq_of("TOOL_CALL", tool="fetch", args={"url": "kb/billing#0"}),
            "TOOL_CALL",
            "TOOL_CALL",
        ),
        "extra_clock": (seq_of("DECISION", name="route-0"), None, "CLOCK"),
        "decision": (seq_of("DECISION", name="route-0"), "DECISION", "DECISION"),
        "missing": (
            seq_of("TOOL_CALL", tool="audit", args={"ticket": f"{t}-0"}),
            "TOOL_CALL",
            None,
        ),
    }
    return sorted((where[k] for k in set(kinds)), key=lambda f: (f[0], f[1] is None))
