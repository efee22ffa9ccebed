"""The agent's call waits for a Publisher thread that fell behind, and only then.

tracevault/producer/_backpressure.py: the thread that takes the queue marks when it last had
taken everything; an agent's call that finds the oldest untaken event close to the spool's
bound, or the queue longer than the writer keeps young, waits until its own event is taken,
at most ``HOLD_MAX_S``. Real threads here; the SIGKILL tests with a saturated CPU are in
test_spool_kill.py.
"""

from __future__ import annotations

import threading
import time

from tracevault.producer._backpressure import HOLD_AFTER_S, HOLD_MAX_S, Backpressure


def _taker(bp: Backpressure, wake: threading.Event, count: int) -> threading.Thread:
    """A Publisher thread stand-in: takes ``count`` events once an agent wakes it."""

    def run() -> None:
        assert wake.wait(30), "the waiting agent did not wake the thread"
        bp.took(count)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


#: a mark "just now" that no scheduler delay under load can age past HOLD_AFTER_S
_JUST_NOW = 3600.0


def test_a_fresh_queue_costs_no_wait() -> None:
    bp = Backpressure()
    wake = threading.Event()
    bp.fresh(time.monotonic() + _JUST_NOW)
    bp.hold(10, 9, wake, threading.current_thread())
    assert (bp.waits, wake.is_set()) == (0, False)


def test_an_old_queue_holds_the_agent_until_its_event_is_taken() -> None:
    bp = Backpressure()
    wake = threading.Event()
    bp.fresh_at = time.monotonic() - 2 * HOLD_AFTER_S  # the thread has not run since
    thread = _taker(bp, wake, 10)
    before = time.monotonic()
    bp.hold(10, 3, wake, thread)
    assert bp.taken == 10, "the agent went on before its event was taken"
    assert bp.waits == 1 and bp.seconds > 0
    # released: every untaken event was accepted after the wait began
    assert bp.fresh_at >= before
    thread.join(30)


def test_a_long_queue_while_spooling_holds_the_agent_even_when_young() -> None:
    bp = Backpressure()
    wake = threading.Event()
    bp.spooling(True)
    bp.wrote(1000, 0.5)  # 2,000 events/s: 50 events within HOLD_AFTER_S, at least one chunk
    assert bp.cap == 1000
    bp.fresh(time.monotonic() + _JUST_NOW)
    bp.hold(900, 900, wake, threading.current_thread())
    assert bp.waits == 0
    thread = _taker(bp, wake, 1001)
    bp.hold(1001, 1001, wake, thread)
    assert bp.waits == 1 and bp.taken == 1001
    thread.join(30)
    bp.spooling(False)  # direct: the queue goes to librdkafka, its length does not matter
    bp.hold(1_000_000, 999_000, wake, thread)
    assert bp.waits == 1


def test_a_thread_that_cannot_catch_up_slows_the_agent_but_never_stops_it() -> None:
    bp = Backpressure()
    wake = threading.Event()
    bp.fresh_at = time.monotonic() - 1.0
    bp.hold(10, 10, wake, threading.current_thread())  # alive, never takes anything
    assert bp.waits == 1 and HOLD_MAX_S <= bp.seconds < 30
    assert wake.is_set(), "the Publisher's thread was not woken"
    dead = threading.Thread(target=lambda: None)
    dead.start()
    dead.join()
    bp.hold(11, 11, wake, dead)  # the thread is gone: nothing to wait for
    assert bp.waits == 2
