"""file:// specifics: read-only files, locks written before objects, crash leftovers ignored."""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Literal

import pytest

from tests.services.archiver.sealed_factory import LogWriter, sealed_run
from tracevault.archive import _filestore, open_store
from tracevault.archive._filestore import FileStore
from tracevault.config import Settings
from tracevault.errors import ArchiveError, ConfigError
from tracevault.transparency import Ed25519Signer


def test_objects_are_read_only_files_whose_mtime_is_the_retain_until(
    future: datetime, tmp_path: Path
) -> None:
    store = open_store(f"file://{tmp_path}", Settings())
    store.put("runs/r/seg", b"data", retain_until=future)
    obj = FileStore(tmp_path).path_of("runs/r/seg")
    assert obj.read_bytes() == b"data"
    assert stat.S_IMODE(obj.stat().st_mode) == 0o444
    assert obj.stat().st_mtime_ns // 1000 == int(future.timestamp() * 1_000_000)
    assert json.loads((tmp_path / "store.json").read_bytes())["lock_mode"] == "COMPLIANCE"


def test_the_lock_mode_is_fixed_when_the_store_is_made(future: datetime, tmp_path: Path) -> None:
    open_store(f"file://{tmp_path}", Settings(lock_mode="GOVERNANCE"))
    store = open_store(f"file://{tmp_path}", Settings())
    store.put("k", b"v", retain_until=future)
    assert store.head("k").lock_mode == "GOVERNANCE"


def test_leftovers_of_a_crashed_put_are_invisible_and_harmless(
    future: datetime, tmp_path: Path
) -> None:
    store = open_store(f"file://{tmp_path}", Settings())
    (tmp_path / "tmp" / "deadbeef").write_bytes(b"half an object a SIGKILL left")
    assert store.list("") == []
    store.put("runs/r/seg", b"whole", retain_until=future)
    assert store.head("runs/r/seg").retain_until == future


@pytest.mark.parametrize("url", ["ftp://x/y", "file://", "s3:///nobucket"])
def test_unusable_urls_are_refused(url: str) -> None:
    with pytest.raises(ConfigError, match="archive URL"):
        open_store(url, Settings())


def test_old_temp_files_are_swept_when_the_store_opens(tmp_path: Path) -> None:
    open_store(f"file://{tmp_path}", Settings())
    left = tmp_path / "tmp" / "left-by-a-sigkill"
    left.write_bytes(b"half an object")
    open_store(f"file://{tmp_path}", Settings())  # under an hour old: maybe a live writer's
    assert left.exists()
    FileStore(tmp_path, tmp_max_age_s=0)
    assert not left.exists()


def test_a_deleted_key_can_be_written_again(tmp_path: Path) -> None:
    # file:// only: on S3 the server's own clock keeps a fresh lock, so no test can delete.
    store = open_store(f"file://{tmp_path}", Settings())
    until = datetime.now(UTC) + timedelta(days=183)
    store.put("k/x", b"old", retain_until=until)
    store.delete("k/x", now=until)
    store.put("k/x", b"new", retain_until=until)
    assert store.get("k/x") == b"new"


def test_objects_are_made_nameless_and_linked_without_a_temp_file(
    future: datetime, tmp_path: Path
) -> None:
    # O_TMPFILE + linkat: one inode and one name per object, no tmp/ entry to make and
    # remove (on main, a put with tmp/ gone fails: it writes a named temp file there first)
    store = FileStore(tmp_path)
    (tmp_path / "tmp").rmdir()
    store.put("runs/r/log-0-1.json", b"index", retain_until=future)
    store.put("runs/r/log-0-1.json", b"index", retain_until=future)  # a flush redone
    with pytest.raises(ArchiveError, match="already exists"):
        store.put("runs/r/log-0-1.json", b"other", retain_until=future)
    obj = store.path_of("runs/r/log-0-1.json")
    assert obj.read_bytes() == b"index"
    assert stat.S_IMODE(obj.stat().st_mode) == 0o444
    assert store.head("runs/r/log-0-1.json").retain_until == future
    assert obj.stat().st_nlink == 1


