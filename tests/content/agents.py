"""An agent whose every content field carries a secret, for the confidentiality tests.

Each SECRETS string is recorded somewhere a run holds content: the input, a model request
and response, tool arguments and results, a state value, a tool's error message, the output.
None of them may appear in the bytes of raw, sealed or the archive when content is encrypted.
"""

from __future__ import annotations

import contextlib
from typing import Any

MODEL = "gpt-4o-2024-08-06"
SECRETS = (
    "alice.liddell@example.com",
    "order-SECRET-98765",
    "4111-1111-1111-1111",
    "the pasted contract text",
    "inventory-of-wonderland",
    "quota of queen-of-hearts",
    "final answer for alice",
)
INPUT = {"customer": SECRETS[0], "order": SECRETS[1]}
CC = "dpo@example.com"


def model(request: Any, *, model: str, seed: int | None) -> Any:
    text = request["messages"][-1]["content"]
    return {"text": f"summary of {text[:20]}: {SECRETS[3]}", "tokens": 9}


def lookup(args: Any) -> Any:
    return {"card": SECRETS[2], "order": args["order"]}


class QuotaError(Exception):
    """Raised by a tool; its message is content."""


def quota(args: Any) -> Any:
    raise QuotaError(SECRETS[5])


TOOLS = {"lookup": lookup, "quota": quota}


def secret_agent(agent_input: Any, edges: Any) -> Any:
    found = edges.tool("lookup", {"order": agent_input["order"]})
    answer = edges.model(
        # a constant with an e-mail in it: under replay only the rules applied again to the
        # re-run's request make it equal to the redacted record
        {"messages": [{"role": "user", "content": f"about {agent_input['customer']} cc {CC}"}]},
        model=MODEL,
        seed=3,
    )
    stock = edges.state("inventory", read=lambda: {"name": SECRETS[4]})
    with contextlib.suppress(QuotaError):
        edges.tool("quota", {"user": "queen"})
    edges.clock()
    return {"answer": SECRETS[6], "card": found["card"], "text": answer["text"], "stock": stock}
