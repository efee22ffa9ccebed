"""Every benchmark still runs and still prints its figures (issue 35).

``bench/archiver_throughput.py`` crashed for days after the archiver moved onto the service
runtime, and nothing noticed: nothing ran the benches. Here each bench that needs no service
beyond the shared broker (and moto's server, which the suite already has) runs in its own
process, as a developer runs it, with its smallest meaningful arguments: tiny event counts, one
rep. Its last line must be one JSON object carrying, as finite numbers, the keys README.md
("Benchmarks") and bench/README.md read their figures from. The figures' values are not
checked: at these sizes they mean nothing, and this machine's load moves them anyway.

Every topic a bench makes starts with ``BENCH_TOPIC_PREFIX`` (bench/_topics.py), unique per run
here: none may be left on the broker after the bench (they were, run after run, while the
benches sent the delete without waiting for its answer).

Left out: ``bench/ui.py`` (it drives a headless Chromium, and the desk's API it calls is being
changed; tests/desk runs the same pages in a browser).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from tests.kafka_harness import free_port
from tests.producer.test_fault import wait_until

ROOT = Path(__file__).resolve().parents[1]
#: A bench that hangs fails here with its output, well before pytest-timeout's 600 s.
TIMEOUT_S = 300


@dataclass(frozen=True)
class Bench:
    """One bench run. ``args``: its arguments, ``{tmp}`` the test's temp dir, ``{s3}`` the
    suite's S3 endpoint (moto), ``{port}`` a free port. ``figures``: the last line's keys
    (``a.b``: key ``b`` of object ``a``) that must be finite numbers; ``equal``: keys whose
    value is fixed (the configuration the line is for)."""

    script: str
    args: tuple[str, ...]
    figures: tuple[str, ...]
    equal: tuple[tuple[str, object], ...] = ()

    @property
    def name(self) -> str:
        return " ".join([self.script, *(a for a in self.args if a.startswith("--agent"))])


#: Arguments common to the archive readers: 1,000 events in two segments, one rep.
_READ = ("--events", "1000", "--per-segment", "500", "--reps", "1")
#: The Recorder benches: a few hundred calls and events, one throughput round.
_RECORD = ("--calls", "200", "--events", "500", "--rounds", "1")

BENCHES = [
    Bench(
        "archiver_throughput.py",
        ("--events", "200", "--reps", "1", "--dir", "{tmp}"),
        ("events_per_s", "baseline_events_per_s", "ratio", "objects_per_run"),
    ),
    Bench(
        "sequencer_throughput.py",
        ("--events", "500", "--runs", "25", "--repeats", "1", "--rate", "500",
         "--latency-seconds", "2"),
        ("events_per_s", "baseline_events_per_s", "ratio", "latency_p50_ms", "latency_p99_ms"),
    ),
    Bench(
        "producer_overhead.py",
        _RECORD,
        ("median_overhead_us", "p99_overhead_us", "events_per_s", "baseline_events_per_s",
         "throughput_ratio", "produce_median_us", "overhead_vs_produce"),
    ),
    Bench(
        "producer_overhead.py",
        (*_RECORD, "--agent-identity"),
        ("events_per_s", "baseline_events_per_s", "throughput_ratio", "added_by_identity_us",
         "publisher_added_us", "identity_vs_without"),
        (("agent_identity", True),),
    ),
    Bench(
        "recorder_encrypted.py",
        _RECORD,
        ("median_overhead_us", "raw_produce_median_us", "overhead_per_raw_produce",
         "added_by_encryption_us", "events_per_s", "baseline_events_per_s", "throughput_ratio"),
    ),
    Bench(
        "replay_throughput.py",
        _READ,
        ("seconds", "events_per_s", "baseline_events_per_s", "ratio"),
    ),
    Bench(
        "replay_encrypted.py",
        _READ,
        ("seconds", "baseline_seconds", "ratio", "plain_ratio"),
    ),
    Bench(
        "verify_throughput.py",
        (*_READ, "--batch", "100", "--flush-events", "500"),
        ("seconds", "events_per_s", "baseline_events_per_s", "ratio", "ratio_per_rep_median"),
    ),
    Bench(
        "archive_verify_versions.py",
        ("--others", "4", "--baseline-others", "2"),
        ("log_object_versions", "versions_listed_ratio"),
    ),
    Bench(
        "heads_restore.py",
        ("--heads", "30"),
        ("read_state_s", "prove_state_s", "restore_ratio"),
    ),
    Bench(
        "recorder_encode.py",
        ("--events", "200", "--rounds", "1"),
        ("encode.python_us", "encode.c_us", "link.c_us", "encode_and_attest.c_us"),
    ),
    Bench(
        "seal_event.py",
        ("--events", "200", "--rounds", "1"),
        ("c_median_us", "python_median_us", "python_over_c"),
    ),
    Bench(
        "run_key_start.py",
        ("--starts", "5", "--endpoint", "{s3}"),
        ("generate_us", "generate_and_store_us"),
        (("config", "kms+s3"),),
    ),
    Bench(
        "sdk_import.py",
        ("--samples", "2"),
        ("import_ms_median", "modules", "tracevault_modules"),
    ),
    Bench(
        "search.py",
        ("--runs", "400", "--events-per-run", "4", "--days", "10", "--queries", "2",
         "--dir", "{tmp}"),
        ("search_p50_s", "search_p99_s", "baseline_p50_s", "ratio_p50"),
    ),
    Bench(
        "adapter_overhead.py",
        ("--calls", "20"),
        ("chat.ratio", "chat.median_overhead_us", "chat_stream.ratio"),
    ),
    Bench(
        "langgraph_overhead.py",
        ("--calls", "20"),
        ("chat.ratio", "chat.median_overhead_us", "tool.ratio"),
    ),
    Bench(
        "framework_overhead.py",
        ("--runs", "3", "--warmup", "1"),
        ("pydantic_ai.ratio", "adk.ratio", "openai_agents.ratio", "adk.median_overhead_us"),
    ),
    Bench(
        "batch_engine.py",
        ("--runs", "20", "--workers", "1", "--reps", "1"),
        ("dask_s", "local_s", "ratio", "dask_overhead_ms_per_run"),
        (("same_report", True),),
    ),
    Bench(
        "fleet_state.py",
        ("--scale", "0.0001", "--partitions", "2", "--port", "{port}"),
        ("bytes_per_finished_run_after_restart", "restart_ratio_1m_vs_empty"),
    ),
    Bench(
        "scaleout.py",
        ("--events", "200", "--partitions", "2"),
        ("sequencer_ratio_2_vs_1", "archiver_ratio_2_vs_1"),
    ),
]  # fmt: skip


#: the benches that make topics: each must say it deleted them (bench/_topics.py), so the check
#: below cannot pass because a bench named its topics some other way
MAKE_TOPICS = {
    "archiver_throughput.py", "sequencer_throughput.py", "producer_overhead.py",
    "recorder_encrypted.py", "heads_restore.py", "adapter_overhead.py",
    "langgraph_overhead.py", "fleet_state.py", "scaleout.py", "framework_overhead.py",
}  # fmt: skip


def _get(obj: dict[str, Any], dotted: str) -> Any:
    for part in dotted.split("."):
        assert isinstance(obj, dict) and part in obj, f"no {dotted!r} in the last line: {obj}"
        obj = obj[part]
    return obj


def _topics_under(admin: AdminClient, prefix: str) -> list[str]:
    return sorted(t for t in admin.list_topics(timeout=30).topics if t.startswith(prefix))


def _topics_left(bootstrap: str, prefix: str) -> list[str]:
    """Topics under ``prefix`` still on the broker once their deletion had 30 s to show in
    the metadata (a delete the broker answered can take a moment to leave it); what is left
    is deleted here, so a failing bench does not leave it either, and returned."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    with contextlib.suppress(AssertionError):  # what is still there is deleted below
        wait_until(lambda: not _topics_under(admin, prefix), 30, f"topics under {prefix} to go")
    left = _topics_under(admin, prefix)
    if left:
        for fut in admin.delete_topics(left, request_timeout=30).values():
            fut.result(timeout=60)
    return left


