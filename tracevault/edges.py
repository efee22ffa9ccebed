"""The agent-facing edges: the one interface the Recorder and the Replayer both implement.

An agent takes its input and an :class:`Edges` object; every model call, tool call, clock
read, random seed, external-state read and decision goes through it. Live, the Recorder's
edges call the real thing and publish one event per crossing; under replay, the Replayer's
edges return exactly what was recorded, in order, and never touch the network. The same
agent code runs in both, so only the edges change.

The ``*_crossing`` functions below are the single definition of what each crossing records
(kind, request JSON, model, seed). Recording and replay both build crossings through them,
so a re-run's request is comparable byte for byte with the recorded one.

Payload conventions (canonical JSON in ``request``/``response``):

=============== ============================================= =============================
kind            request                                        response
=============== ============================================= =============================
RUN_STARTED     ``{"input": <agent input>}``                   ``null``
MODEL_CALL      the request as the agent gave it               the model's answer
TOOL_CALL       ``{"tool": name, "args": args}``               the tool's result (or error)
CLOCK           ``{"name": name}``                             ``{"time": <float seconds>}``
RANDOM          ``{"name": name}`` (``seed`` field set)        ``{"seed": seed}``
EXTERNAL_STATE  ``{"name": name}``                             the value read
DECISION        ``{"name": n, "choice": c, "options": [...]}`` ``null``
ERROR           ``{}`` (``error`` field set)                   ``null``
RUN_FINISHED    ``{}``                                         ``{"output": <agent output>}``
GAP             ``{"missing_from": a, "missing_to": b}``       ``null`` (sequencer only)
=============== ============================================= =============================

Every run starts with RUN_STARTED (seq 0) and ends with exactly one RUN_FINISHED. When the
agent raises, the Recorder writes ERROR (the exception's type and message in ``error``) and
then RUN_FINISHED with the same ``error`` and ``{"output": null}``, and re-raises; a crossing
that raised (a tool, the model) is recorded in its own event's ``error`` field instead.

A crossing the agent abandoned while its callee ran (``asyncio.wait_for`` timed out,
``task.cancel()``, the loser of a race cancelled) is recorded like one that raised: ``error``
``asyncio.exceptions.CancelledError`` (what the edge's ``await`` saw), response ``null``, its
``interleave`` the point among the run's completions where the cancellation arrived, and
``attributes["tracevault.cancelled"]`` ``"caller"`` (the agent cancelled it) or ``"callee"``
(the callee raised ``CancelledError`` itself). Under replay a ``"caller"`` crossing is not
answered: it waits, as the callee did live, for the agent's own cancellation to arrive
(docs/design.md, "Cancellation").
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from tracevault.errors import PayloadError
from tracevault.schemas import EventKind

__all__ = [
    "APART_ATTRIBUTE",
    "CANCELLED_ATTRIBUTE",
    "JSON",
    "Crossing",
    "Edges",
    "clock_crossing",
    "decision_crossing",
    "model_crossing",
    "model_call_crossing",
    "random_crossing",
    "reported_model",
    "state_crossing",
    "tool_crossing",
    "validate_model_id",
]

JSON = Any
"""A JSON value: dict with str keys, list, str, int, float, bool or None."""

CANCELLED_ATTRIBUTE = "tracevault.cancelled"
"""Attribute of a crossing recorded with ``CancelledError``: ``"caller"`` or ``"callee"``."""

APART_ATTRIBUTE = "tracevault.apart"
"""Attribute (``"1"``) of an async crossing that was in flight when the run's previous
crossing completed, yet completed in a later event-loop iteration than it: replay hands its
result back only once the loop has run idle, not with the one before (docs/design.md,
"Concurrency inside a run"). Without it, overlapping completions are woken together."""


def validate_model_id(model: object, *, path: str = "$.model") -> str:
    """Return ``model`` if it is a usable id; raise :class:`PayloadError` otherwise.

    Only the form is checked here, for recording and replay alike. Whether the id names an
    exact build (no moving alias) is the Recorder's policy, ``tracevault.model_ids``: replay
    serves whatever id the record holds.
    """
    if not isinstance(model, str) or not model.strip():
        raise PayloadError(
            f"{path} must name the exact model build (e.g. 'gpt-4o-2024-08-06'), got {model!r}",
            path=path,
        )
    if model != model.strip() or any(c.isspace() for c in model):
        raise PayloadError(f"{path} {model!r} contains white space", path=path)
    return model


@dataclass(frozen=True, slots=True)
class Crossing:
    """What one edge call records before the response is known."""

    kind: EventKind
    request: JSON
    model: str | None = None
    seed: int | None = None


def model_crossing(request: JSON, *, model: str, seed: int | None = None) -> Crossing:
    return Crossing(EventKind.MODEL_CALL, request, validate_model_id(model), seed)


def model_call_crossing(
    request: JSON, *, model: str | None, seed: int | None, call: object = None
) -> Crossing:
    """The crossing of ``edges.model``: ``model=None`` is allowed only with a per-call ``call``.

    Provider adapters (``tracevault.integrations``) cannot know the exact build before the
    provider answers, and must not make the developer type it: they pass ``model=None`` and
    the crossing's model is the one the response names (:func:`reported_model`), filled in by
    the Recorder after the call (which applies its exact-build policy, ``tracevault.model_ids``,
    to it) and taken from the record under replay (it is the provider's output there, like the
    response; the requested model is compared inside ``request``).
    """
    if model is None and call is not None:
        return Crossing(EventKind.MODEL_CALL, request, None, seed)
    return Crossing(EventKind.MODEL_CALL, request, validate_model_id(model), seed)


def reported_model(response: JSON) -> str:
    """The model id a provider's response names in its top-level ``"model"``, or refuse it."""
    named = response.get("model") if isinstance(response, dict) else None
    return validate_model_id(named, path="$.response.model")


