"""A small but honest agent loop: model, tools with side effects, clock, random, state.

Everything the agent does crosses an edge, so the same ``support_agent`` replays exactly.
The "model" is scripted (a deterministic function of the request and seed) because the demo
must run with no network; its model ids are exact builds, as a real recording needs.
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass, field
from typing import Any

from tracevault.edges import JSON, Edges
from tracevault.producer import Tool

__all__ = [
    "MODEL_ID",
    "FleetWorld",
    "RefundRefused",
    "live_edges",
    "scripted_model",
    "support_agent",
]

MODEL_ID = "scripted-support-model-2026-11-01"


class RefundRefused(RuntimeError):
    """A tool failure the agent does not handle: the run ends with an ERROR."""


def _digest(*parts: object) -> int:
    h = hashlib.sha256("|".join(map(str, parts)).encode()).digest()
    return int.from_bytes(h[:8], "big")


def scripted_model(request: JSON, *, model: str, seed: int | None = None) -> JSON:
    """A deterministic stand-in for an LLM: same request and seed, same answer."""
    messages = request["messages"]
    last = messages[-1]["content"]
    pick = _digest(model, seed, last) % 100
    if "order" in last and "status" not in last:
        return {
            "action": "call_tool",
            "tool": "lookup_order",
            "args": {"order_id": last.split()[-1]},
        }
    if "status" in last:
        if "chargeback" in messages[1]["content"]:
            return {"action": "call_tool", "tool": "refund", "args": {"amount": 75 + pick}}
        if pick < 55:
            return {"action": "call_tool", "tool": "refund", "args": {"amount": 10 + pick % 40}}
        return {"action": "reply", "text": f"Your order is on its way ({pick})."}
    return {"action": "reply", "text": f"Refund processed ({pick})."}


@dataclass
class FleetWorld:
    """The external world the fleet's tools touch: an order database and a payments ledger.

    Refunds are side effects keyed by idempotency key, so a retried call never pays twice.
    """

    orders: dict[str, dict[str, Any]] = field(default_factory=dict)
    ledger: dict[str, float] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def lookup_order(self, args: JSON) -> JSON:
        order_id = args["order_id"]
        with self._lock:
            order = self.orders.setdefault(
                order_id,
                {
                    "order_id": order_id,
                    "status": ["shipped", "late", "lost"][_digest(order_id) % 3],
                },
            )
            return dict(order)

    def refund(self, args: JSON, *, idempotency_key: str) -> JSON:
        amount = float(args["amount"])
        if amount > 60:
            raise RefundRefused(f"refund of {amount:.2f} needs a human approval")
        with self._lock:
            self.ledger.setdefault(idempotency_key, amount)
        return {"refunded": amount, "key": idempotency_key}

    def tools(self) -> dict[str, Any]:
        return {"lookup_order": self.lookup_order, "refund": Tool(self.refund, side_effect=True)}


def live_edges() -> dict[str, Any]:
    """The fleet's own model and tools, for a fork's live part (``replay run --then live``)."""
    return {"model": scripted_model, "tools": FleetWorld().tools()}


def support_agent(task: JSON, edges: Edges) -> JSON:
    """Answer one customer ticket: read state, think, call tools, decide, reply."""
    started = edges.clock("ticket_opened")
    rng = edges.random("tie_break")
    queue_depth = edges.state("support.queue_depth", read=lambda: len(task["ticket"]) % 7)
    priority = "high" if queue_depth > 3 or rng.random() < 0.2 else "normal"
    edges.decision("priority", priority, options=["normal", "high"])
    messages: list[JSON] = [
        {"role": "system", "content": "You are a careful support agent."},
        {"role": "user", "content": f"{task['ticket']} order {task['order_id']}"},
    ]
    for turn in range(4):
        answer = edges.model(
            {"messages": messages, "temperature": 0.2}, model=MODEL_ID, seed=task["seed"] + turn
        )
        if answer["action"] == "reply":
            edges.decision("finish", "reply", options=["reply", "escalate"])
            return {
                "reply": answer["text"],
                "priority": priority,
                "elapsed_s": round(edges.clock("ticket_closed") - started, 6),
            }
        result = edges.tool(answer["tool"], answer["args"])
        messages.append({"role": "tool", "content": f"status {result}"})
    edges.decision("finish", "escalate", options=["reply", "escalate"])
    return {"reply": "escalated to a human", "priority": priority}
