"""Broker outages under a stream: the sequencer and the archiver ride them out on their own.

One private broker (never the shared one) and the real services as subprocesses (``python -m
tracevault sequencer`` / ``archiver``), with their default session timeouts (10 s). A producer
streams complete runs throughout. The broker first hangs for ~5 s (SIGSTOP/SIGCONT: shorter than
the session timeout), then is stopped for ~5 s and started again (its JVM takes a few seconds
more to come back), then is stopped for ~15 s (past both session timeouts: the case where
librdkafka's static member came back "fenced" and the sequencer hung, docs/liveness.md) and
started again with its data. Nobody restarts a service: afterwards every event is sealed exactly
once in continuous chains and archived exactly once, and both processes are the ones started at
the beginning. ``/healthz`` says 503 while they are cut off and 200 after they recover. Last,
with the broker stopped again, SIGTERM ends both services within 10 s.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from tests.kafka_harness import LocalBroker, free_port
from tests.services.sequencer.support import (
    assert_chain,
    interleaved_runs,
    sealed_by_run,
)
from tracevault.archive import archived_run, open_store
from tracevault.config import Settings
from tracevault.kafka import ensure_topics
from tracevault.replayer.load.archive import load_from_archive

pytestmark = pytest.mark.slow

RUNS, EVENTS_PER_RUN = 40, 50
TOTAL = RUNS * EVENTS_PER_RUN
STALL_S = 4  # TRACEVAULT_HEALTH_STALL_S: 503 after this long cut off or without progress
STOP_BOUND_S = 10.0
#: The long outage: past the services' 10 s session timeouts by half again, before the broker's
#: own restart (a few seconds more) is counted.
LONG_OUTAGE_S = 15.0


def wait_for(
    cond: Callable[[], bool], timeout: float, what: str, diag: Callable[[], str] = str
) -> None:
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while not cond():
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {what}{diag()}"
        pause.wait(0.25)  # a deadline-bounded poll


def outage(seconds: float) -> None:
    """The broker stays down this long: the length of the outage is what is under test."""
    threading.Event().wait(seconds)


class Service:
    """One service subprocess with its metrics/health port."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], log: Path) -> None:
        self.name = name
        self.port = free_port()
        self.log = log
        with log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tracevault", *argv, "--metrics-port", str(self.port)],
                stdout=out,
                stderr=out,
                env=env,
            )

    def _get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=3) as r:
                return int(r.status), r.read().decode()
        except urllib.error.HTTPError as exc:
            return int(exc.code), exc.read().decode()
        except OSError:
            return 0, ""

    def health(self) -> tuple[int, dict[str, Any]]:
        code, body = self._get("/healthz")
        return code, (json.loads(body) if body else {})

    def metric(self, name: str) -> float | None:
        """The sample named exactly ``name``, or None when /metrics did not answer with it."""
        code, body = self._get("/metrics")
        if code != 200:
            return None
        for line in body.splitlines():
            sample, _, value = line.rpartition(" ")
            if sample.split("{", 1)[0] == name:  # the name exactly, whatever its labels
                return float(value)
        return None

    def scraped(self, name: str) -> float:
        """A sample that must be there: /metrics is served by the process itself, so it answers
        while the broker is away. A failed scrape is a failure, never a number to compare."""
        value = self.metric(name)
        assert value is not None, f"{self.name}: /metrics has no {name}\n{self.tail()}"
        return value

    def alive(self) -> bool:
        return self.proc.poll() is None

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]

    def wait_met_broker_away(self) -> None:
        """Started with its broker down, it met the broker away and goes on trying: a session
        ended and was replaced (``session_restarts`` on /healthz), and the process lives."""
        wait_for(
            lambda: self.health()[1].get("session_restarts", 0) >= 1,
            120,
            f"the {self.name} to meet the broker away",
            self.tail,
        )
        assert self.alive(), self.tail()