def _require_name(name: object, path: str, what: str) -> None:
    # Callers are typed, but agents are not: a None name must fail in the agent, named.
    if not isinstance(name, str) or not name:
        raise PayloadError(f"{path} must be {what}, got {name!r}", path)


def tool_crossing(name: str, args: JSON) -> Crossing:
    _require_name(name, "$.request.tool", "a non-empty tool name")
    return Crossing(EventKind.TOOL_CALL, {"tool": name, "args": args})


def clock_crossing(name: str = "now") -> Crossing:
    return Crossing(EventKind.CLOCK, {"name": name})


def random_crossing(name: str = "rng", seed: int | None = None) -> Crossing:
    return Crossing(EventKind.RANDOM, {"name": name}, seed=seed)


def state_crossing(name: str) -> Crossing:
    _require_name(name, "$.request.name", "the name of the state read")
    return Crossing(EventKind.EXTERNAL_STATE, {"name": name})


def decision_crossing(name: str, choice: JSON, options: list[JSON] | None = None) -> Crossing:
    return Crossing(
        EventKind.DECISION,
        {"name": name, "choice": choice, "options": list(options) if options is not None else None},
    )


@runtime_checkable
class Edges(Protocol):
    """What an agent is given: every crossing of the harness boundary goes through here.

    Live (``tracevault.producer.Recorder``) each call does the real work and records it;
    under replay (``tracevault.replayer``) each call returns the recorded value and raises
    ``ReplayDivergence`` when the call differs from the record.
    """

    @property
    def run_id(self) -> str: ...

    def model(
        self,
        request: JSON,
        *,
        model: str | None,
        seed: int | None = None,
        call: Callable[..., Any] | None = None,
    ) -> JSON:
        """Call the model with ``request``; ``model`` is the exact build (no aliases).

        ``call`` (``call(request, model=..., seed=...)``) is this one crossing's callee in place
        of the Recorder's model function, never called under replay; with ``model=None`` the
        build recorded is the one the response names (see :func:`model_call_crossing`).
        """

    async def amodel(
        self,
        request: JSON,
        *,
        model: str | None,
        seed: int | None = None,
        call: Callable[..., Any] | None = None,
    ) -> JSON:
        """``model`` for async agents (the callee may be a coroutine function)."""

    def tool(self, name: str, args: JSON) -> JSON:
        """Dispatch tool ``name``; a recorded exception is raised again under replay."""

    async def atool(self, name: str, args: JSON) -> JSON:
        """``tool`` for async agents."""

    def clock(self, name: str = "now") -> float:
        """Wall-clock seconds since the epoch, as recorded."""

    def random(self, name: str = "rng", *, seed: int | None = None) -> random.Random:
        """An RNG whose seed is recorded (drawn fresh when ``seed`` is None)."""

    def state(self, name: str, read: Callable[[], JSON] | None = None) -> JSON:
        """A named read of external state; ``read`` is not called under replay."""

    async def astate(self, name: str, read: Callable[[], Awaitable[JSON]] | None = None) -> JSON:
        """``state`` for async readers."""

    def decision(self, name: str, choice: JSON, *, options: list[JSON] | None = None) -> JSON:
        """Record a control-flow choice and return it; replay checks the same choice is made."""

    def subagent(
        self, name: str, agent: Callable[..., Any], input: JSON, *, agent_version: str | None = None
    ) -> JSON:
        """Run ``agent(input, edges)`` as a linked child run (``tracevault.links``).

        Under replay the child's recorded output is served and the child is not run, unless
        it is replayed too (``replay run --recurse``).
        """

    async def asubagent(
        self, name: str, agent: Callable[..., Any], input: JSON, *, agent_version: str | None = None
    ) -> JSON:
        """``subagent`` for async agents."""
