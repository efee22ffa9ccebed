"""Verifying an old run does not read the log written after it.

The unindexed-tail scan (check A4) reads the entry bundles past a run's last listed leaf to
find leaves of the run that no index lists (a deleted tail). It runs only for a run no index
says finished: a finished run's claim is held to its chain's end, and a hidden tail removes
the claim. Before, every verify of a finished run read every bundle written after it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.services.archiver.sealed_factory import LogWriter, RecordingStore, sealed_run
from tracevault.archive import ObjectStore
from tracevault.archive._filestore import FileStore
from tracevault.archive.layout import run_prefix
from tracevault.archive.tlog import log_prefix, run_index_key
from tracevault.errors import ChainError
from tracevault.replayer.load.archive import load_from_archive
from tracevault.replayer.load.verify import verify
from tracevault.transparency import Ed25519Signer

ENTRIES = log_prefix("pfx", 0) + "tile/entries/"


def _log(store: ObjectStore, signer: Ed25519Signer, *, finish: bool) -> None:
    w = LogWriter(store, signer)
    w.add(sealed_run("old", 20), finishes=finish)
    w.flush()
    for i in range(300):  # 600 more leaves: bundles 0.., 1 and 2 are written after the run
        w.add(sealed_run(f"later-{i}", 2))
        if i % 50 == 49:
            w.flush()


def test_a_finished_runs_verify_reads_no_bundle_written_after_it(tmp_path: Path) -> None:
    store, signer = FileStore(tmp_path / "a"), Ed25519Signer.generate("test-log")
    _log(store, signer, finish=True)
    reads = RecordingStore(store)
    assert verify(load_from_archive(reads, "old"), keys=[signer.verifier]).finished
    entries = [k for k in reads.keys if k.startswith(ENTRIES)]
    assert entries == [], entries


def test_an_unfinished_run_is_still_scanned_and_a_hidden_tail_named(tmp_path: Path) -> None:
    store, signer = FileStore(tmp_path / "a"), Ed25519Signer.generate("test-log")
    w = LogWriter(store, signer)
    events = sealed_run("victim", 10)
    w.add(events[:6], finishes=False)
    w.flush()  # size 6
    w.add(events[6:])
    w.flush()  # size 10: the tail, with RUN_FINISHED
    for i in range(200):
        w.add(sealed_run(f"later-{i}", 2))
    w.flush()
    # a hostile operator deletes the run's finishing index object (out of band)
    store.path_of(run_index_key(run_prefix("victim"), 0, 10)).unlink()
    reads = RecordingStore(store)
    with pytest.raises(ChainError, match="A4 index") as caught:
        verify(load_from_archive(reads, "victim"), keys=[signer.verifier])
    assert "seq 6" in str(caught.value)
    assert any(k.startswith(ENTRIES) for k in reads.keys)
