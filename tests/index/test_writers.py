"""Two index writers at once, one SIGKILLed mid-write (real processes, the real CLI): the
index they leave, caught up once more, holds every row once, exactly the rows a rebuild
writes. Each object appears whole or not at all (the store's put), and the same archive state
gives the same object names and bytes, so the survivors' work and a redo agree."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from tests.index.fleet import Spec, sealed
from tests.services.archiver.sealed_factory import LogWriter
from tracevault.archive import ObjectStore, open_store
from tracevault.config import Settings
from tracevault.index import index_keys, load_index, open_views, rebuild
from tracevault.transparency import load_signer

ROOT = Path(__file__).resolve().parents[2]
RUNS = 60  # over 20 days: 40 objects for the victim to be killed among


def _archive(store: ObjectStore, runs: int) -> None:
    until = datetime.now(UTC) + timedelta(days=366)
    w = LogWriter(store, load_signer(), Settings().topic_prefix, until=until)
    for i in range(runs):
        w.add(sealed(Spec(f"run-{i:04d}", f"agent-{i % 7}", i % 20, ("search", "mail"), "m")))
        if i % 10 == 9:
            w.flush()
    w.flush()


def _rows(store: ObjectStore) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
    con = open_views(load_index(store))
    return (
        con.execute("SELECT * FROM runs ORDER BY run_id").fetchall(),
        con.execute("SELECT * FROM events ORDER BY run_id, seq").fetchall(),
    )


def _update(url: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    args = [sys.executable, "-m", "tracevault", "index", "update", "--archive", url]
    return subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_two_writers_one_killed_mid_write_leave_no_duplicate_or_missing_row(
    tmp_path: Path,
) -> None:
    url = f"file://{tmp_path / 'archive'}"
    store = open_store(url, Settings())
    _archive(store, RUNS)
    victim, other = _update(url), _update(url)
    deadline = time.monotonic() + 120
    while not index_keys(store) and victim.poll() is None:  # killed once it is writing
        assert time.monotonic() < deadline, "no index object appeared"
    victim.send_signal(signal.SIGKILL)
    victim.communicate(timeout=30)
    assert victim.returncode == -signal.SIGKILL  # killed while writing, not finished
    _, err = other.communicate(timeout=300)
    assert other.returncode == 0, err.decode()[-2000:]
    finished = _update(url)  # a restart of the killed writer
    _, err = finished.communicate(timeout=300)
    assert finished.returncode == 0, err.decode()[-2000:]
    runs, events = _rows(store)
    assert len(runs) == RUNS == len({r[0] for r in runs})
    # each run: RUN_STARTED, MODEL_CALL, two TOOL_CALLs, RUN_FINISHED
    assert len(events) == len({(e[0], e[1]) for e in events}) == RUNS * 5
    assert not load_index(store).skipped  # no partial object
    rebuild(store)
    assert _rows(store) == (runs, events)
