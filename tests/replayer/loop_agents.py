"""A tool loop whose repeated calls share their sites, for the keep-going property test.

``keepgoing_agents`` makes every call from its own line with its own request; an agent as
frameworks write them does not: it loops, reads the clock through one helper, draws from one
line, so a clock read inserted anywhere has the same site and request as every recorded one.
``loop_agent`` is that agent; ``perturbed(kinds)`` applies a set of the edits in ``KINDS``,
each to its own call; ``expected(kinds)`` is what keep-going must report: one finding per
edit, at the seq of the recorded call it touched (an extra call: the recorded call it came
before). The output depends on none of the edits.

The recorded run (crossings in seq order)::

     1 CLOCK now   2 STATE budget [budget_name]
     step 0:  3 RANDOM   4 MODEL           5 TOOL            6 CLOCK [missing]   7 DECISION
     step 1:  8 RANDOM   + extra RANDOM   9 MODEL [prompt]   + extra CLOCK   10 TOOL [args]
              11 CLOCK   12 DECISION   + extra DECISION
     step 2: 13 RANDOM [swap with 14]   14 MODEL   15 TOOL   16 CLOCK
              17 DECISION [decision]
     step 3: 18 RANDOM   19 MODEL   20 CLOCK
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

MODEL = "gpt-4o-mini-2024-07-18"
INPUT = {"question": "Which orders shipped late?"}
STEPS = 3

KINDS = (
    "args",  # step 1's tool asks for another order
    "extra_clock",  # a clock read before step 1's tool, through the same helper
    "budget_name",  # the budget read under another name
    "extra_random",  # a second draw in step 1, from the loop's line
    "extra_decision",  # a second "more" decision in step 1
    "missing",  # step 0's closing clock read left out
    "prompt",  # step 1's note reworded
    "decision",  # step 2 decides otherwise
    "swap",  # step 2 asks the model before drawing
)


def model_fn(request: Any, *, model: str, seed: int | None) -> Any:
    done = sum(m["role"] == "tool" for m in request["messages"])
    if done >= STEPS:
        return {"done": True, "text": f"{done} orders checked"}
    return {"done": False, "tool": "order", "args": {"id": 100 + done}}


TOOLS: dict[str, Callable[[Any], Any]] = {
    "order": lambda a: {"id": a["id"], "late": a["id"] % 2 == 0},
}


def _budget() -> Any:
    return {"left": 9}


def _now(edges: Any) -> float:
    return float(edges.clock("now"))


def _jitter(edges: Any) -> float:
    return float(edges.random("jitter").random())


def _more(edges: Any, choice: bool) -> None:
    edges.decision("more", choice, options=[False, True])


def _ask(edges: Any, messages: list[Any], step: int, kinds: frozenset[str]) -> Any:
    note = "check, then say" if "prompt" in kinds and step == 1 else "check"
    request = {"messages": [*messages, {"role": "system", "content": f"{note} #{step}"}]}
    return edges.model(request, model=MODEL, seed=7)


def _agent(task: Any, edges: Any, kinds: frozenset[str]) -> Any:
    start = _now(edges)
    budget = edges.state("budget_left" if "budget_name" in kinds else "budget", read=_budget)
    messages: list[Any] = [{"role": "user", "content": task["question"]}]
    late = 0
    for step in range(STEPS + 1):
        if "swap" in kinds and step == 2:
            reply = _ask(edges, messages, step, kinds)
            _jitter(edges)
        else:
            _jitter(edges)
            if "extra_random" in kinds and step == 1:
                _jitter(edges)
            reply = _ask(edges, messages, step, kinds)
        if reply["done"]:
            break
        if "extra_clock" in kinds and step == 1:
            _now(edges)
        args = {"id": reply["args"]["id"] + (50 if "args" in kinds and step == 1 else 0)}
        got = edges.tool(reply["tool"], args)
        late += reply["args"]["id"] % 2 == 0
        messages.append({"role": "tool", "content": f"order {reply['args']['id']}"})
        if not ("missing" in kinds and step == 0):
            _now(edges)
        _more(edges, not ("decision" in kinds and step == 2))
        if "extra_decision" in kinds and step == 1:
            _more(edges, True)
        assert "id" in got
    return {"text": reply["text"], "late": late, "left": budget["left"],
            "took": _now(edges) - start}  # fmt: skip


def loop_agent(task: Any, edges: Any) -> Any:
    return _agent(task, edges, frozenset())


def perturbed(kinds: Iterable[str]) -> Callable[[Any, Any], Any]:
    chosen = frozenset(kinds)
    assert chosen <= set(KINDS), chosen
    return lambda task, edges: _agent(task, edges, chosen)


_FINDING = {
    "budget_name": (2, "EXTERNAL_STATE", "EXTERNAL_STATE"),
    "missing": (6, "CLOCK", None),
    "prompt": (9, "MODEL_CALL", "MODEL_CALL"),
    "extra_clock": (10, None, "CLOCK"),
    "args": (10, "TOOL_CALL", "TOOL_CALL"),
    "extra_decision": (13, None, "DECISION"),
    "swap": (13, "RANDOM", "RANDOM"),  # the draw, made after the model call at seq 14
    "extra_random": (9, None, "RANDOM"),
    "decision": (17, "DECISION", "DECISION"),
}
assert set(_FINDING) == set(KINDS)


def expected(kinds: Iterable[str]) -> list[tuple[int, str | None, str | None]]:
    """The findings for ``kinds``, in the order keep-going reports them."""
    return sorted((_FINDING[k] for k in set(kinds)), key=lambda f: (f[0], f[1] is None))
