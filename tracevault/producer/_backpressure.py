"""Holding the agent back while the Publisher's thread is behind: the spool bound as a promise.

The agent's thread only appends to the Publisher's queue; the Publisher's thread takes the
queue (produces it, or encodes it and ``fsync``s it to the spool). On a saturated CPU that
thread may not be scheduled for hundreds of ms while the agent's thread, which holds the
CPU, keeps appending: accepted events then sit in memory past ``SPOOL_DURABLE_MS``. So when
the oldest untaken event may be ``HOLD_AFTER_S`` old, or the queue is longer than the thread
can write in that time, the agent's call waits (a condition variable, which also hands the
process's CPU and the GIL to the Publisher's thread) until the thread has taken every event
up to its own, at most ``HOLD_MAX_S``. The agent waits only on the local disk: the
Publisher's thread never waits on Kafka for longer than a poll while events are queued.

Why waiting, not writing the spool on the agent's thread: one thread owns the state
(``direct``/``spooling``), librdkafka, the spool writer and the order of segments; a second
writer would need a lock on every append and could interleave a run's events across two
chunks. See docs/design.md, "The spool".

Cheap when the queue is fresh: the Publisher's thread, not the agent, reads the clock. Each
time it has taken everything published before a moment ``mark``, it sets ``fresh_at = mark``,
so every untaken event was accepted after ``fresh_at``. The agent compares the clock with it
only when the queue held an event before its own (never in a slow agent's usual call), and
then only for every 16th event once the queue is longer than 16.
"""

from __future__ import annotations

import threading
import time

__all__ = ["HOLD_AFTER_S", "HOLD_MAX_S", "Backpressure"]

#: The oldest untaken event may be this old: the agent waits (a quarter of the 100 ms bound,
#: leaving the rest for writing the backlog, the fsync and a late wake-up on a busy host).
HOLD_AFTER_S = 0.025
#: The longest one call waits: the thread has then fallen behind on the disk itself, and the
#: next call waits again; the agent is slowed to the disk's pace, never stopped.
HOLD_MAX_S = 0.1
#: Below this queue length every call looks at the clock; above it, every 16th.
CHECK_EACH = 16
#: Events the thread writes between two checks of a long queue (a power of two).
CHECK_EVERY = 16
#: The queue may hold this many events while spooling before the writer's speed is known.
_FIRST_CAP = 4000
_NO_CAP = 1 << 62


class Backpressure:
    """What the agent's and the Publisher's threads share to keep untaken events young."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._holding = 0
        #: every event not yet taken was accepted after this (monotonic s; the thread's)
        self.fresh_at = time.monotonic()
        #: events taken so far (produced, spooled durably, or lost), counted like ``published``
        self.taken = 0
        #: longest queue the thread writes within ``HOLD_AFTER_S`` (while spooling)
        self.cap = _NO_CAP
        self.waits = 0
        self.seconds = 0.0

    # -- the Publisher's thread -------------------------------------------------------------
    def fresh(self, mark: float) -> None:
        """Everything published before ``mark`` is taken."""
        self.fresh_at = max(self.fresh_at, mark)

    def took(self, count: int) -> None:
        """``count`` events are taken; wakes agents waiting for them."""
        self.taken = count
        if self._holding:
            with self._cond:
                self._cond.notify_all()

    def wrote(self, events: int, seconds: float) -> None:
        """A full spool chunk took ``seconds``: the queue the writer keeps young is known."""
        if seconds > 0:
            self.cap = max(events, int(events / seconds * HOLD_AFTER_S))

    def spooling(self, on: bool) -> None:
        """The queue's length matters only while the thread writes the spool itself."""
        self.cap = _FIRST_CAP if on else _NO_CAP

    # -- the agent's thread -----------------------------------------------------------------
    def hold(
        self, n: int, backlog: int, wake: threading.Event, thread: threading.Thread | None
    ) -> None:
        """Wait until event ``n`` (just queued behind ``backlog - 1``) is taken, if the
        queue is too old or too long; see the module docstring."""
        start = time.monotonic()
        if (start - self.fresh_at < HOLD_AFTER_S and backlog <= self.cap) or self.taken >= n:
            return
        wake.set()  # the thread may be napping between loop turns
        deadline = start + HOLD_MAX_S
        with self._cond:
            self._holding += 1
            try:
                while self.taken < n and thread is not None and thread.is_alive():
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(left)
            finally:
                self._holding -= 1
                self.waits += 1
                self.seconds += time.monotonic() - start
        if self.taken >= n:
            # events after n were accepted after n (within µs of ``start``)
            self.fresh(start)
