"""SIGKILL the archiver (a real subprocess) five times while it archives 20,000 sealed events.

The archive must end complete: every event exactly once, contiguous seq ranges, receipts and
final receipts consistent, and nothing a reader would take as complete that is not.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from io import BytesIO
from pathlib import Path

import avro.datafile
import avro.io

from tests.consumer.archive.helpers import finished_runs, produce_sealed, wait_for
from tests.consumer.archive.sealed_factory import sealed_run, sealed_values
from tracevault.archive import check_run, list_run, open_store, read_run_objects
from tracevault.archive.layout import parse_segment_key
from tracevault.config import Settings

RUNS = 40
EVENTS_PER_RUN = 500  # 40 x 500 = 20,000 sealed events, the number
KILLS = 5


def _start(settings: Settings, log: Path) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "TRACEVAULT_BOOTSTRAP_SERVERS": settings.bootstrap_servers,
        "TRACEVAULT_TOPIC_PREFIX": settings.topic_prefix,
        "TRACEVAULT_ARCHIVE_URL": settings.archive_url,
    }
    cmd = [
        sys.executable, "-m", "tracevault", "archiver",
        "--segment-max-events", "50", "--segment-max-age", "0.5",
        "--instance-id", f"crash-{settings.topic_prefix}",
    ]  # fmt: skip
    with open(log, "ab") as out:
        return subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)


def test_sigkill_five_times_during_20000_events_leaves_a_complete_archive(
    settings_factory: Callable[..., Settings], tmp_path: Path
) -> None:
    settings = settings_factory(partitions=3)
    run_ids = [f"crash-{i:02d}" for i in range(RUNS)]
    runs = {r: sealed_values(r, EVENTS_PER_RUN) for r in run_ids}
    assert produce_sealed(settings, runs) == RUNS * EVENTS_PER_RUN
    store = open_store(settings.archive_url, settings)
    log = tmp_path / "archiver.log"

    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    # ~880 objects in all (per run: 10 segments, 10 receipts, a final, a day marker); kill
    # when the archive first holds a random number of them: at random points of the work.
    # The last 30% stay out of range: the archiver writes dozens of objects between two polls
    # of the store, and a kill after the last object would test nothing (seen once in CI).
    targets = sorted(rng.sample(range(40, 620), KILLS))
    for target in targets:
        proc = _start(settings, log)
        try:
            wait_for(
                lambda: proc.poll() is not None or len(store.list("")) >= target,  # noqa: B023
                120,
                f"{target} objects (seed {seed})",
            )
            assert proc.poll() is None, f"archiver exited early: {log.read_text()[-2000:]}"
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(30)
        assert proc.returncode == -signal.SIGKILL
        assert finished_runs(store, run_ids) < RUNS, "killed after the work was done"

    proc = _start(settings, log)
    try:
        wait_for(lambda: finished_runs(store, run_ids) == RUNS, 180, f"all runs (seed {seed})")
    finally:
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(60)
    assert rc == 0, log.read_text()[-2000:]

    seen: Counter[tuple[str, int]] = Counter()
    for run_id in run_ids:
        assert not list_run(store, run_id).unreceipted
        run = read_run_objects(store, run_id)
        assert run.complete
        assert check_run(run) == EVENTS_PER_RUN  # contiguous, chained, receipts agree
        assert [e.raw for e in run.events()] == [e.raw for e in sealed_run(run_id, EVENTS_PER_RUN)]
        for seg in run.segments:
            reader = avro.datafile.DataFileReader(BytesIO(seg.data), avro.io.DatumReader())
            try:
                seen.update((rec["run_id"], rec["seq"]) for rec in reader)
            finally:
                reader.close()
    assert len(seen) == RUNS * EVENTS_PER_RUN
    assert set(seen.values()) == {1}, "an event was archived twice"
    # Nothing half-written is visible: every object is a segment with its receipt, a final
    # receipt or a day marker.
    for info in store.list(""):
        assert info.key.startswith(("runs/", "index/days/")), info.key
        if parse_segment_key(info.key) is not None:
            assert info.key[: -len(".avro")] + ".receipt.json" in {
                i.key for i in store.list(info.key.rsplit("/", 1)[0] + "/")
            }
