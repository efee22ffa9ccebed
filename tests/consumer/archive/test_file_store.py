"""file:// specifics: read-only files, locks written before objects, crash leftovers ignored."""

from __future__ import annotations

import contextlib
import json
import os
import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tracevault.archive import _filestore, open_store
from tracevault.archive._filestore import FileStore
from tracevault.config import Settings
from tracevault.errors import ArchiveError, ConfigError

FUTURE = datetime.now(UTC) + timedelta(days=183)


def test_objects_are_read_only_files_whose_mtime_is_the_retain_until(tmp_path: Path) -> None:
    store = open_store(f"file://{tmp_path}", Settings())
    store.put("runs/r/seg", b"data", retain_until=FUTURE)
    obj = FileStore(tmp_path).path_of("runs/r/seg")
    assert obj.read_bytes() == b"data"
    assert stat.S_IMODE(obj.stat().st_mode) == 0o444
    assert obj.stat().st_mtime_ns // 1000 == int(FUTURE.timestamp() * 1_000_000)
    assert json.loads((tmp_path / "store.json").read_bytes())["lock_mode"] == "COMPLIANCE"


def test_the_lock_mode_is_fixed_when_the_store_is_made(tmp_path: Path) -> None:
    open_store(f"file://{tmp_path}", Settings(lock_mode="GOVERNANCE"))
    store = open_store(f"file://{tmp_path}", Settings())
    store.put("k", b"v", retain_until=FUTURE)
    assert store.head("k").lock_mode == "GOVERNANCE"


def test_leftovers_of_a_crashed_put_are_invisible_and_harmless(tmp_path: Path) -> None:
    store = open_store(f"file://{tmp_path}", Settings())
    (tmp_path / "tmp" / "deadbeef").write_bytes(b"half an object a SIGKILL left")
    assert store.list("") == []
    store.put("runs/r/seg", b"whole", retain_until=FUTURE)
    assert store.head("runs/r/seg").retain_until == FUTURE


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


def test_objects_are_made_nameless_and_linked_without_a_temp_file(tmp_path: Path) -> None:
    # O_TMPFILE + linkat: one inode and one name per object, no tmp/ entry to make and
    # remove (on main, a put with tmp/ gone fails: it writes a named temp file there first)
    store = FileStore(tmp_path)
    (tmp_path / "tmp").rmdir()
    store.put("runs/r/log-0-1.json", b"index", retain_until=FUTURE)
    store.put("runs/r/log-0-1.json", b"index", retain_until=FUTURE)  # a flush redone
    with pytest.raises(ArchiveError, match="already exists"):
        store.put("runs/r/log-0-1.json", b"other", retain_until=FUTURE)
    obj = store.path_of("runs/r/log-0-1.json")
    assert obj.read_bytes() == b"index"
    assert stat.S_IMODE(obj.stat().st_mode) == 0o444
    assert store.head("runs/r/log-0-1.json").retain_until == FUTURE
    assert obj.stat().st_nlink == 1


def test_without_o_tmpfile_objects_go_through_a_named_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a flag the kernel refuses, as a kernel or filesystem without O_TMPFILE does
    monkeypatch.setattr(_filestore, "_O_TMPFILE", os.O_DIRECTORY)
    store = FileStore(tmp_path)
    store.put("runs/r/a", b"whole", retain_until=FUTURE)
    assert not store._anon
    store.put("runs/r/b", b"whole too", retain_until=FUTURE)
    assert (store.get("runs/r/a"), store.get("runs/r/b")) == (b"whole", b"whole too")
    assert store.head("runs/r/b").retain_until == FUTURE
    assert list((tmp_path / "tmp").iterdir()) == []


def test_runs_share_shard_directories_instead_of_one_each(tmp_path: Path) -> None:
    # a new directory is a new inode: as dear as the object on a VM's ext4 (docs/log.md)
    store = FileStore(tmp_path)
    for r in range(300):
        store.put(f"runs/run-{r}/log-0-000000000001.json", b"%d" % r, retain_until=FUTURE)
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


