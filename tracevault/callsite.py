"""Where in the agent's code a crossing was made: ``module:function:line``.

``replay run --keep-going`` and ``replay diff`` align two runs by kind, call site and ordinal
(docs/design.md, "Investigating a run"), so that one inserted or removed call does not shift
every later step. The Recorder stores the site in the event's ``attributes`` under
:data:`SITE_ATTRIBUTE`; replay computes it the same way for the re-run's crossings.

The site is the first frame above the edge call that is not harness code (the Recorder, the
replayer, the SDK adapters, asyncio and thread-pool plumbing). Frames are classified once per
code object and each ``(code, line)`` is formatted once, so the agent's hot path pays a dict
lookup or two per frame.

An async edge (``atool``, ``amodel``...) takes its site where it is *called*, not where its
coroutine runs: ``asyncio.gather(edges.atool(...))`` and ``TaskGroup.create_task`` run the
coroutine in a new task whose stack holds only the event loop and whatever called
``asyncio.run``. :func:`sited` wraps such an edge: the caller's site is noted when the
coroutine is made and handed to the first :func:`call_site` inside it.

A framework entry point that runs the agent's work in tasks of its own (Pydantic AI's agent
graph) is called by the agent inside :func:`entered`: a crossing whose stack reaches the event
loop's callback runner without an agent frame is sited at the agent's line that called the
entry point, not at whatever called ``asyncio.run``.

A framework that calls an edge for the agent (LangGraph's ``ToolNode`` runs each tool call of
a model's answer in a thread-pool worker) names the call with :func:`called`: its stable
identity (the tool-call id), recorded under :data:`CALL_ID_ATTRIBUTE` and used by replay to
match concurrent calls by it, not by arrival order (docs/design.md, "Concurrency inside a
run"); and the site to record when the stack holds no agent frame (the tool's definition).
"""

from __future__ import annotations

import asyncio
import functools
import sys
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from types import CodeType, FrameType, MethodType
from typing import Any, Concatenate, ParamSpec, TypeVar, cast

__all__ = [
    "CALL_ID_ATTRIBUTE",
    "SITE_ATTRIBUTE",
    "add_harness_module",
    "call_site",
    "called",
    "entered",
    "is_task_boundary",
    "entry_site",
    "site_function",
    "sited",
    "take_call_id",
]

_P = ParamSpec("_P")
_R = TypeVar("_R")
_S = TypeVar("_S")
# The site an async edge was called from, until the first call_site() in it takes it.
_PENDING: ContextVar[str | None] = ContextVar("tracevault_pending_site", default=None)

#: The attribute key holding a crossing's call site (``module:function:line``).
SITE_ATTRIBUTE = "tracevault.site"
#: The attribute key holding a crossing's stable identity given by its framework (a tool-call
#: id), by which replay matches concurrent calls.
CALL_ID_ATTRIBUTE = "tracevault.call_id"
# The identity the next crossing of this context is made under, until it takes it.
_CALL_ID: ContextVar[str | None] = ContextVar("tracevault_call_id", default=None)
# The agent's line that called the framework entry point running now (``entered``).
_ENTRY: ContextVar[str | None] = ContextVar("tracevault_entry_site", default=None)
# Where a task's stack ends: the event loop running one callback (a task step); beyond it
# are only the loop and whatever called asyncio.run, never the agent's call.
_LOOP_STEP = asyncio.events.Handle._run.__code__

_HARNESS: list[str] = [
    "tracevault.producer",
    "tracevault.replayer",
    "tracevault.integrations",
    "tracevault.edges",
    "tracevault.callsite",
    "asyncio",
    "concurrent.futures",
    "threading",
    "functools",
    "contextlib",
]
# id(code) -> (code, is harness, "module:function", instruction offset -> site). The code
# object is kept so its id cannot be reused by another; ids, unlike code objects, hash for
# free, and an offset (f_lasti) costs a tenth of a line number (f_lineno walks a table).
_Entry = tuple[CodeType, bool, str, dict[int, str]]
_cache: dict[int, _Entry] = {}
_CACHE_MAX = 65_536


def add_harness_module(prefix: str) -> None:
    """Treat modules named ``prefix`` (or below it) as harness code, never a call site.

    For a wrapper of the edges that lives outside tracevault (a team's own adapter), so the
    site recorded is the agent's line that called the wrapper.
    """
    if prefix not in _HARNESS:
        _HARNESS.append(prefix)
        _cache.clear()


def _entry(frame: FrameType) -> _Entry:
    code = frame.f_code
    name = str(frame.f_globals.get("__name__", "?"))
    harness = any(name == p or name.startswith(p + ".") for p in _HARNESS)
    if len(_cache) > _CACHE_MAX:
        _cache.clear()
    entry: _Entry = (code, harness, f"{name}:{code.co_qualname}", {})
    _cache[id(code)] = entry
    return entry


