"""The edges a live agent calls: model, tool, state, clock, random, decision.

Split from ``_recorder``: each public edge method of :class:`~tracevault.producer.Recorder`
(and its async twin) checks what it was given, builds its crossing with the shared
``*_crossing`` function of ``tracevault.edges`` and hands it to the steps in ``_crossing``.
:class:`LiveEdges` is a base class of the Recorder, so the methods are the Recorder's own,
moved whole; the tools registry (``_tools``) is here with ``add_tool``.
"""

from __future__ import annotations

import random
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any

from tracevault.callsite import sited
from tracevault.edges import (
    JSON,
    clock_crossing,
    decision_crossing,
    model_call_crossing,
    random_crossing,
    state_crossing,
    tool_crossing,
)
from tracevault.errors import ConfigError, PayloadError
from tracevault.model_ids import check_model_id
from tracevault.producer._crossing import _NULL, Crossings, _now_us
from tracevault.producer._tool import Tool
from tracevault.schemas import canonical_json

__all__ = ["LiveEdges"]

_INT64 = (-(1 << 63), (1 << 63) - 1)
# RFC 8785 holds integers exactly up to here; the RANDOM response carries the seed as JSON.
_SAFE_INT = (1 << 53) - 1


def _is_text(value: object) -> bool:
    """A str that UTF-8 can encode (no lone surrogates): the Avro strings must be."""
    # Callers are typed, agents are not: runtime checks for what annotations promise.
    if not isinstance(value, str):
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _check_seed(seed: object, path: str = "$.seed") -> None:
    if seed is None:
        return
    if isinstance(seed, bool) or not isinstance(seed, int) or not _INT64[0] <= seed <= _INT64[1]:
        raise PayloadError(f"{path} must be an int in the 64-bit range or None, got {seed!r}", path)


class LiveEdges(Crossings):
    """The Recorder's edge methods (the :class:`~tracevault.edges.Edges` protocol)."""

    _tools: dict[str, Tool]
    _models_ok: set[str]
    _model_fn: Callable[..., Any] | None
    _clock: Callable[[str], float] | None

    def _model_target(
        self, model: str | None, seed: int | None, call: Callable[..., Any] | None
    ) -> Callable[..., Any]:
        if model is not None and not (type(model) is str and model in self._models_ok):
            # None: the build the response names is checked instead, after the call
            if not _is_text(model):
                raise PayloadError(f"$.model {model!r} is not UTF-8 text", "$.model")
            check_model_id(model, self._model_allow)
            self._models_ok.add(model)
        _check_seed(seed)
        if call is not None:
            if not callable(call):
                raise ConfigError(f"edges.model(call=...) must be callable, got {call!r}")
            return call
        fn = self._model_fn
        if fn is None:
            raise ConfigError("this Recorder has no model: pass Recorder(model=call_model)")
        return fn

    def model(
        self,
        request: JSON,
        *,
        model: str | None,
        seed: int | None = None,
        call: Callable[..., Any] | None = None,
    ) -> JSON:
        crossing = model_call_crossing(request, model=model, seed=seed, call=call)
        fn = self._model_target(model, seed, call)
        return self._call(crossing, lambda _k: fn(request, model=model, seed=seed), False)

    @sited
    async def amodel(
        self,
        request: JSON,
        *,
        model: str | None,
        seed: int | None = None,
        call: Callable[..., Any] | None = None,
    ) -> JSON:
        crossing = model_call_crossing(request, model=model, seed=seed, call=call)
        fn = self._model_target(model, seed, call)
        return await self._acall(crossing, lambda _k: fn(request, model=model, seed=seed), False)

    def add_tool(self, name: str, fn: Callable[..., Any] | Tool) -> None:
        """Register tool ``name`` after construction, once: for framework adapters
        (``tracevault.integrations``) that find an agent's tools only when it runs.

        A name already registered with another function is refused: the crossing must call
        one callee, whichever registered it first.
        """
        tool = fn if isinstance(fn, Tool) else Tool(fn)
        had = self._tools.get(name)
        if had is None:
            if not _is_text(name) or not name:
                raise ConfigError(f"tool names must be non-empty strings, got {name!r}")
            self._tools[name] = tool
        elif had.fn is not tool.fn:
            raise ConfigError(
                f"tool {name!r} is already registered in this Recorder with another function"
            )

    def _tool(self, name: str) -> Tool:
        tool = self._tools.get(name)
        if tool is None:
            known = ", ".join(sorted(self._tools)) or "none"
            raise PayloadError(
                f"$.request.tool {name!r} is not a tool of this Recorder (known: {known}); "
                "register it in Recorder(tools={...})",
                "$.request.tool",
            )
        return tool

    @staticmethod
    def _invoker(tool: Tool, args: JSON) -> Callable[[str | None], Any]:
        fn = tool.fn
        if tool.side_effect:
            return lambda key: fn(args, idempotency_key=key)
        return lambda _k: fn(args)

    def tool(self, name: str, args: JSON) -> JSON:
        crossing = tool_crossing(name, args)
        tool = self._tool(name)
        return self._call(crossing, self._invoker(tool, args), tool.side_effect)

    @sited
    async def atool(self, name: str, args: JSON) -> JSON:
        crossing = tool_crossing(name, args)
        tool = self._tool(name)
        return await self._acall(crossing, self._invoker(tool, args), tool.side_effect)

    def clock(self, name: str = "now") -> float:
        if self._clock is not None:  # Recorder(clock=...): e.g. a fork serving recorded reads
            now = self._clock(name)
            self._instant(clock_crossing(name), canonical_json({"time": now}), _now_us(), None)
            return now
        ns = time.time_ns()
        now = ns / 1e9
        self._instant(clock_crossing(name), canonical_json({"time": now}), ns // 1000, None)
        return now

    def random(self, name: str = "rng", *, seed: int | None = None) -> random.Random:
        _check_seed(seed)
        # 53 random bits: the seed stays an exact JSON number in the response (RFC 8785); a
        # larger seed given by the agent is shown there as a string, and replay reads the
        # event's Avro ``seed`` field either way.
        drawn = secrets.randbits(53) if seed is None else seed
        shown: int | str = drawn if -_SAFE_INT <= drawn <= _SAFE_INT else str(drawn)
        self._instant(
            random_crossing(name, seed), canonical_json({"seed": shown}), _now_us(), drawn
        )
        return random.Random(drawn)

    def state(self, name: str, read: Callable[[], JSON] | None = None) -> JSON:
        crossing = state_crossing(name)
        if read is None:
            raise ConfigError(f"state({name!r}) needs read=: live, the value must come from it")
        return self._call(crossing, lambda _k: read(), False)

    @sited
    async def astate(self, name: str, read: Callable[[], Awaitable[JSON]] | None = None) -> JSON:
        crossing = state_crossing(name)
        if read is None:
            raise ConfigError(f"astate({name!r}) needs read=: live, the value must come from it")
        return await self._acall(crossing, lambda _k: read(), False)

    def decision(self, name: str, choice: JSON, *, options: list[JSON] | None = None) -> JSON:
        self._instant(decision_crossing(name, choice, options), _NULL, _now_us(), None)
        return choice