def test_a_store_in_the_older_layout_still_reads_and_refuses_overwrites(tmp_path: Path) -> None:
    # objects/runs/<run>/<name>, as stores made before the shards hold them (the store
    # notices that layout when it is opened: only versions before the shards wrote it)
    old = tmp_path / "objects" / "runs" / "old"
    old.mkdir(parents=True)
    (old / "seg-1.avro").write_bytes(b"legacy")
    os.chmod(old / "seg-1.avro", 0o444)
    ts = FUTURE.timestamp()
    os.utime(old / "seg-1.avro", (ts, ts))
    store = FileStore(tmp_path)
    store.put("runs/old/log-0-000000000009.json", b"new", retain_until=FUTURE)
    store.put("runs/old/seg-1.avro", b"legacy", retain_until=FUTURE)  # same bytes: a no-op
    with pytest.raises(ArchiveError, match="already exists"):
        store.put("runs/old/seg-1.avro", b"forged", retain_until=FUTURE)
    assert [i.key for i in store.list("runs/old/")] == [
        "runs/old/log-0-000000000009.json",
        "runs/old/seg-1.avro",
    ]
    assert store.get("runs/old/seg-1.avro") == b"legacy"
    assert store.path_of("runs/old/seg-1.avro") == old / "seg-1.avro"
    assert abs(store.head("runs/old/seg-1.avro").retain_until - FUTURE) < timedelta(seconds=1)
    assert [i.key for i in store.list("")] == [i.key for i in store.list("runs/old/")]


def _open_fds() -> set[str]:
    """What this process's open fds point at (the fd listing the directory drops out)."""
    out = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(FileNotFoundError):
            out.add(f"{fd} {os.readlink(f'/proc/self/fd/{fd}')}")
    return out


def test_puts_keep_their_directories_open_until_the_store_closes(tmp_path: Path) -> None:
    # a put through a kept directory fd saves opening and closing the directory (two GIL
    # round trips on the archiver's writer threads); durability is the same (mode, mtime)
    before = _open_fds()
    store = FileStore(tmp_path)
    for r in range(40):
        store.put(f"runs/run-{r}/log-0-000000000001.json", b"%d" % r, retain_until=FUTURE)
        store.put(f"log/p/0/tile/0/{r:03d}", b"t%d" % r, retain_until=FUTURE)
    shards = {_filestore._run_shard(f"run-{r}") for r in range(40)}
    kept = _open_fds() - before
    assert len(kept) == len(shards) + 1  # one per directory written to, not one per put
    assert {fd.split(" ", 1)[1] for fd in kept} == {
        *(str(tmp_path / "objects" / "runs+" / s) for s in shards),
        str(tmp_path / "objects" / "log" / "p" / "0" / "tile" / "0"),
    }
    st = os.stat(store.path_of("runs/run-3/log-0-000000000001.json"))
    assert stat.S_IMODE(st.st_mode) == 0o444
    assert store.head("runs/run-3/log-0-000000000001.json").retain_until == FUTURE
    store.close()
    assert _open_fds() - before == set()
    store.put("runs/run-1/log-0-000000000002.json", b"after close", retain_until=FUTURE)
    assert store.get("runs/run-1/log-0-000000000002.json") == b"after close"
    del store  # collected: its kept directory is closed too
    assert _open_fds() - before == set()


def test_a_store_keeps_a_bounded_number_of_directories_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_filestore, "_DIR_FDS", 3)
    before = _open_fds()
    store = FileStore(tmp_path)
    for i in range(10):
        store.put(f"log/p/{i}/checkpoint/1", b"%d" % i, retain_until=FUTURE)
    assert len(_open_fds() - before) == 3
    assert [store.get(f"log/p/{i}/checkpoint/1") for i in range(10)] == [
        b"%d" % i for i in range(10)
    ]
    with pytest.raises(ArchiveError, match="already exists"):
        store.put("log/p/9/checkpoint/1", b"other", retain_until=FUTURE)
    store.close()
