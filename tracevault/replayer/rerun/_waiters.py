"""What a replayed call waits on while the interleaver holds it (docs/design.md,
"Concurrency inside a run"): a matched call waiting for its turn, and a pool thread's call
held until the crossing its record names before it has started. Kept apart from the
interleaver's matching, which decides when each is woken."""

from __future__ import annotations

import asyncio
import threading

from tracevault.edges import Crossing
from tracevault.schemas import TraceEvent

__all__ = ["Held", "Waiter", "resolve", "wake_when_idle"]

_IDLE_HOPS = 1000  # loop iterations a crossing recorded apart waits for its loop to go idle
_OTHER_LOOP_HOPS = 8  # a loop without asyncio's ready queue: iterations instead


class Waiter:
    """A matched call waiting for its turn to complete (``abandoned``: and for its cancel).

    ``wake()`` means "look again": its turn came, or the run failed. An async waiter's
    future may be cancelled under it (a cancel of its task cancels what the task awaits), so
    :meth:`wait` awaits a fresh one then, and ``wake`` resolves whichever is current.
    """

    __slots__ = ("abandoned", "deferred", "event", "fut", "loop", "parked", "woken")

    def __init__(self, loop: asyncio.AbstractEventLoop | None, abandoned: bool = False) -> None:
        self.loop = loop
        self.fut: asyncio.Future[None] | None = None if loop is None else loop.create_future()
        self.event: threading.Event | None = threading.Event() if loop is None else None
        self.woken = False
        self.abandoned = abandoned
        self.parked = False  # its task awaits ``fut``: a wake resumes it in wake order
        self.deferred = False  # a wake waits for its loop to run idle (recorded apart)

    def wake(self) -> None:
        self.woken = True
        if self.event is not None:
            self.event.set()
            return
        assert self.loop is not None
        if asyncio.events._get_running_loop() is self.loop:
            resolve(self)
        else:
            self.loop.call_soon_threadsafe(resolve, self)

    async def wait(self) -> None:
        """Await the next ``wake`` (the caller looks at ``woken`` and the run first)."""
        assert self.loop is not None and self.fut is not None
        if self.fut.done():
            self.fut = self.loop.create_future()
        self.parked = True
        await self.fut


class Held:
    """A pool thread's call held until the crossing its record names before it started."""

    __slots__ = ("crossing", "data", "prev", "ready", "served")

    def __init__(self, crossing: Crossing, data: bytes, prev: int | None) -> None:
        self.crossing = crossing
        self.data = data
        self.prev = prev
        self.ready = threading.Event()
        self.served: tuple[TraceEvent, Waiter | None] | None = None


def resolve(waiter: Waiter) -> None:
    fut = waiter.fut
    if fut is not None and not fut.done():
        fut.set_result(None)


def wake_when_idle(waiter: Waiter, lock: threading.Lock, hops: int = 0) -> None:
    """Wake a crossing recorded as coming back apart from the one before, once its loop has
    nothing left to run: live, what that one's completion let go (a framework's
    ``asyncio.wait`` seeing it done, its consumer) ran before this result arrived.

    Idle is an empty ready queue (asyncio's ``_ready``; another loop gets a few hops); a loop
    that never runs idle (a task spinning on ``sleep(0)``) is given up on after
    ``_IDLE_HOPS`` iterations and the crossing woken anyway. ``lock``: the interleaver's.
    """
    loop = waiter.loop
    assert loop is not None
    ready = getattr(loop, "_ready", None)
    busy = len(ready) > 0 if ready is not None else hops < _OTHER_LOOP_HOPS
    if busy and hops < _IDLE_HOPS:
        loop.call_soon(wake_when_idle, waiter, lock, hops + 1)
        return
    with lock:
        waiter.deferred = False
        if not waiter.woken:
            waiter.wake()
