"""Two archivers (real processes, real Kafka) writing the index with their flushes, one
SIGKILLed while it writes and restarted: the index they leave holds every run and every
event once, exactly the rows a rebuild from the archive writes, and no partial object."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

from tests.services.archiver.helpers import SealedLog, archived_size, start_archiver, wait_for
from tests.services.archiver.sealed_factory import sealed_values
from tracevault.archive import ObjectStore, open_store
from tracevault.config import Settings
from tracevault.index import index_keys, load_index, open_views, rebuild

RUNS = 30
EVENTS = 200  # 6,000 events over 3 partitions, flushed every 100 leaves: runs span flushes


def _start(settings: Settings, vkey: str, log: Path, name: str) -> subprocess.Popen[bytes]:
    return start_archiver(settings, vkey, log, name, 100)


def _archived(store: ObjectStore, settings: Settings, p: int) -> int:
    return archived_size(store, settings, p)


def _rows(store: ObjectStore) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
    con = open_views(load_index(store))
    return (
        con.execute("SELECT * FROM runs ORDER BY run_id").fetchall(),
        con.execute("SELECT * FROM events ORDER BY run_id, seq").fetchall(),
    )


def test_two_archivers_one_killed_mid_write_leave_the_index_a_rebuild_writes(
    settings_factory: Callable[..., Settings], tmp_path: Path
) -> None:
    settings = settings_factory(partitions=3)
    sl = SealedLog(settings)
    runs = {f"ix-{i:02d}": sealed_values(f"ix-{i:02d}", EVENTS) for i in range(RUNS)}
    assert sl.produce(runs, batch=100) == RUNS * EVENTS
    sizes = {p: t.size for p, t in sl.trees.items()}
    store = open_store(settings.archive_url, settings)
    log = tmp_path / "archivers.log"

    def done() -> bool:
        return all(_archived(store, settings, p) == n for p, n in sizes.items())

    a, b = _start(settings, sl.vkey, log, "a"), _start(settings, sl.vkey, log, "b")
    try:
        # killed while both write: once some flushes are indexed, the work far from done
        wait_for(
            lambda: a.poll() is not None or len(index_keys(store, ("events",))) >= 4,
            180,
            "the archivers' first index objects",
        )
        assert a.poll() is None, f"archiver exited early: {log.read_text()[-2000:]}"
        a.send_signal(signal.SIGKILL)
        a.wait(30)
        assert a.returncode == -signal.SIGKILL
        assert not done(), "killed after the work was done"
        a = _start(settings, sl.vkey, log, "a")  # its restart
        wait_for(done, 300, "the whole log archived")
        # the restart may still be starting (a loaded machine): its SIGTERM handler first
        wait_for(lambda: log.read_text().count("Ctrl-C to stop") >= 3, 120, "the restart")
    finally:
        for proc in (a, b):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
    assert a.wait(60) == 0 and b.wait(60) == 0, log.read_text()[-2000:]

    assert not load_index(store).skipped  # no partial object
    run_rows, event_rows = _rows(store)
    assert [r[0] for r in run_rows] == sorted(runs)  # every run, once
    assert len(event_rows) == RUNS * EVENTS  # every event, once
    assert {(e[0], e[1]) for e in event_rows} == {(r, s) for r in runs for s in range(EVENTS)}
    con = open_views(load_index(store))
    assert con.execute("SELECT DISTINCT status FROM runs").fetchall() == [("finished",)]
    rebuild(store)
    assert _rows(store) == (run_rows, event_rows)
