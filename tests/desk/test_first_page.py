"""The desk's first screen of a run reads the run's first objects only (``load_head``).

Why a test of its own: the first screen of a 100,000-event run must not cost a load of the
whole run (every data bundle, tile and checkpoint), which is what the verification reads.
The run here is written as the archiver writes it (a static log, flush by flush) and read
through a store that records every key asked for.
"""

from __future__ import annotations

from pathlib import Path

from tests.replayer.archiving import write_run
from tests.services.archiver.sealed_factory import LogWriter, RecordingStore, sealed_run
from tracevault.archive import open_store, run_index_keys
from tracevault.archive.tlog import RunIndex, data_key
from tracevault.config import Settings
from tracevault.desk.evidence import first_page
from tracevault.replayer.load.archive import load_head
from tracevault.schemas import decode_event
from tracevault.transparency import Ed25519Signer

RUN = "run-long"


def _archive(root: Path, events: int, per_flush: int) -> str:
    url = f"file://{root}"
    writer = LogWriter(open_store(url), Ed25519Signer.generate("test-log"))
    sealed = sealed_run(RUN, events)
    for lo in range(0, events, per_flush):
        writer.add(sealed[lo : lo + per_flush], finishes=lo + per_flush >= events)
        writer.flush()
    return url


def test_the_first_page_reads_two_index_objects_the_last_and_two_bundles(
    tmp_path: Path,
) -> None:
    url = _archive(tmp_path / "archive", 2_000, 400)
    store = open_store(url, create=False)
    indexes = run_index_keys(sorted(i.key for i in store.list(f"runs/{RUN}/")))
    assert len(indexes) == 5  # one per flush of 400
    recording = RecordingStore(store)
    got = load_head(recording, RUN, 500)
    assert got is not None
    head, total = got
    assert total == 2_000
    assert [s.seq for s in head] == list(range(500))
    assert [s.raw for s in head] == [s.raw for s in sealed_run(RUN, 2_000)[:500]]
    log = RunIndex.from_json(store.get(indexes[0]), indexes[0]).log
    # seqs 0..499 are leaves 0..499: bundles 0 and 1 (full by the last flush's size)
    assert recording.keys == {
        indexes[0],
        indexes[1],
        indexes[-1],
        data_key(log, 0, 256),
        data_key(log, 1, 256),
    }


def test_a_run_shorter_than_a_page_is_read_whole(tmp_path: Path) -> None:
    url = _archive(tmp_path / "archive", 300, 100)
    got = first_page(Settings(archive_url=url), RUN, 500)
    assert got is not None
    events, total = got
    assert total == 300 and [e.seq for e in events] == list(range(300))
    assert events[0] == decode_event(sealed_run(RUN, 300)[0].raw)


def test_an_unknown_run_has_no_first_page(tmp_path: Path) -> None:
    url = _archive(tmp_path / "archive", 10, 10)
    assert first_page(Settings(archive_url=url), "no-such-run", 500) is None


def test_a_run_of_segments_reads_its_first_segments_only(tmp_path: Path) -> None:
    """The older layout (``seg-*`` objects): the segments that hold the first page only."""
    store = open_store(f"file://{tmp_path / 'archive'}")
    keys = write_run(store, sealed_run(RUN, 20), per_segment=4)
    recording = RecordingStore(store)
    got = load_head(recording, RUN, 6)
    assert got is not None
    head, total = got
    assert total == 20 and [s.seq for s in head] == list(range(6))
    assert recording.keys == set(keys[:2])
