"""How a framework adapter records a tool whose callee only it can make: one dispatcher.

``edges.atool(name, args)`` records a TOOL_CALL and, live, calls the function the Recorder has
registered under ``name``. A framework's tool needs what only the adapter holds at that point
(the SDK's run context, a live MCP session), so the adapter registers :func:`_dispatch` under
the tool's name (``Recorder.add_tool``) and hands it the real callee through a context
variable for the length of the crossing. The Recorder calls its callee on the agent's own task,
so the variable is the one the adapter set. Under replay the callee is never called.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any

from pydantic import BaseModel

from tracevault.edges import JSON, Edges
from tracevault.errors import ConfigError

__all__ = ["atool", "jsonable"]

Callee = Callable[[JSON], Awaitable[JSON]]

_CALLEE: ContextVar[Callee | None] = ContextVar("tracevault_integration_callee", default=None)


async def _dispatch(args: JSON) -> JSON:
    callee = _CALLEE.get()
    if callee is None:
        raise ConfigError(
            "a tool registered by a tracevault integration was called outside its adapter: "
            "call it through the framework (or register your own function under its name)"
        )
    return await callee(args)


async def atool(edges: Edges, name: str, args: JSON, callee: Callee) -> JSON:
    """One TOOL_CALL ``name(args)``: live ``callee(args)``, under replay the recorded result."""
    add = getattr(edges, "add_tool", None)
    if add is not None:  # a Recorder (or an edges that records live); replay needs none
        add(name, _dispatch)
    token = _CALLEE.set(callee)
    try:
        return await edges.atool(name, args)
    finally:
        _CALLEE.reset(token)


def jsonable(value: Any) -> JSON:
    """What a framework tool's result (or an agent's output) records: JSON, as the framework
    shows it to the model: a string or JSON value as is, a Pydantic model dumped, anything
    else as ``str()``."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if value is None or isinstance(value, str | int | float | bool):
        return value
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError):
        return str(value)
