"""Crash safety: SIGKILL the sequencer process at random moments mid-stream, five times.

20,000 events across 100 runs (the issue's numbers) are produced at a steady pace while the
sequencer runs as ``python -m tracevault sequencer``; it is SIGKILLed five times at random
moments and restarted each time. Afterwards an independent read_committed read of the sealed
topic must hold every event exactly once, in chains equal to the ones computed from the raw
bytes, and the DLQ must be empty. The signed log must cover every committed event: each
partition's checkpoints verify, list exactly the events since the one before, and each pair of
successive checkpoints is consistent (docs/log.md, "Sequencer").
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from tests.services.sequencer.support import (
    assert_chain,
    assert_signed_log,
    interleaved_runs,
    read_all,
    sealed_by_run,
    sealed_count,
    wait_until,
)
from tests.services.sequencer.support import producer as raw_producer
from tracevault.config import Settings
from tracevault.transparency import Ed25519Signer

RUNS, EVENTS_PER_RUN, KILLS = 100, 200, 5
TOTAL = RUNS * EVENTS_PER_RUN


def start(settings: Settings, log: Path) -> subprocess.Popen[bytes]:
    cmd = [
        sys.executable,
        "-m",
        "tracevault",
        "--bootstrap-servers",
        settings.bootstrap_servers,
        "--prefix",
        settings.topic_prefix,
        "sequencer",
        "--instance-id",
        "crash",
        "--batch-size",
        "200",
        "--batch-wait-ms",
        "20",
        "--transaction-timeout-ms",
        "10000",
        "--session-timeout-ms",
        "6000",
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRACEVAULT_")}
    env["TRACEVAULT_LOG_KEY"] = os.environ["TRACEVAULT_LOG_KEY"]  # the session's log key
    with log.open("ab") as out:
        return subprocess.Popen(cmd, stdout=out, stderr=out, env=env)


def test_sigkill_at_random_moments_loses_and_duplicates_nothing(
    seq_settings: Callable[..., Settings], tmp_path: Path, log_signer: Ed25519Signer
) -> None:
    settings = seq_settings(partitions=3)
    items = interleaved_runs(RUNS, EVENTS_PER_RUN, seed=11, stem="crash")
    expected: dict[str, list[bytes]] = {}
    for run, value in items:
        expected.setdefault(run, []).append(value)

    # A steady stream (~2,000 events/s) so that every kill lands while events are flowing.
    done = threading.Event()
    failures: list[BaseException] = []

    def stream() -> None:
        try:
            p = raw_producer(settings)
            for i in range(0, TOTAL, 200):
                for run, value in items[i : i + 200]:
                    p.produce(settings.topics.raw, value, run)
                    p.poll(0)
                assert p.flush(30) == 0
                done.wait(0.1)  # pacing between chunks; done is never set before the end
        except BaseException as exc:
            failures.append(exc)

    log = tmp_path / "sequencer.log"
    rng = random.Random(20261129)
    proc = start(settings, log)
    producer = threading.Thread(target=stream, daemon=True)
    producer.start()
    progress_at_kill: list[int] = []
    before = 0
    for _ in range(KILLS):
        # Kill while it works: once this incarnation has committed something, at a random
        # moment within the next 0.6 s (mid-batch, mid-flush, mid-commit or between).
        wait_until(
            lambda p=proc, b=before: p.poll() is not None or sealed_count(settings) > b,
            timeout=60,
            what="the restarted sequencer to make progress",
            every=0.05,
        )
        assert proc.poll() is None, f"sequencer exited by itself:\n{log.read_text()}"
        try:
            code = proc.wait(timeout=rng.uniform(0.0, 0.6))
            raise AssertionError(f"sequencer exited by itself ({code}):\n{log.read_text()}")
        except subprocess.TimeoutExpired:
            pass
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
        before = sealed_count(settings)
        progress_at_kill.append(before)
        proc = start(settings, log)
    producer.join(120)
    assert not failures, failures
    try:
        wait_until(
            lambda: sealed_count(settings) >= TOTAL, timeout=120, what=f"{TOTAL} sealed events"
        )
        # The last restart may find everything sealed already: SIGTERM only once it has
        # installed its handler (its banner, printed right after, is in the log), or the
        # signal's default action kills it before it is a sequencer at all.
        wait_until(
            lambda: log.read_text().count("sequencer crash on ") >= len(progress_at_kill) + 1,
            timeout=60,
            what="the last sequencer's start banner",
        )
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
    assert code == 0, log.read_text()[-3000:]
    print("sealed events at each kill:", progress_at_kill)
    # The kills really happened mid-stream, not before or after the work.
    assert sum(0 < n < TOTAL for n in progress_at_kill) >= 3, progress_at_kill

    runs = sealed_by_run(settings)
    assert sum(len(v) for v in runs.values()) == TOTAL, "each event sealed exactly once"
    assert set(runs) == set(expected)
    for run_id, recs in runs.items():
        assert_chain(run_id, [ev for _, ev in recs], expected[run_id])
    assert read_all(settings, settings.topics.dlq) == [], "nothing refused"
    # No committed event is outside the signed log: every partition's checkpoints verify,
    # list exactly the events before them, and each is consistent with the one before it
    # across all six incarnations (the tree restored from heads after every kill).
    cps = assert_signed_log(settings, [log_signer.verifier])
    assert sum(len(c) for c in cps.values()) >= 3 * (KILLS + 1), "checkpoints in each life"
