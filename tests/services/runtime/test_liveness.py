"""The liveness parts on their own: call deadlines, stop during a call, /healthz, signals,
the session supervisor.

The broker-outage behaviour of the real services is in ``tests/faults/test_outage.py`` and
``test_outage_all.py``; these pin the pieces they rely on, quickly and without a broker.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import KafkaError
from prometheus_client import CollectorRegistry, Counter

from tests.kafka_harness import free_port
from tracevault.errors import FencedError, ServiceUnavailableError
from tracevault.services.runtime import (
    BlockingCalls,
    Broken,
    CallDeadline,
    Health,
    KafkaWatch,
    Restart,
    Sessions,
    Stopping,
    raise_for,
    serve,
)


def test_a_call_past_its_deadline_is_abandoned_and_the_next_call_runs() -> None:
    calls = BlockingCalls("t", threading.Event())
    never = threading.Event()
    t0 = time.monotonic()
    with pytest.raises(CallDeadline, match="stuck call did not return within 1s"):
        calls.call("stuck call", lambda: never.wait(60), 1.0)
    assert time.monotonic() - t0 < 3
    assert calls.call("next call", lambda: 42, 5) == 42  # a new worker, not the stuck one
    never.set()


def test_stop_ends_a_stuck_call_after_the_grace() -> None:
    stop = threading.Event()
    calls = BlockingCalls("t", stop, stop_grace_s=0.5)
    never = threading.Event()
    threading.Timer(0.3, stop.set).start()
    t0 = time.monotonic()
    with pytest.raises(Stopping):
        calls.call("commit", lambda: never.wait(60), 60)
    assert time.monotonic() - t0 < 3
    never.set()


def test_errors_of_the_call_reach_the_caller() -> None:
    calls = BlockingCalls("t", threading.Event())

    def boom() -> None:
        raise ValueError("from the worker")

    with pytest.raises(ValueError, match="from the worker"):
        calls.call("boom", boom, 5)


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return int(r.status), r.read().decode()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read().decode()


def test_healthz_reports_progress_not_just_liveness() -> None:
    registry = CollectorRegistry()
    Counter("tv_test_things", "things", registry=registry).inc(3)
    health = Health("sequencer", stall_s=0.5)
    health.watch = KafkaWatch("t")
    port = serve(0, registry, health)

    health.set_lag(0)
    code, body = _get(port, "/healthz")
    assert code == 200 and json.loads(body)["status"] == "ok"
    assert "tv_test_things_total 3.0" in _get(port, "/metrics")[1]

    health.set_lag(120)  # work waiting, and no progress for longer than stall_s
    health.last_progress -= 1.0
    code, body = _get(port, "/health")
    doc = json.loads(body)
    assert code == 503 and doc["status"] == "stuck", doc
    assert "no progress" in doc["reason"] and "last lag seen: 120" in doc["reason"]

    health.progressed()
    assert _get(port, "/healthz")[0] == 200

    health.watch.down_since = time.monotonic() - 1.0  # no broker for longer than stall_s
    code, body = _get(port, "/healthz")
    assert code == 503 and "no Kafka broker reachable" in json.loads(body)["reason"]


def test_healthz_names_what_a_broker_that_answers_keeps_the_service_waiting_on() -> None:
    """Issue 30: 41 s of ``init_transactions: CONCURRENT_TRANSACTIONS`` from a broker that was
    up, while /healthz said "no Kafka broker reachable" (the statistics that would have said
    otherwise are not served while a call holds the main thread). A broker's answer clears
    the outage, and the stuck reason names the wait."""
    health = Health("sequencer", stall_s=0.5)
    health.watch = KafkaWatch("t")
    health.watch.down_since = time.monotonic() - 5.0  # an outage the statistics saw last
    health.last_progress -= 5.0
    assert "no Kafka broker reachable" in health.check()[1]["reason"]

    health.watch.answered()  # then a broker answered CONCURRENT_TRANSACTIONS
    health.waiting_on = "init_transactions: the broker answers CONCURRENT_TRANSACTIONS (for 5s)"
    ok, doc = health.check()
    assert not ok and health.watch.down_since is None
    assert doc["reason"].startswith("no progress for 5s"), doc
    assert (
        "waiting on init_transactions: the broker answers CONCURRENT_TRANSACTIONS"
        in (doc["reason"])
    )
    assert health.watch.outage_within(1.0)  # the outage that ended is remembered as one


def _wait_until_blocked_in_the_kernel(pid: int, timeout: float = 30.0) -> None:
    """Until the process's main thread sleeps on a futex: after it printed "blocking" that is
    init_transactions waiting for librdkafka's threads (Linux /proc; a condition, not a nap)."""
    task = Path(f"/proc/{pid}/task/{pid}")
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while True:
        state = (task / "stat").read_text().rsplit(")", 1)[1].split()[0]
        if state == "S" and "futex" in (task / "wchan").read_text():
            return
        assert time.monotonic() < deadline, f"main thread never blocked (state {state})"
        pause.wait(0.01)  # a deadline-bounded poll