def test_without_o_tmpfile_objects_go_through_a_named_temp_file(
    future: datetime, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a flag the kernel refuses, as a kernel or filesystem without O_TMPFILE does
    monkeypatch.setattr(_filestore, "_O_TMPFILE", os.O_DIRECTORY)
    store = FileStore(tmp_path)
    store.put("runs/r/a", b"whole", retain_until=future)
    assert not store._anon
    store.put("runs/r/b", b"whole too", retain_until=future)
    assert (store.get("runs/r/a"), store.get("runs/r/b")) == (b"whole", b"whole too")
    assert store.head("runs/r/b").retain_until == future
    assert list((tmp_path / "tmp").iterdir()) == []


def test_runs_share_shard_directories_instead_of_one_each(future: datetime, tmp_path: Path) -> None:
    # a new directory is a new inode: as dear as the object on a VM's ext4 (docs/log.md)
    store = FileStore(tmp_path)
    for r in range(300):
        store.put(f"runs/run-{r}/log-0-000000000001.json", b"%d" % r, retain_until=future)
    assert not (tmp_path / "objects" / "runs").exists()
    dirs = [p for p in (tmp_path / "objects").rglob("*") if p.is_dir()]
    assert len(dirs) <= 1 + 256  # runs+/ and its shards: 300 runs, no directory each
    assert not any(d.name.startswith("run-") for d in dirs)
    assert [i.key for i in store.list("runs/run-7/")] == ["runs/run-7/log-0-000000000001.json"]
    assert len(store.list("runs/")) == len(store.list("")) == 300
    assert [i.key for i in store.list("runs/run-1")] == sorted(
        f"runs/run-{r}/log-0-000000000001.json" for r in (1, *range(10, 20), *range(100, 200))
    )
    assert store.get("runs/run-7/log-0-000000000001.json") == b"7"


def test_a_store_in_the_older_layout_still_reads_and_refuses_overwrites(
    future: datetime, tmp_path: Path
) -> None:
    # objects/runs/<run>/<name>, as stores made before the shards hold them (the store
    # notices that layout when it is opened: only versions before the shards wrote it)
    old = tmp_path / "objects" / "runs" / "old"
    old.mkdir(parents=True)
    (old / "seg-1.avro").write_bytes(b"legacy")
    os.chmod(old / "seg-1.avro", 0o444)
    ts = future.timestamp()
    os.utime(old / "seg-1.avro", (ts, ts))
    store = FileStore(tmp_path)
    store.put("runs/old/log-0-000000000009.json", b"new", retain_until=future)
    store.put("runs/old/seg-1.avro", b"legacy", retain_until=future)  # same bytes: a no-op
    with pytest.raises(ArchiveError, match="already exists"):
        store.put("runs/old/seg-1.avro", b"forged", retain_until=future)
    assert [i.key for i in store.list("runs/old/")] == [
        "runs/old/log-0-000000000009.json",
        "runs/old/seg-1.avro",
    ]
    assert store.get("runs/old/seg-1.avro") == b"legacy"
    assert store.path_of("runs/old/seg-1.avro") == old / "seg-1.avro"
    assert abs(store.head("runs/old/seg-1.avro").retain_until - future) < timedelta(seconds=1)
    assert [i.key for i in store.list("")] == [i.key for i in store.list("runs/old/")]


def _batch(n: int, tag: bytes = b"") -> list[tuple[str, bytes]]:
    """What a flush writes: run index objects in many shards, and log objects in one dir."""
    items = [(f"runs/run-{r}/log-0-000000000300.json", b"index %d" % r + tag) for r in range(n)]
    items += [(f"log/p/0/tile/0/{i:03d}", b"tile %d" % i + tag) for i in range(n // 10)]
    return items


@pytest.mark.parametrize("chunk", [16, _filestore._BATCH_FILES])
def test_a_flush_of_objects_is_put_together_each_whole_locked_and_read_only(
    future: datetime, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    # in chunks of open files (one syncfs each) or all at once, across many directories
    monkeypatch.setattr(_filestore, "_BATCH_FILES", chunk)
    store = FileStore(tmp_path)
    items = _batch(300)
    store.put_many(items, retain_until=future)
    for key, data in items:
        assert store.get(key) == data
        obj = store.path_of(key)
        assert stat.S_IMODE(obj.stat().st_mode) == 0o444
        assert obj.stat().st_nlink == 1
        assert store.head(key).retain_until == future
    assert len(store.list("runs/")) == 300
    assert list((tmp_path / "tmp").iterdir()) == []
    store.put_many(items, retain_until=future)  # a flush redone after a crash: no-ops
    changed = [*items[:5], (items[5][0], b"forged"), *items[6:]]
    with pytest.raises(ArchiveError, match=re.escape(f"{items[5][0]} already exists")):
        store.put_many(changed, retain_until=future)
    assert store.get(items[5][0]) == items[5][1]


def test_a_batch_over_an_older_layout_object_keeps_it(future: datetime, tmp_path: Path) -> None:
    old = tmp_path / "objects" / "runs" / "old"
    old.mkdir(parents=True)
    (old / "log-0-1.json").write_bytes(b"legacy")
    store = FileStore(tmp_path)
    store.put_many(
        [("runs/old/log-0-1.json", b"legacy"), ("runs/new/log-0-1.json", b"new")],
        retain_until=future,
    )
    assert [i.key for i in store.list("runs/")] == [
        "runs/new/log-0-1.json",
        "runs/old/log-0-1.json",
    ]
    with pytest.raises(ArchiveError, match=r"runs/old/log-0-1\.json already exists"):
        store.put_many([("runs/old/log-0-1.json", b"forged")], retain_until=future)


def test_without_o_tmpfile_a_batch_goes_through_named_temp_files(
    future: datetime, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_filestore, "_O_TMPFILE", os.O_DIRECTORY)  # a flag the kernel refuses
    store = FileStore(tmp_path)
    items = _batch(20)
    store.put_many(items, retain_until=future)
    assert not store._anon
    assert [store.get(k) for k, _ in items] == [d for _, d in items]
    assert store.head(items[0][0]).retain_until == future
    assert list((tmp_path / "tmp").iterdir()) == []


class _Counting(FileStore):
    """The file store, recording how each object reached it."""

    def __init__(self, root: Path, sync: Literal["batch", "object"] = "batch") -> None:
        super().__init__(root, sync=sync)
        self.calls: list[tuple[str, int | str]] = []

    def put_many(self, items: Sequence[tuple[str, bytes]], *, retain_until: datetime) -> None:
        self.calls.append(("many", len(items)))
        super().put_many(items, retain_until=retain_until)

    def put(self, key: str, data: bytes, *, retain_until: datetime) -> None:
        self.calls.append(("one", key))
        super().put(key, data, retain_until=retain_until)


def test_a_flush_puts_its_objects_together_then_its_checkpoint_alone(tmp_path: Path) -> None:
    # the checkpoint object is what makes a flush count (docs/log.md): it is written, on its
    # own, only once every other object of the flush is durable
    store, signer = _Counting(tmp_path), Ed25519Signer.generate("test-batch")
    w = LogWriter(store, signer)
    for r in range(5):
        w.add(sealed_run(f"run-{r}", 3))
    w.flush()
    assert store.calls[0][0] == "many" and store.calls[0][1] > 5  # bundles, tiles, indexes
    assert store.calls[1:] == [("one", store.list("log/pfx/0/checkpoint/")[0].key)]
    assert len(store.calls) == 2
    again = LogWriter(FileStore(tmp_path), signer)  # resumes from what the flush wrote
    assert again.plog.size == 15


def test_object_sync_fsyncs_each_object_of_a_batch_on_its_own(
    future: datetime, tmp_path: Path
) -> None:
    # archive_file_sync=object: no syncfs, which would wait for a shared file system's writers
    assert open_store(f"file://{tmp_path}", Settings(archive_file_sync="object"))._batch is False
    store = _Counting(tmp_path, sync="object")
    items = _batch(12)
    store.put_many(items, retain_until=future)
    assert store.calls == [("many", len(items)), *[("one", k) for k, _ in items]]
    assert [store.get(k) for k, _ in items] == [d for _, d in items]


def test_a_batch_syncs_its_new_directories_with_its_objects_not_one_by_one(
    future: datetime, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a fresh store's first flush makes its shard and log directories: the batch's syncfs
    # makes them durable before any name is linked into them, so none is fsynced alone
    synced: list[Path] = []
    real = _filestore._fsync_dir
    monkeypatch.setattr(_filestore, "_fsync_dir", lambda p: (synced.append(p), real(p))[1])
    store = FileStore(tmp_path)
    synced.clear()
    store.put_many(_batch(40), retain_until=future)
    assert synced == []
    assert len(store.list("runs/")) == 40
    # without the batch (no O_TMPFILE), each new directory's entry is synced before its objects
    monkeypatch.setattr(_filestore, "_O_TMPFILE", os.O_DIRECTORY)
    other = FileStore(tmp_path / "other")
    synced.clear()
    other.put_many(_batch(40), retain_until=future)
    assert Path(tmp_path / "other" / "objects" / "runs+") in synced
    assert len(other.list("runs/")) == 40
