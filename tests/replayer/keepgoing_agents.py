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

from collections.abc import Callable, Iterable
from typing import Any

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
