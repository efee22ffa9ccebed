"""Replay never acts: under replay no socket is opened from the agent's context.

Every call an integration wraps is served from the record, so a replay has no reason to reach
the network. A connection the agent opens under replay comes through a path nothing wraps (a
tool given to a framework unwrapped, an SDK client not wrapped, a side effect in the agent's
own code): it would act again (send the mail, charge the card) while the replay reports a
match. So while :func:`replay` or :func:`areplay` runs the agent, ``socket.connect`` in the
agent's context (its asyncio tasks, and the threads a framework starts with a copy of it)
raises a ``ReplayDivergence`` naming the address and the agent's frame that opened it, before
anything leaves the process; the replay's result is that divergence even if the agent catches
it. Outside a replay (a fork's live tail, a recording, the rest of the process) nothing
changes. docs/design.md, "Replay never acts".
"""

from __future__ import annotations

import socket
import sys
import sysconfig
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from types import FrameType
from typing import Any, Protocol

from tracevault.callsite import entry_site, is_task_boundary
from tracevault.errors import ReplayDivergence

__all__ = ["never_acts"]


class _Cursor(Protocol):
    def diverge(
        self,
        reason: str,
        *,
        actual_kind: str | None,
        diff: tuple[str, ...] = (),
        actual_request: Any = None,
        at: int | None = None,
    ) -> ReplayDivergence: ...


_ACTIVE: ContextVar[_Cursor | None] = ContextVar("tracevault_replaying", default=None)
_INSTALL = threading.Lock()
_installed: list[Any] = []
_LIBRARY = tuple(
    p for p in {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
)
_OURS = __file__.rsplit("/tracevault/", 1)[0] + "/tracevault/"


def _agent_frame(frame: FrameType | None) -> str:
    """``module:function:line`` of the nearest frame outside the libraries and tracevault.

    A task's stack ends at the loop step that runs it (a framework's own task, opened by
    the agent's call of an entry point): beyond it is whoever called ``asyncio.run``, a
    harness line, so the agent's entry point (``entered``) is named, or the task itself."""
    while frame is not None:
        if is_task_boundary(frame):
            return entry_site() or "an event-loop task with no agent frame on its stack"
        path = frame.f_code.co_filename
        if not path.startswith(_LIBRARY) and not path.startswith(_OURS) and "<" not in path:
            name = frame.f_globals.get("__name__", "?")
            return f"{name}:{frame.f_code.co_qualname}:{frame.f_lineno}"
        frame = frame.f_back
    return "a library frame"


def _refused(sock: socket.socket, cursor: _Cursor, address: Any) -> ReplayDivergence:
    """The divergence for a connect; the socket is closed (its opener only closes it on an
    ``OSError``, which this is not: a ``ReplayDivergence`` must not be read as a network
    failure to retry or fall back from)."""
    sock.close()
    where = _agent_frame(sys._getframe(2))
    return cursor.diverge(
        f"the agent opened a connection to {address!r} under replay, from {where}: a tool, "
        "model or service reached through a path no integration wraps would act again (it "
        "is refused before anything leaves the process). Record it: a tool through "
        "edges.tool or the framework integration's tool wrapper, a client through wrap()",
        actual_kind="CONNECT",
        actual_request={"connect": repr(address), "from": where},
    )


def _install() -> None:
    with _INSTALL:
        if _installed:
            return
        connect, connect_ex = socket.socket.connect, socket.socket.connect_ex

        def guarded_connect(self: socket.socket, address: Any) -> None:
            cursor = _ACTIVE.get()
            if cursor is not None:
                raise _refused(self, cursor, address)
            connect(self, address)

        def guarded_connect_ex(self: socket.socket, address: Any) -> int:
            cursor = _ACTIVE.get()
            if cursor is not None:
                raise _refused(self, cursor, address)
            return connect_ex(self, address)

        socket.socket.connect = guarded_connect  # type: ignore[method-assign,assignment]
        socket.socket.connect_ex = guarded_connect_ex  # type: ignore[method-assign,assignment]
        _installed.append((connect, connect_ex))


@contextmanager
def never_acts(cursor: _Cursor) -> Iterator[None]:
    """While inside, a socket connect in this context is a divergence (module docstring)."""
    _install()
    token = _ACTIVE.set(cursor)
    try:
        yield
    finally:
        _ACTIVE.reset(token)
