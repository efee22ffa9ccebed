"""Two incarnations of one partition's log in one archive never share an object key.

A new cluster (or the sealed topic created again) starts a new log beside the old one
(docs/log.md, "A new cluster is a new log"). Tiles and checkpoints live under the log's own
prefix, but the run indexes and the day batches sit beside the runs and the days: keyed by
partition and tree size alone, the second log's flush at a size the first also reached on
the same day was refused as "already exists with different content", and the archiver
stopped with exit 4 (seen as ``bash dev/demo`` run twice in one directory). The generation
in those keys keeps them apart.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from tests.services.archiver.sealed_factory import LogWriter, sealed_run
from tracevault.archive import runs_on_day
from tracevault.archive._filestore import FileStore
from tracevault.archive.layout import run_prefix
from tracevault.archive.tlog import parse_run_index_key
from tracevault.replayer.load.archive import load_from_archive
from tracevault.replayer.load.verify import verify
from tracevault.transparency import Ed25519Signer

OLD, NEW = "g" + "1" * 16, "g" + "2" * 16


def test_a_second_generation_flushes_at_the_same_sizes_with_the_same_run_id(
    tmp_path: Path,
) -> None:
    store, signer = FileStore(tmp_path / "archive"), Ed25519Signer.generate("test-log")
    first = LogWriter(store, signer, generation=OLD)
    first.add(sealed_run("only-old", 2))
    first.add(sealed_run("same-id", 3))
    first.flush()  # size 5: day batch {only-old, same-id}; same-id at leaves 2..4
    second = LogWriter(store, signer, generation=NEW)
    second.add(sealed_run("same-id", 3))
    second.add(sealed_run("only-new", 2))
    second.flush()  # size 5 again: day batch {same-id, only-new}; same-id at leaves 0..2

    indexes = [i.key for i in store.list(run_prefix("same-id")) if parse_run_index_key(i.key)]
    assert len(indexes) == 2 and all(parse_run_index_key(k) == (0, 5) for k in indexes), indexes
    day = datetime.fromtimestamp(sealed_run("only-old", 1)[0].sealed_at / 1e6, UTC).date()
    assert {"only-old", "same-id", "only-new"} <= set(runs_on_day(store, day))
    for run_id in ("only-old", "only-new"):
        assert verify(load_from_archive(store, run_id), keys=[signer.verifier]).finished