def test_sigterm_ends_a_process_blocked_in_a_kafka_call_within_the_bound() -> None:
    # The main thread waits inside librdkafka (init_transactions against a port where no broker
    # listens), so Python's own handler may never run; the wakeup fd and the timer still do.
    script = textwrap.dedent(
        f"""
        import logging, sys, threading
        from confluent_kafka import Producer
        from tracevault.services.runtime import stop_on_signals
        logging.basicConfig(level=logging.INFO)
        stop_on_signals(lambda: None, "blocked", hard_limit_s=2.0)
        p = Producer({{"bootstrap.servers": "127.0.0.1:{free_port()}",
                       "transactional.id": "blocked", "log_level": 0}})
        print("blocking", flush=True)
        p.init_transactions(120)
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "blocking"
    _wait_until_blocked_in_the_kernel(proc.pid)  # inside init_transactions, waiting on librdkafka
    t0 = time.monotonic()
    proc.terminate()
    _, err = proc.communicate(timeout=15)
    took = time.monotonic() - t0
    assert took < 6, f"exited {took:.1f}s after SIGTERM"
    assert proc.returncode == 3, err
    assert "did not stop within 2s of the signal" in err


def _signalled(script: str) -> tuple[int, str, str, float]:
    """Run ``script`` until it prints "ready", SIGTERM it; its exit code, output and seconds."""
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    t0 = time.monotonic()
    proc.terminate()
    try:
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, out, err, time.monotonic() - t0


def test_a_stop_that_blocks_is_still_bounded_by_the_hard_exit() -> None:
    # stop() never returns (a lock the service never lets go): the timer is armed first, so
    # the process still exits 3 at the bound. Armed after stop(), it was never armed (a
    # sequencer's SIGTERM went unanswered for 30 s in CI, stop 40).
    code, _, err, took = _signalled(
        """
        import logging, threading
        from tracevault.services.runtime import stop_on_signals
        logging.basicConfig(level=logging.INFO)
        stop_on_signals(threading.Event().wait, "stuck", hard_limit_s=2.0)
        print("ready", flush=True)
        threading.Event().wait(60)
        """
    )
    assert (code, took < 15) == (3, True), (took, err)
    assert "did not stop within 2s of the signal" in err


def test_stop_runs_off_the_main_thread_so_a_lock_the_main_thread_holds_cannot_deadlock_it() -> None:
    # The interrupted main thread holds a lock stop() needs (as an Event.wait holds its
    # Event's lock between checks). Called in the main thread, stop() would wait for itself.
    code, out, err, _ = _signalled(
        """
        import threading, time
        from tracevault.services.runtime import stop_on_signals
        lock, stopped, ran_in = threading.Lock(), threading.Event(), []
        def stop():
            ran_in.append(threading.current_thread() is threading.main_thread())
            with lock:
                stopped.set()
        stop_on_signals(stop, "holding", hard_limit_s=20.0)
        with lock:
            print("ready", flush=True)
            deadline = time.monotonic() + 20
            while not ran_in and time.monotonic() < deadline:
                threading.Event().wait(0.01)  # until stop() ran, with the lock held
        print("stopped" if stopped.wait(10) else "hung", ran_in, flush=True)
        """
    )
    assert (code, out.split()) == (0, ["stopped", "[False]"]), err


def test_the_supervisor_starts_a_new_session_until_one_returns() -> None:
    stop = threading.Event()
    health = Health("witness", stall_s=60)
    sessions = Sessions("t", stop, health)
    opened: list[int] = []
    closed: list[int] = []
    forgot: list[int] = []

    def session(n: int) -> None:
        if n < 2:
            raise Restart(f"session {n} ended")  # an outage: never counts towards giving up

    def start() -> int:
        opened.append(len(opened))
        return opened[-1]

    sessions.run(start, session, closed.append, on_restart=lambda: forgot.append(1))
    assert opened == closed == [0, 1, 2] and len(forgot) == 2
    assert health.restarts == 2 and sessions.failures == 0


def test_the_supervisor_gives_up_after_broken_sessions_without_progress() -> None:
    health = Health("archiver", stall_s=60)
    sessions = Sessions("archiver", threading.Event(), health, give_up_after=2)
    waits = [sessions.ended(Broken("client failed"), broken=True) for _ in range(2)]
    assert waits[1] > waits[0] > 0
    with pytest.raises(ServiceUnavailableError, match="could not resume after 3 attempts"):
        sessions.ended(Broken("client failed"), broken=True)
    sessions.failures = 0
    for _ in range(20):  # an outage, however long, never gives up; waits stay at 2 s at most
        assert sessions.ended(Restart("broker away"), broken=False) <= 2.0
    sessions.progressed()  # a commit went through: the next broken session starts afresh
    sessions.ended(Broken("client failed"), broken=True)
    assert sessions.failures == 1 and sessions.attempts == 1


def test_a_fencing_right_after_an_outage_is_a_new_session_else_a_rival() -> None:
    watch = KafkaWatch("t")
    fenced = KafkaError(KafkaError.FENCED_INSTANCE_ID, "fenced", fatal=True)
    with pytest.raises(FencedError, match="another witness"):
        raise_for(fenced, watch, 60.0, "another witness")
    watch.trouble()  # the brokers were away just now
    with pytest.raises(Restart, match="fenced after a broker outage"):
        raise_for(fenced, watch, 60.0, "another witness")
    raise_for(KafkaError(KafkaError.COORDINATOR_LOAD_IN_PROGRESS), watch, 60.0, "x")  # returns
    with pytest.raises(Broken):
        raise_for(KafkaError(KafkaError._FATAL, "boom", fatal=True), watch, 60.0, "x")
