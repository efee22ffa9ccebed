"""A flush cut short before its checkpoint object leaves run indexes naming a size with no
checkpoint; the restarted archiver writes the same leaves again at other flush boundaries.

The store holds exactly what an archiver killed between its run indexes and its checkpoint
object leaves behind (every put of the flush but the last), then what its restart writes
(``test_crash.py`` kills real archivers; this pins the one interleaving a kill rarely hits).
The run must read and verify. A run index whose checkpoint was deleted out of band, with no
redone flush behind it, must still be named.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.services.archiver.sealed_factory import LogWriter, future, sealed_run
from tracevault.archive import ObjectStore
from tracevault.archive._filestore import FileStore
from tracevault.archive.tlog import checkpoint_key, log_prefix
from tracevault.errors import ChainError
from tracevault.replayer.load.archive import load_from_archive
from tracevault.replayer.load.verify import verify
from tracevault.transparency import CheckpointRecord, CompactTree, Ed25519Signer

LOG = log_prefix("pfx", 0)


def _crash_before_checkpoint(w: LogWriter) -> None:
    """Flush ``w`` as the archiver does, writing every object of the flush but its last."""
    rec, w.tree = CheckpointRecord.build(w.tree, w.pending, w.origin, w.signer)
    w.pending = []
    w.plog.note, w.plog.note_size = rec.note, w.tree.size
    until = future()
    job = w.plog.take_flush(until)
    with ThreadPoolExecutor(4) as pool:
        for f in [pool.submit(w.plog.store.put, k, v, retain_until=until) for k, v in job.puts]:
            f.result()


def test_a_run_reads_after_a_flush_cut_short_and_redone_at_other_boundaries(
    store: ObjectStore,
) -> None:
    signer = Ed25519Signer.generate("test-log")
    events = sealed_run("crashed", 20)
    w = LogWriter(store, signer)
    w.add(sealed_run("before", 3))
    w.flush()  # size 3: the archived log the restart resumes from
    signed_at_3 = CompactTree(w.tree.size, list(w.tree.hashes))
    w.add(events[:7], finishes=False)
    _crash_before_checkpoint(w)  # the run's index names size 10; there is no checkpoint 10
    assert [i.key for i in store.list(LOG + "checkpoint/")] == [checkpoint_key(LOG, 3)]

    again = LogWriter(store, signer)  # the restart resumes from the archived size 3
    again.tree = signed_at_3  # the sequencer's log goes on as it was
    again.add(events[:12], finishes=False)  # the same records read again, and more
    again.flush()  # size 15: not the crashed flush's boundary
    again.add(events[12:])
    again.flush()  # size 23, the run finished

    run = load_from_archive(store, "crashed")
    report = verify(run, keys=[signer.verifier])
    assert report.finished and report.count == 20 and report.log_checked
    assert len(run.log_index_keys) == 2  # the indexes of the completed flushes only


def test_an_index_whose_checkpoint_was_deleted_is_still_caught(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "archive")
    signer = Ed25519Signer.generate("test-log")
    events = sealed_run("victim", 8)
    w = LogWriter(store, signer)
    w.add(events[:4], finishes=False)
    w.flush()  # size 4
    w.add(events[4:])
    w.flush()  # size 8: the run's tail and its RUN_FINISHED
    w.add(sealed_run("later", 3))
    w.flush()  # size 11, the newest
    store.path_of(checkpoint_key(LOG, 8)).unlink()  # an operator hides the tail's flush

    with pytest.raises(ChainError, match=r"A4 index|checkpoint") as caught:
        verify(load_from_archive(store, "victim"), keys=[signer.verifier])
    assert "victim" in str(caught.value)