def kill_all(started: list[Service]) -> None:
    """SIGKILL every service still running and reap them all (a test's teardown)."""
    for svc in started:
        if svc.alive():
            svc.proc.kill()
        svc.proc.wait(30)


@contextmanager
def services(settings: Settings, archive: Path, logs: Path) -> Iterator[tuple[Service, Service]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRACEVAULT_")}
    env["TRACEVAULT_LOG_KEY"] = os.environ["TRACEVAULT_LOG_KEY"]  # the session's log key
    env["TRACEVAULT_LOG_VKEYS"] = os.environ["TRACEVAULT_LOG_VKEYS"]  # the archiver trusts it
    env["TRACEVAULT_HEALTH_STALL_S"] = str(STALL_S)
    common = ["--bootstrap-servers", settings.bootstrap_servers, "--prefix", settings.topic_prefix]
    seq = Service(
        "sequencer",
        [*common, "sequencer", "--instance-id", "live-seq", "--batch-size", "200"],
        env,
        logs / "sequencer.log",
    )
    arc = Service(
        "archiver",
        [
            *common,
            *("archiver", "--archive", f"file://{archive}", "--instance-id", "live-arc"),
            *("--segment-max-age", "1", "--segment-max-events", "500"),
        ],
        env,
        logs / "archiver.log",
    )
    try:
        yield seq, arc
    finally:
        for svc in (seq, arc):
            if svc.alive():
                svc.proc.kill()
            svc.proc.wait(30)


def stream(settings: Settings, items: list[tuple[str, bytes]], done: threading.Event) -> None:
    """~40 events/s for the whole test; events produced while the broker is down wait in the
    producer (long message timeout) and arrive after it is back, in order per run."""
    p = Producer(settings.kafka_config(**{
        "partitioner": "murmur2_random", "enable.idempotence": True, "linger.ms": 5,
        "message.timeout.ms": 300_000, "log_level": 0,
    }))  # fmt: skip
    pace = threading.Event()
    for i in range(0, len(items), 10):
        for run, value in items[i : i + 10]:
            p.produce(settings.topics.raw, value, run)
        p.poll(0)
        pace.wait(0.25)
    assert p.flush(300) == 0
    done.set()


def test_services_ride_out_short_and_long_broker_outages(
    local_broker_factory: Callable[[], LocalBroker], tmp_path: Path
) -> None:
    broker = local_broker_factory()
    settings = Settings(
        bootstrap_servers=broker.bootstrap,
        topic_prefix=f"outage-{uuid.uuid4().hex[:8]}",
        partitions=3,
        archive_url=f"file://{tmp_path / 'archive'}",
    )
    ensure_topics(settings)
    items = interleaved_runs(RUNS, EVENTS_PER_RUN, seed=3, stem="outage")
    expected: dict[str, list[bytes]] = {}
    for run, value in items:
        expected.setdefault(run, []).append(value)
    produced = threading.Event()
    producer = threading.Thread(target=stream, args=(settings, items, produced), daemon=True)

    with services(settings, tmp_path / "archive", tmp_path) as (seq, arc):
        pids = (seq.proc.pid, arc.proc.pid)

        def sealed() -> float:
            return seq.scraped("tracevault_sequencer_sealed_total")

        def archived() -> float:
            return arc.scraped("tracevault_archiver_events_archived_total")

        def started() -> bool:  # /metrics answers only once the process has come up
            s = seq.metric("tracevault_sequencer_sealed_total")
            a = arc.metric("tracevault_archiver_events_archived_total")
            return s is not None and a is not None and s > 0 and a > 0

        def diag() -> str:
            return (
                f"\n--- sequencer (exit {seq.proc.poll()})\n{seq.tail()}"
                f"\n--- archiver (exit {arc.proc.poll()})\n{arc.tail()}"
            )

        producer.start()
        wait_for(started, 60, "the first sealed and archived", diag)

        # ~5 s hung: shorter than the session timeout.
        pid = broker.pid()
        down = time.monotonic()
        os.kill(pid, signal.SIGSTOP)
        try:
            outage(5)
        finally:
            os.kill(pid, signal.SIGCONT)
        back = time.monotonic()
        short_outage = back - down
        s0, a0 = sealed(), archived()
        wait_for(lambda: sealed() > s0 and archived() > a0, 30, "work after the short outage", diag)
        short_resume = time.monotonic() - back

        # ~5 s stopped and started again: the broker process really goes away, but for less
        # than the session timeout (its JVM then takes a few seconds more to come back).
        down = time.monotonic()
        broker.stop()
        outage(5)
        broker.start(keep_data=True)
        back = time.monotonic()
        restart_outage = back - down
        s0, a0 = sealed(), archived()
        wait_for(lambda: sealed() > s0 and archived() > a0, 60, "work after the restart", diag)
        restart_resume = time.monotonic() - back

        # ~15 s stopped: past the 10 s session timeout of both (static members).
        down = time.monotonic()
        broker.stop()
        wait_for(
            lambda: seq.health()[0] == 503 and arc.health()[0] == 503,
            18,
            "/healthz to say 503 while the broker is away",
            diag,
        )
        for svc in (seq, arc):
            _, doc = svc.health()
            assert doc["status"] == "stuck" and doc["reason"], doc
        outage(max(0.0, LONG_OUTAGE_S - (time.monotonic() - down)))
        broker.start(keep_data=True)
        back = time.monotonic()
        long_outage = back - down
        s1, a1 = sealed(), archived()
        wait_for(lambda: sealed() > s1, 60, "sealing after the long outage", diag)
        long_resume = time.monotonic() - back
        wait_for(lambda: archived() > a1, 60, "archiving after the long outage", diag)
        wait_for(produced.is_set, 120, "the stream to be delivered")
        wait_for(lambda: sealed() >= TOTAL and archived() >= TOTAL, 90, "everything sealed", diag)
        wait_for(
            lambda: seq.health()[0] == 200 and arc.health()[0] == 200,
            30,
            "/healthz 200 again",
            diag,
        )
        assert (seq.proc.pid, arc.proc.pid) == pids and seq.alive() and arc.alive(), diag()

        # Exactly once: the sealed topic (independent read_committed read) and the archive.
        runs = sealed_by_run(settings)
        assert set(runs) == set(expected)
        for run_id, recs in runs.items():
            assert_chain(run_id, [ev for _, ev in recs], expected[run_id])
        store = open_store(settings.archive_url, settings)
        wait_for(
            lambda: all((a := archived_run(store, r)) is not None and a[0] for r in expected),
            30,
            "every run archived to its end",
        )
        for run_id, raws in expected.items():
            run = load_from_archive(store, run_id)  # the tiled log (docs/log.md, "Archive")
            seqs = [r["seq"] for r in run.records.rows]
            assert seqs == list(range(len(raws))), f"{run_id} archived once, in order"
            assert [bytes(r["raw"]) for r in run.records.rows] == raws

        # SIGTERM while the broker is away: both gone within the bound, cleanly.
        broker.stop()
        wait_for(lambda: seq.health()[0] == 503, 15, "the sequencer to notice the outage", diag)
        for svc in (seq, arc):
            svc.proc.send_signal(signal.SIGTERM)
        t0 = time.monotonic()
        codes = [svc.proc.wait(STOP_BOUND_S + 5) for svc in (seq, arc)]
        took = time.monotonic() - t0
        assert took <= STOP_BOUND_S, f"stopped in {took:.1f}s{diag()}"
        assert codes == [0, 0], diag()
    print(
        f"sealing resumed {short_resume:.1f}s after a {short_outage:.0f}s hang, "
        f"{restart_resume:.1f}s after a {restart_outage:.0f}s stop, "
        f"{long_resume:.1f}s after a {long_outage:.0f}s stop; SIGTERM took {took:.1f}s"
    )