def call_site(depth: int = 1) -> str | None:
    """The ``module:function:line`` of the nearest non-harness caller, or None when none is.

    Inside a :func:`sited` async edge, the site its caller had (taken once: a crossing nested
    in that edge's callee finds its own).
    """
    pending = _PENDING.get()
    if pending is not None:
        _PENDING.set(None)
        return pending
    return _walk(depth + 1, _ENTRY.get())


def _walk(depth: int, entered_at: str | None) -> str | None:
    try:
        frame: FrameType | None = sys._getframe(depth)
    except ValueError:  # the stack is not that deep
        return None
    while frame is not None:
        code = frame.f_code
        entry = _cache.get(id(code))
        if entry is None or entry[0] is not code:
            entry = _entry(frame)
        if not entry[1]:
            offset = frame.f_lasti
            site = entry[3].get(offset)
            if site is None:
                site = entry[3][offset] = f"{entry[2]}:{frame.f_lineno}"
            return site
        if entered_at is not None and code is _LOOP_STEP:
            return entered_at
        frame = frame.f_back
    return None


def is_task_boundary(frame: FrameType) -> bool:
    """True for the event loop's frame that runs one task step: the frames beyond it are the
    loop's and whatever called ``asyncio.run``, never the agent's call of this task."""
    return frame.f_code is _LOOP_STEP


def entry_site() -> str | None:
    """The agent's line that called the framework entry point running now (``entered``)."""
    return _ENTRY.get()


@contextmanager
def entered(site: str | None) -> Iterator[None]:
    """The agent called a framework entry point at ``site`` (``call_site()`` there): inside,
    a crossing made in the framework's own tasks, with no agent frame on its stack, is sited
    at ``site``."""
    token = _ENTRY.set(site)
    try:
        yield
    finally:
        _ENTRY.reset(token)


@contextmanager
def called(identity: str | None, site: str | None = None) -> Iterator[None]:
    """The edge calls inside are a framework's call named ``identity``; ``site`` is the
    call site to record when the stack holds no agent frame (see the module docstring)."""
    token = _CALL_ID.set(identity)
    pending = None
    # inside an entry point, the event loop's step ends the agent's stack ("": none found)
    stop = None if _ENTRY.get() is None else ""
    if site is not None and _PENDING.get() is None and not _walk(3, stop):
        pending = _PENDING.set(site)
    try:
        yield
    finally:
        if pending is not None:
            _PENDING.reset(pending)
        _CALL_ID.reset(token)


def take_call_id() -> str | None:
    """The identity of the crossing being made, taken once (a crossing nested in its callee
    is not the framework's call)."""
    identity = _CALL_ID.get()
    if identity is not None:
        _CALL_ID.set(None)
    return identity


def site_function(site: str | None) -> str | None:
    """``module:function`` of a site: the same call after an edit moved its line."""
    if site is None:
        return None
    return site.rpartition(":")[0]


def sited(
    edge: Callable[Concatenate[_S, _P], Coroutine[Any, Any, _R]],
) -> Callable[Concatenate[_S, _P], Coroutine[Any, Any, _R]]:
    """An async edge whose crossings are sited where it is called (see the module doc)."""
    return cast("Callable[Concatenate[_S, _P], Coroutine[Any, Any, _R]]", _Sited(edge))


class _Sited:
    """A method that notes its caller's site, then returns the edge's coroutine.

    It still *is* a coroutine function to ``inspect`` (same ``__code__``, flags and
    signature as the edge), as the Edges protocol says: frameworks that take
    ``edges.atool`` as a callable decide by ``inspect.iscoroutinefunction`` to await it.
    """

    def __init__(self, edge: Callable[..., Coroutine[Any, Any, Any]]) -> None:
        functools.update_wrapper(self, edge)
        self._edge = edge
        self.__code__ = edge.__code__
        self.__defaults__ = edge.__defaults__
        self.__kwdefaults__ = edge.__kwdefaults__

    def __call__(self, owner: Any, /, *args: Any, **kwargs: Any) -> Coroutine[Any, Any, Any]:
        site = call_site(2)
        return _at(site, self._edge(owner, *args, **kwargs))

    def __get__(self, instance: Any, cls: type | None = None) -> Any:
        return self if instance is None else MethodType(self, instance)


async def _at(site: str | None, coro: Coroutine[Any, Any, _R]) -> _R:
    token = _PENDING.set(site)
    try:
        return await coro
    finally:
        _PENDING.reset(token)
