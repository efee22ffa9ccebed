"""The sequencer, the archiver and the witness across a broker stop and a broker SIGKILL.

One private broker (never the shared one) and the three real services as subprocesses. A
producer streams complete runs throughout. The broker is stopped for ~15 s (past every session
timeout), then SIGKILLed and started again on its data (``--keep-data``: a crash, its
transaction and group coordinators reload their logs). Nobody restarts a service: after each
outage the sequencer seals new events within seconds, the archiver archives them and the
witness cosigns new checkpoints; ``/healthz`` says 503 while they are cut off and 200 after.
Every event is sealed exactly once in continuous chains.

A second test restarts the witness alone (SIGTERM, then SIGKILL): the new process cosigns
within seconds instead of waiting for its dead predecessor's group session (docs/liveness.md).
Last, a witness under another key joins after a crash: its ``/healthz`` says 503 while the dead
member still holds the partitions, and it cosigns once that member's 10 s session ends.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from tests.faults.test_outage import LONG_OUTAGE_S, Service, kill_all, outage, wait_for
from tests.kafka_harness import LocalBroker
from tests.services.sequencer.support import assert_chain, raw_event, sealed_by_run
from tracevault.config import Settings
from tracevault.kafka import ensure_topics
from tracevault.transparency import CosignatureSigner

pytestmark = pytest.mark.slow

STALL_S = 4  # TRACEVAULT_HEALTH_STALL_S: 503 after this long cut off or without progress
RESUME_S = 30.0  # "within seconds" of the broker answering again (main: 110 s and more)
STEADY_S = 10.0  # then new work at least this often (a history read blocked main 30 s)
WITNESS_RESTART_S = 20.0  # a restarted witness cosigns within this (main: 45 s to 5 min)
GROUP_TAKEOVER_S = 40.0  # another member gets a dead one's partitions (10 s session + join)
EVENTS_PER_RUN = 10


class Stream:
    """Complete runs, ~40 events/s, until stopped; what was sent is kept to check chains.

    Every second it also resends an event of a run finished a while ago, as an agent's spool
    does after the broker returns: the sequencer then reads that run's sealed history back
    to tell the duplicate from a conflict (what stalled it after a broker SIGKILL)."""

    DELIVER_S = 300.0  # what may still be delivered after stop (a node or broker away)

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.expected: dict[str, list[bytes]] = {}
        self.stopped = threading.Event()
        self.done = threading.Event()
        self._closed = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        p = Producer(self.settings.kafka_config(**{
            "partitioner": "murmur2_random", "enable.idempotence": True, "linger.ms": 5,
            "message.timeout.ms": 300_000, "log_level": 0,
        }))  # fmt: skip
        pace = threading.Event()
        i = 0
        while not self.stopped.is_set():
            run = f"all-{i:05d}-{uuid.uuid4().hex[:6]}"
            i += 1
            values = [raw_event(run, s, last=EVENTS_PER_RUN - 1) for s in range(EVENTS_PER_RUN)]
            self.expected[run] = values
            for v in values:
                p.produce(self.settings.topics.raw, v, run)
            if i % 4 == 0 and len(self.expected) > 8:
                old = list(self.expected)[-8]
                p.produce(self.settings.topics.raw, self.expected[old][i % EVENTS_PER_RUN], old)
            p.poll(0)
            pace.wait(0.25)
        # delivered within DELIVER_S, in slices: close() (a failed test's teardown) ends the
        # wait at once, instead of a flush left waiting on dead nodes as pytest exits
        deadline = time.monotonic() + self.DELIVER_S
        while p.flush(1) > 0:
            if self._closed.is_set() or time.monotonic() > deadline:
                p.purge()
                return
        self.done.set()

    def close(self) -> None:
        """Stop streaming and give up on what is not delivered yet; the thread ends within
        about a second (its flush slice)."""
        self.stopped.set()
        self._closed.set()
        if self.thread.is_alive():
            self.thread.join(10)

    def total(self) -> int:
        return sum(len(v) for v in self.expected.values())


def signed(w: Service) -> float:
    """Cosignatures, from a witness that must answer (it serves /metrics itself, also while
    the broker is away): a failed scrape is a failure, never a number to compare."""
    value = cosigned(w)
    assert value is not None, f"{w.name}: /metrics did not answer\n{w.tail()}"
    return value


def has_cosigned(w: Service) -> Callable[[], bool]:
    """A condition: the witness answers and cosigned something (once it has come up)."""
    return lambda: (cosigned(w) or 0.0) > 0


def grew(now: Callable[[], Any], before: Any) -> Callable[[], bool]:
    """A condition: ``now()`` is above ``before`` (a number, or each of a tuple's)."""
    if isinstance(before, tuple):
        return lambda: all(x > y for x, y in zip(now(), before, strict=True))
    return lambda: bool(now() > before)


def cosigned(w: Service) -> float | None:
    """The witness's cosignatures over every origin (None while /metrics does not answer)."""
    code, body = w._get("/metrics")
    if code != 200:
        return None
    return sum(
        float(line.split()[-1])
        for line in body.splitlines()
        if line.startswith("tracevault_witness_cosigned_total{")
    )


@contextmanager
def stack(
    broker: LocalBroker, tmp: Path
) -> Iterator[tuple[Callable[[str], Service], Settings, Stream]]:
    """Fresh topics on ``broker``, a factory of service subprocesses (killed at the end) and
    the stream (not started; stopped at the end)."""
    settings = Settings(
        bootstrap_servers=broker.bootstrap,
        topic_prefix=f"all-{uuid.uuid4().hex[:8]}",
        partitions=3,
        archive_url=f"file://{tmp / 'archive'}",
    )
    ensure_topics(settings)
    feed = Stream(settings)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRACEVAULT_")}
    env["TRACEVAULT_LOG_KEY"] = os.environ["TRACEVAULT_LOG_KEY"]
    env["TRACEVAULT_LOG_VKEYS"] = os.environ["TRACEVAULT_LOG_VKEYS"]
    env["TRACEVAULT_HEALTH_STALL_S"] = str(STALL_S)
    env["TRACEVAULT_WITNESS_KEY"] = CosignatureSigner.generate("w1.test").skey
    common = ["--bootstrap-servers", settings.bootstrap_servers, "--prefix", settings.topic_prefix]
    argv = {
        "sequencer": ["sequencer", "--instance-id", "all-seq", "--batch-size", "200"],
        "archiver": [
            *("archiver", "--archive", f"file://{tmp / 'archive'}", "--instance-id", "all-arc"),
            *("--segment-max-age", "1", "--segment-max-events", "500"),
        ],
        "witness": ["witness", "run", "--store", f"file://{tmp / 'witness'}"],
        # another witness key (another group member), its own store, in the same group
        "witness-2": ["witness", "run", "--store", f"file://{tmp / 'witness-2'}"],
    }
    started: list[Service] = []

    def start(name: str) -> Service:
        own = dict(env)
        if name == "witness-2":
            own["TRACEVAULT_WITNESS_KEY"] = CosignatureSigner.generate("w2.test").skey
            own["TRACEVAULT_HEALTH_STALL_S"] = "2"
        svc = Service(name, [*common, *argv[name]], own, tmp / f"{name}-{len(started)}.log")
        started.append(svc)
        return svc

    try:
        yield start, settings, feed
    finally:
        feed.close()
        kill_all(started)


def test_three_services_ride_out_a_broker_stop_and_a_sigkill(
    module_broker: LocalBroker, tmp_path: Path
) -> None:
    broker = module_broker  # this module's two tests share it (tests/conftest.py)
    broker.ensure_running()
    with stack(broker, tmp_path) as (start, settings, feed):
        seq, arc, wit = start("sequencer"), start("archiver"), start("witness")
        svcs = (seq, arc, wit)
        pids = [s.proc.pid for s in svcs]

        def sealed() -> float:
            return seq.scraped("tracevault_sequencer_sealed_total")

        def archived() -> float:
            return arc.scraped("tracevault_archiver_events_archived_total")

        def counts() -> tuple[float, ...]:
            return sealed(), archived(), signed(wit)

        def started() -> bool:  # /metrics answers only once each process has come up
            s = seq.metric("tracevault_sequencer_sealed_total")
            a = arc.metric("tracevault_archiver_events_archived_total")
            return s is not None and a is not None and s > 0 and a > 0 and has_cosigned(wit)()

        def diag() -> str:
            return "".join(f"\n--- {s.name} (exit {s.proc.poll()})\n{s.tail()}" for s in svcs)

        feed.thread.start()
        wait_for(started, 90, "the first sealed, archived and cosigned", diag)
        wait_for(lambda: all(s.health()[0] == 200 for s in svcs), 30, "/healthz 200", diag)

        resumed: dict[str, float] = {}
        for how in ("stop", "kill"):
            down = time.monotonic()
            broker.stop() if how == "stop" else broker.kill()
            wait_for(
                lambda: all(s.health()[0] == 503 for s in svcs),
                18,
                f"/healthz 503 from all three after the broker's {how}",
                diag,
            )
            for s in svcs:
                doc = s.health()[1]
                assert doc["status"] == "stuck" and doc["reason"], (s.name, doc)
            outage(max(0.0, LONG_OUTAGE_S - (time.monotonic() - down)))
            broker.start(keep_data=True)
            back = time.monotonic()
            s0, a0, c0 = counts()
            wait_for(grew(sealed, s0), RESUME_S, f"sealing after the {how}", diag)
            resumed[how] = time.monotonic() - back
            wait_for(grew(archived, a0), RESUME_S, f"archiving after the {how}", diag)
            wait_for(grew(lambda: signed(wit), c0), RESUME_S, f"cosigning after the {how}", diag)
            # and it keeps going: new work in each of three windows, not one batch and a stall
            for window in range(3):
                before = counts()
                wait_for(
                    grew(counts, before),
                    STEADY_S,
                    f"steady progress after the {how} (window {window})",
                    diag,
                )
            wait_for(
                lambda: all(s.health()[0] == 200 for s in svcs),
                30,
                f"/healthz 200 again after the {how}",
                diag,
            )
        assert [s.proc.pid for s in svcs] == pids and all(s.alive() for s in svcs), diag()

        feed.stopped.set()
        wait_for(feed.done.is_set, 120, "the stream to be delivered")
        total = feed.total()
        wait_for(lambda: sealed() >= total, 90, f"all {total} events sealed", diag)
        runs = sealed_by_run(settings)
        assert set(runs) == set(feed.expected)
        for run_id, recs in runs.items():
            assert_chain(run_id, [ev for _, ev in recs], feed.expected[run_id])
        assert all(s.alive() for s in svcs), diag()
    print(f"sealing resumed after: {resumed}")


def test_a_restarted_witness_cosigns_within_seconds(
    module_broker: LocalBroker, tmp_path: Path
) -> None:
    module_broker.ensure_running()
    with stack(module_broker, tmp_path) as (start, _settings, feed):
        seq, wit = start("sequencer"), start("witness")
        feed.thread.start()

        def diag() -> str:
            return "".join(f"\n--- {s.name} (exit {s.proc.poll()})\n{s.tail()}" for s in (seq, wit))

        wait_for(has_cosigned(wit), 90, "the first cosignature", diag)
        took: dict[str, float] = {}
        for sig in (signal.SIGTERM, signal.SIGKILL):
            wit.proc.send_signal(sig)
            wit.proc.wait(15)
            t0 = time.monotonic()
            wit = start("witness")
            wait_for(
                has_cosigned(wit),
                WITNESS_RESTART_S,
                f"a witness restarted after {sig.name} to cosign",
                diag,
            )
            took[sig.name] = time.monotonic() - t0
            code, doc = wit.health()
            assert code == 200, doc

        # A crash, then another member joins the group: the dead one holds the partitions
        # until its session times out (10 s). Meanwhile the newcomer's /healthz says so (it
        # said 200 "following" for a poll that merely returned), and then it cosigns.
        wit.proc.kill()
        wit.proc.wait(15)
        t0 = time.monotonic()
        wit = start("witness-2")
        wait_for(lambda: wit.health()[0] == 503, 15, "503 while it waits for its partitions", diag)
        doc = wit.health()[1]
        assert "no progress" in doc.get("reason", ""), doc
        wait_for(
            has_cosigned(wit),
            GROUP_TAKEOVER_S,
            "a witness under another key to take over the dead member's partitions",
            diag,
        )
        took["another member"] = time.monotonic() - t0
        wait_for(lambda: wit.health()[0] == 200, 15, "200 once it cosigns", diag)
    print(f"a restarted witness cosigned after {took}")
