"""Sequencer resident memory and restart time as finished runs pile up (docs/fleet.md).

Phases, on fresh topics, each adding to the last:

* ``empty``  — nothing recorded: the restart baseline;
* ``open``   — 10,000 open runs (one RUN_STARTED each);
* ``100k``   — plus 100,000 finished two-event runs;
* ``1M``     — plus 900,000 more (1,000,000 finished runs within the horizon).

After each phase is sealed, the sequencer (its own process, ``python -m tracevault
sequencer``) is stopped with SIGTERM and started again; the restart time is from the new
process's start to its "restored ... finished runs" log line, and its resident memory
(``VmRSS``) is read once the restored state is in place. Bytes per finished run =
(RSS at 1M − RSS at ``open``) / 1,000,000, after the restart (the steady state a long-running
instance returns to), and also before it (the instance that sealed them).

Targets (issue 13): ≤ 64 bytes of resident memory per finished run inside the horizon; the
restart with 1M finished plus 10k open runs ≤ 3 × the empty restart.

Usage::

    .venv/bin/python bench/fleet_state.py [--scale 1.0] [--partitions 6]

``--scale 0.01`` runs the same phases with 1% of the runs (a smoke run). The last output
line is one JSON object.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from typing import Any

from _topics import bench_prefix, delete_topics
from confluent_kafka import Producer

from tracevault.config import Settings
from tracevault.kafka import ensure_topics
from tracevault.schemas import AgentInfo, EventKind, TraceEvent, canonical_json, encode_event
from tracevault.transparency import Ed25519Signer

AGENT = AgentInfo("bench-agent", "1.0.0", "bench-host", "bench", "0.1.0")
_RESTORED = re.compile(r"restored (\d+) open run heads and (\d+) finished runs")


def emit(obj: dict[str, Any]) -> None:
    print(json.dumps(obj, sort_keys=True), flush=True)


def event(run_id: str, seq: int, kind: EventKind, at: int) -> bytes:
    return encode_event(
        TraceEvent(
            run_id=run_id,
            seq=seq,
            kind=kind,
            at=at,
            agent=AGENT,
            request=canonical_json({"task": "bench"}),
            response=canonical_json(None),
        )
    )


def produce(settings: Settings, stem: str, n_runs: int, finished: bool) -> None:
    p = Producer(
        settings.kafka_config(
            **{
                "partitioner": "murmur2_random",
                "enable.idempotence": True,
                "linger.ms": 20,
                "batch.size": 1_000_000,
                "log_level": 0,
            }
        )
    )
    topic = settings.topics.raw
    for i in range(n_runs):
        run = f"{stem}-{i:07d}"
        at = time.time_ns() // 1000
        key = run.encode()
        p.produce(topic, event(run, 0, EventKind.RUN_STARTED, at), key)
        if finished:
            p.produce(topic, event(run, 1, EventKind.RUN_FINISHED, at + 1), key)
        if i % 5000 == 0:
            p.poll(0)
            while len(p) > 200_000:
                p.poll(0.05)
    assert p.flush(120) == 0, "raw events not all acknowledged"


class SequencerProcess:
    def __init__(self, settings: Settings, port: int, env: dict[str, str]) -> None:
        self.started = time.monotonic()
        self.restored_at: float | None = None
        self.restored = (0, 0)
        self.port = port
        self.proc = subprocess.Popen(
            [
                sys.executable, "-m", "tracevault", "-v", "--bootstrap-servers",
                settings.bootstrap_servers, "--prefix", settings.topic_prefix, "sequencer",
                "--instance-id", "fleet-bench", "--batch-size", "5000",
                "--batch-wait-ms", "20", "--metrics-port", str(port),
            ],
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        self._lines = threading.Thread(target=self._read, daemon=True)
        self._lines.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            m = _RESTORED.search(line)
            if m and self.restored_at is None:
                self.restored_at = time.monotonic()
                self.restored = (int(m.group(1)), int(m.group(2)))

    def metric(self, name: str) -> float:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as r:
            for line in r.read().decode().splitlines():
                if line.startswith(name + " ") or line.startswith(name + "{"):
                    if name + "{" in line and "instance_id" not in line:
                        continue
                    return float(line.rsplit(" ", 1)[1])
        return -1.0

    def runs(self, state: str) -> float:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as r:
            for line in r.read().decode().splitlines():
                if line.startswith("tracevault_sequencer_runs{") and f'state="{state}"' in line:
                    return float(line.rsplit(" ", 1)[1])
        return -1.0

    def rss(self) -> int:
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        raise RuntimeError("no VmRSS")

    def wait_for(self, open_runs: int, finished: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                if self.runs("open") == open_runs and self.runs("finished") == finished:
                    return
            except OSError:
                pass
            if self.proc.poll() is not None:
                raise RuntimeError(f"sequencer exited with {self.proc.returncode}")
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"state not reached in {timeout:.0f}s: open {self.runs('open')}, "
                    f"finished {self.runs('finished')} (want {open_runs}, {finished})"
                )
            time.sleep(0.2)

    def wait_restored(self, timeout: float) -> float:
        deadline = time.monotonic() + timeout
        while self.restored_at is None:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the sequencer did not log its restore")
            time.sleep(0.01)
        return self.restored_at - self.started

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(60)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--open", type=int, default=10_000)
    ap.add_argument("--port", type=int, default=19_464)
    args = ap.parse_args()
    boot = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
    prefix = bench_prefix("fleet")
    settings = Settings(bootstrap_servers=boot, topic_prefix=prefix, partitions=args.partitions)
    ensure_topics(settings)
    atexit.register(delete_topics, boot, settings.topics.all())
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRACEVAULT_")}
    env["TRACEVAULT_LOG_KEY"] = Ed25519Signer.generate("bench").skey
    n_open = int(args.open * args.scale) if args.scale < 1 else args.open
    plan = [
        ("empty", 0, 0),
        ("open", n_open, 0),
        ("100k", 0, int(100_000 * args.scale)),
        ("1M", 0, int(900_000 * args.scale)),
    ]
    results: dict[str, dict[str, Any]] = {}
    total_open = total_fin = 0
    seq = SequencerProcess(settings, args.port, env)
    seq.wait_restored(120)
    for label, add_open, add_fin in plan:
        t0 = time.monotonic()
        if add_open:
            produce(settings, f"open-{label}", add_open, finished=False)
        if add_fin:
            produce(settings, f"fin-{label}", add_fin, finished=True)
        total_open += add_open
        total_fin += add_fin
        seq.wait_for(total_open, total_fin, timeout=3600)
        sealed_s = time.monotonic() - t0
        rss_before = seq.rss()
        seq.stop()
        seq = SequencerProcess(settings, args.port, env)
        restart_s = seq.wait_restored(600)
        seq.wait_for(total_open, total_fin, timeout=600)
        time.sleep(1.0)  # let the first sweep publish the gauges and the allocator settle
        results[label] = {
            "open_runs": total_open,
            "finished_runs": total_fin,
            "restored": list(seq.restored),
            "restart_s": round(restart_s, 3),
            "rss_after_sealing": rss_before,
            "rss_after_restart": seq.rss(),
            "finished_state_bytes": seq.metric("tracevault_sequencer_finished_state_bytes"),
            "phase_s": round(sealed_s, 1),
        }
        emit({"phase": label, **results[label]})
    seq.stop()
    fin = results["1M"]["finished_runs"] or 1
    per_run_restart = (
        results["1M"]["rss_after_restart"] - results["open"]["rss_after_restart"]
    ) / fin
    per_run_live = (results["1M"]["rss_after_sealing"] - results["open"]["rss_after_sealing"]) / fin
    ratio = results["1M"]["restart_s"] / results["empty"]["restart_s"]
    emit(
        {
            "bench": "fleet_state",
            "scale": args.scale,
            "partitions": args.partitions,
            "bytes_per_finished_run_after_restart": round(per_run_restart, 1),
            "bytes_per_finished_run_live": round(per_run_live, 1),
            "restart_ratio_1m_vs_empty": round(ratio, 2),
            "restart_s": {k: v["restart_s"] for k, v in results.items()},
            "targets": {"bytes_per_finished_run": 64, "restart_ratio": 3.0},
            "meets": per_run_restart <= 64 and ratio <= 3.0,
        }
    )


if __name__ == "__main__":
    main()
