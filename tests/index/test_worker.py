"""The archiver's index step in a child process (``IndexWorker``): the rows it writes are
the in-process step's, a child killed between flushes is started again and nothing is
missing, and an error the store raises in the child is raised in the flush's thread
(docs/index.md, "Writing")."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from tests.index.fleet import Spec, sealed
from tests.index.test_step import _archive_in_pieces, _rows
from tracevault.archive import open_store
from tracevault.config import Settings
from tracevault.errors import TraceVaultError
from tracevault.index import IndexWorker, rebuild


def _worker(url: str) -> IndexWorker:
    return IndexWorker(Settings().model_dump_json(), url)


def test_the_worker_writes_what_the_step_in_process_writes(tmp_path: Path) -> None:
    got = []
    workers: list[IndexWorker] = []
    for in_child in (False, True):
        url = f"file://{tmp_path / str(in_child)}"
        store = open_store(url, Settings())

        def make(url: str = url) -> IndexWorker:
            workers.append(_worker(url))
            return workers[-1]

        _archive_in_pieces(store, python=False, make=make if in_child else None)
        got.append(_rows(store))
    try:
        assert got[0] == got[1]
        assert len(got[1][0]) > 3 and len(got[1][1]) > 20  # runs and events were written
        assert sum(w.events for w in workers) == len(got[1][1])
        assert all(w.c_flushes > 0 for w in workers)  # the child walked them in C
    finally:
        for w in workers:
            w.close()


def test_a_child_killed_between_flushes_is_started_again_and_nothing_is_missing(
    tmp_path: Path,
) -> None:
    store = open_store(f"file://{tmp_path / 'archive'}", Settings())
    workers: list[IndexWorker] = []
    killed: list[int] = []

    def make() -> IndexWorker:
        workers.append(_worker(store.url))
        return workers[-1]

    def kill(i: int) -> None:
        if i in (1, 4):  # mid-run: the run's second half goes to a new child
            child = workers[-1]._child
            assert child is not None
            os.kill(child.pid, signal.SIGKILL)
            child.wait()
            killed.append(child.pid)

    try:
        _archive_in_pieces(store, python=False, make=make, between=kill)
        assert len(killed) == 2
        assert sum(w.restarts for w in workers) == 2
        incremental = _rows(store)
        rebuild(store)
        assert _rows(store) == incremental
    finally:
        for w in workers:
            w.close()


def test_a_store_error_in_the_child_is_raised_to_the_flush(tmp_path: Path) -> None:
    root = tmp_path / "archive"
    store = open_store(f"file://{root}", Settings())
    worker = _worker(store.url)
    try:
        worker.wait_ready()
        # a file where the index's folder must be: every index put fails in the child
        for d in (root / "objects" / "index", root / "index"):
            d.parent.mkdir(parents=True, exist_ok=True)
            d.write_bytes(b"not a folder")
        from tests.services.archiver.sealed_factory import LogWriter
        from tracevault.transparency import load_signer

        w = LogWriter(store, load_signer(), index=worker)
        w.add(sealed(Spec("run-x", "planner", 1)))
        flush = worker.take(w.plog)
        with pytest.raises(TraceVaultError, match="index"):
            flush()
        assert worker.restarts == 0  # the child said so; it did not die
    finally:
        worker.close()


def test_a_child_of_another_version_refuses_at_once_instead_of_waiting(tmp_path: Path) -> None:
    """An archiver whose files were replaced under it (an upgrade in place) starts children
    from the new files: their frames differ, and before the hello said which version each
    side is, parent and child waited on each other for ever (seen when a merge landed under a
    running test). Now the child says what it is and exits; the flush's error names it."""
    import subprocess
    import sys

    from tracevault.errors import ArchiveError

    worker = _worker(f"file://{tmp_path / 'archive'}")
    worker._hello = ("0" * 16, *worker._hello[1:])  # what an older parent sends
    with pytest.raises(ArchiveError, match="another version of tracevault"):
        worker.wait_ready()
    assert worker._child is None, "the refusing child is not kept"
    # and an older parent's three-field hello is refused the same way, by a real child
    child = subprocess.run(
        [sys.executable, "-c", "from tracevault.index._worker import main; main()"],
        input=_hello_frame(("{}", "file:///nowhere", None)),
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert child.returncode == 0
    assert b"another version of tracevault" in child.stdout


def _hello_frame(hello: tuple[object, ...]) -> bytes:
    import io

    from tracevault.index._worker import _send

    buf = io.BytesIO()
    _send(buf, hello)
    return buf.getvalue()
