"""Crossings the agent abandoned: a timeout that fired, ``task.cancel()``, a race's loser.

Live, all three reach a crossing the same way: the agent's task is cancelled while the edge
awaits its callee, and the edge's ``await`` raises ``CancelledError``. The Recorder records
that as the crossing's error, with ``tracevault.cancelled = "caller"`` and the point among the
run's completions where it arrived (``tracevault.edges``; docs/design.md, "Cancellation").

Under replay the edge must not raise the recorded ``CancelledError`` itself. ``wait_for``
turns a ``CancelledError`` into ``TimeoutError`` only when *its own* timer cancelled the
call, and a task cancelled by another branch must be cancelled by that branch: an awaitable
that completes (or raises) before the caller's cancel arrives takes another path than the
agent took live. So an abandoned crossing is answered with nothing: it waits, as the callee
did live, until the agent's own cancellation arrives, and then lets it through. When no
cancellation comes (the agent changed: it no longer bounds the call), it waits the recorded
time the call ran plus the stall timeout, then diverges at the crossing's seq.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from tracevault.edges import CANCELLED_ATTRIBUTE
from tracevault.errors import ReplayDivergence
from tracevault.schemas import TraceEvent

__all__ = [
    "CANCELLED_TYPES",
    "abandoned",
    "cancelled",
    "never_cancelled",
    "raise_cancelled",
    "ran_for_s",
    "until_cancelled",
]

#: How a ``CancelledError`` is named in ``error.type`` (the Recorder writes the first).
CANCELLED_TYPES = frozenset(
    {"asyncio.exceptions.CancelledError", "asyncio.CancelledError", "CancelledError"}
)


def cancelled(ev: TraceEvent) -> bool:
    """Whether the crossing ended with ``CancelledError`` (abandoned, or raised by its callee)."""
    return ev.error is not None and ev.error.type in CANCELLED_TYPES


def abandoned(ev: TraceEvent) -> bool:
    """Whether the agent cancelled this crossing while its callee ran.

    A record made before ``tracevault.cancelled`` existed says nothing: a ``CancelledError``
    there is taken as the caller's, by far the common case.
    """
    return cancelled(ev) and ev.attributes.get(CANCELLED_ATTRIBUTE) != "callee"


def ran_for_s(ev: TraceEvent) -> float:
    """How long the crossing ran live before it ended (its ``duration_us``), in seconds."""
    try:
        return max(int(ev.attributes.get("duration_us", "0")), 0) / 1e6
    except ValueError:
        return 0.0


def never_cancelled(ev: TraceEvent, waited_s: float) -> str:
    """The divergence reason for an abandoned crossing the re-run never cancels."""
    return (
        f"the record says the {ev.kind.value} call at seq {ev.seq} was cancelled after "
        f"{ran_for_s(ev):.3f}s (a timeout, task.cancel() or a race it lost), but nothing "
        f"cancelled it under replay within {waited_s:.1f}s"
    )


def raise_cancelled(ev: TraceEvent) -> None:
    """Raise the recorded ``CancelledError`` as the real one (a sync edge, or the callee's)."""
    message = ev.error.message if ev.error is not None else ""
    raise asyncio.CancelledError(message or None)


async def until_cancelled(
    ev: TraceEvent, stall_s: float, diverge: Callable[[str], ReplayDivergence]
) -> None:
    """Wait for the agent to cancel the abandoned crossing ``ev``; raise its cancellation.

    For a record served in seq order (its crossings never overlapped). After the recorded
    time plus ``stall_s`` without a cancel, raise ``diverge(reason)``'s divergence.
    """
    loop = asyncio.get_running_loop()
    late = loop.create_future()
    wait_s = stall_s + ran_for_s(ev)
    timer = loop.call_later(wait_s, _resolve, late)
    try:
        await late  # only the agent's cancellation ends this early
    finally:
        timer.cancel()
    raise diverge(never_cancelled(ev, wait_s))


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)
