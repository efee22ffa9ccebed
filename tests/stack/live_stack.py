"""A live stack for the operator's kit tests: the sequencer, the archiver and a witness as
subprocesses of the real CLI, each serving ``/metrics`` and ``/healthz``, on a unique prefix
of the real broker, with a few complete runs recorded, archived and cosigned.

``tests/stack/test_metrics.py`` checks the names and types the services expose, and
``tests/stack/test_deploy.py`` that every metric the dashboard and the alert rules in
``deploy/`` query is one of them.
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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import unique_name
from tests.kafka_harness import free_port
from tests.services.sequencer.support import raw_event
from tracevault.config import Settings
from tracevault.kafka import ensure_topics
from tracevault.transparency import CosignatureSigner, write_private_key

RUNS, EVENTS = 6, 8


def wait_for(cond: Callable[[], bool], timeout: float, what: str, diag: Callable[[], str]) -> None:
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while not cond():
        assert time.monotonic() < deadline, (
            f"timed out after {timeout}s waiting for {what}\n{diag()}"
        )
        pause.wait(0.2)  # a deadline-bounded poll


class Service:
    """One service subprocess with its ``/metrics`` and ``/healthz`` port."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], log: Path) -> None:
        self.name, self.argv, self.env, self.log = name, argv, env, log
        self.port = free_port()
        with log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tracevault", *argv, "--metrics-port", str(self.port)],
                stdout=out,
                stderr=out,
                env=env,
            )

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=3) as r:
                return int(r.status), r.read().decode()
        except urllib.error.HTTPError as exc:
            return int(exc.code), exc.read().decode()
        except OSError:
            return 0, ""

    def families(self) -> dict[str, Metric]:
        """``/metrics`` parsed by prometheus_client's own text parser; {} when it does not
        answer. Without the ``*_created`` gauges the text format gives each counter and
        histogram (the client's creation timestamps, not series of ours)."""
        code, body = self.get("/metrics")
        if code != 200:
            return {}
        fams = text_string_to_metric_families(body)
        return {m.name: m for m in fams if not m.name.endswith("_created")}

    def sample(self, name: str, **labels: str) -> float | None:
        """The value of the sample named ``name`` (with these labels), None if absent."""
        code, body = self.get("/metrics")
        if code != 200:
            return None
        for fam in text_string_to_metric_families(body):
            for s in fam.samples:
                if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                    return float(s.value)
        return None

    def health(self) -> dict[str, Any]:
        code, body = self.get("/healthz")
        return json.loads(body) if code and body else {}

    def tail(self) -> str:
        return f"{self.name}: " + self.log.read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(30)


@dataclass
class Stack:
    settings: Settings
    env: dict[str, str]
    tmp: Path
    services: dict[str, Service]

    def start(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> Service:
        common = ["--bootstrap-servers", self.settings.bootstrap_servers]
        svc = Service(
            name,
            [*common, "--prefix", self.settings.topic_prefix, *argv],
            env or self.env,
            self.tmp / f"{name}-{len(self.services)}.log",
        )
        self.services[name] = svc
        return svc

    def record(self, runs: int = RUNS, events: int = EVENTS) -> int:
        """Complete runs into ``raw``, each event stamped now (its ``at``); how many events."""
        p = Producer(self.settings.kafka_config(**{
            "partitioner": "murmur2_random", "enable.idempotence": True, "log_level": 0,
        }))  # fmt: skip
        n = 0
        for r in range(runs):
            run_id = unique_name(f"ops{r}")
            for seq in range(events):
                at = time.time_ns() // 1000
                p.produce(self.settings.topics.raw, raw_event(run_id, seq, last=events - 1, at=at),
                          run_id.encode())  # fmt: skip
                n += 1
        assert p.flush(60) == 0
        return n


@contextmanager
def live_stack(bootstrap: str, tmp: Path, log_key: str, log_vkey: str) -> Iterator[Stack]:
    """The three services on a fresh prefix, runs recorded, archived and cosigned; the
    sequencer signs with ``log_key``, the archiver and the witness trust ``log_vkey``."""
    settings = Settings(
        bootstrap_servers=bootstrap,
        topic_prefix=unique_name("ops"),
        partitions=2,
        archive_url=f"file://{tmp / 'archive'}",
    )
    ensure_topics(settings)
    witness_key = tmp / "witness.key"
    write_private_key(witness_key, CosignatureSigner.generate("w1.example"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRACEVAULT_")}
    env["TRACEVAULT_LOG_KEY"] = log_key
    env["TRACEVAULT_LOG_VKEYS"] = log_vkey
    stack = Stack(settings, env, tmp, {})
    try:
        stack.start("sequencer", ["sequencer", "--instance-id", "ops-seq"])
        arc = stack.start(
            "archiver",
            ["archiver", "--archive", settings.archive_url, "--segment-max-age", "1"],
        )
        wit = stack.start(
            "witness",
            ["witness", "run", "--key-file", str(witness_key), "--store",
             f"file://{tmp / 'witness-store'}"],
        )  # fmt: skip
        total = stack.record()

        def diag() -> str:
            return "\n".join(s.tail() for s in stack.services.values())

        wait_for(
            lambda: arc.sample("tracevault_archiver_events_archived_total") == total,
            90,
            f"{total} events archived",
            diag,
        )
        wait_for(
            lambda: (wit.sample("tracevault_witness_cosigned_total") or 0) > 0,
            120,
            "a checkpoint cosigned",
            diag,
        )
        yield stack
    finally:
        for svc in stack.services.values():
            svc.stop()