@pytest.mark.parametrize("bench", BENCHES, ids=lambda b: b.name)
def test_bench_prints_its_figures(
    bench: Bench, kafka_bootstrap: str, s3_endpoint: str, tmp_path: Path
) -> None:
    # as a developer's shell runs a bench: none of the suite's TRACEVAULT_* keys (a bench makes
    # its own), the shared broker, this checkout first on the import path
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRACEVAULT_")}
    prefix = f"smoke-{uuid.uuid4().hex[:10]}"  # every topic the bench makes starts so
    env |= {"KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap, "PYTHONPATH": str(ROOT),
            "TMPDIR": str(tmp_path), "BENCH_TOPIC_PREFIX": prefix}  # fmt: skip
    given = {"tmp": str(tmp_path), "s3": s3_endpoint, "port": str(free_port())}
    cmd = [sys.executable, str(ROOT / "bench" / bench.script),
           *(a.format(**given) for a in bench.args)]  # fmt: skip
    # its own session: a bench that times out is killed with what it started (a Dask
    # cluster, a sequencer), not only its main process
    with subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    ) as child:  # fmt: skip
        try:
            stdout, stderr = child.communicate(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            stdout, stderr = child.communicate()
            pytest.fail(f"{bench.name} did not finish in {TIMEOUT_S} s: {stderr[-4000:]}")
    proc = subprocess.CompletedProcess(cmd, child.returncode, stdout, stderr)
    name = " ".join(cmd[1:])
    left = _topics_left(kafka_bootstrap, prefix)
    assert proc.returncode == 0, f"{name} exited {proc.returncode}:\n{proc.stderr[-4000:]}"
    assert not left, f"{name} left {len(left)} topics on the broker: {left}\n{proc.stderr[-2000:]}"
    if bench.script in MAKE_TOPICS:
        assert "bench: deleted " in proc.stderr, f"{name} did not delete its topics:\n{stderr}"
    lines = proc.stdout.strip().splitlines()
    assert lines, f"{name} printed nothing:\n{proc.stderr[-4000:]}"
    last = json.loads(lines[-1])
    assert isinstance(last, dict), f"{name}: the last line is not one JSON object: {lines[-1]}"
    for key in bench.figures:
        value = _get(last, key)
        assert isinstance(value, int | float) and not isinstance(value, bool), (name, key, value)
        assert math.isfinite(value), (name, key, value)
    for key, want in bench.equal:
        assert _get(last, key) == want, (name, key, _get(last, key))
