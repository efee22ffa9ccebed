"""``file://PATH``: the embedded store, enforcing write-once and retention by itself.

On disk::

    PATH/store.json           {"format": 1, "lock_mode": ...}, fixed when the store is made
    PATH/objects/<key>        the object: mode 0444, mtime = its retain-until
    PATH/objects/runs+/<xx>/<run>+<name>
                              the object of key runs/<run>/<name> (<xx>: a shard of the
                              run); older stores hold it at objects/runs/<run>/<name>,
                              which is still read. <run> is at most 200 bytes
                              (layout.MAX_RUN_SEGMENT), so the name fits 255 bytes
    PATH/holds/<key>          empty marker while the object is under legal hold
    PATH/tmp/                 objects being written where O_TMPFILE is missing (never
                              visible under objects/)

Why this shape:

- An object appears by a link of a fully written, fsynced file, which fails if the name
  exists: a crash leaves either nothing or the whole object, and a second writer can never
  replace a first. Where the kernel has ``O_TMPFILE`` (Linux, ext4/xfs/btrfs/tmpfs) the file
  is made without a name in the object's own directory and given its name by ``linkat``; a
  crash leaves nothing behind, and a put costs one inode and one directory entry instead of
  a named temp file, its link and its unlink (on a VM's ext4 each directory operation is tens
  to hundreds of µs of kernel time, and the archiver writes hundreds of objects a second).
  Elsewhere (without ``/proc``, or without the C path ``_cput.c`` that makes them) it falls
  back to a named temp file in ``tmp/``.
- A run's objects share a shard directory (256 of them) instead of a directory of their own:
  a new directory is a new inode, as costly as the object itself on a VM's ext4, and a
  20-event run writes about one object. Listing ``runs/<run>/`` stays one call: it reads
  the run's shard (and the older layout's ``runs/<run>/`` directory, if there is one).
  ``+`` is not a key character, so a shard name never collides with a key.
- ``put`` is one C call (``_cput.c``) that releases the GIL once: the archiver's flush
  threads call it for every object while its main thread runs Python, and each of the nine
  os calls it makes gave the GIL back and had to win it again from the busy main thread.
- ``put_many`` (a flush's objects) writes each as a nameless file, makes all of them durable
  with one ``syncfs``, then links them and syncs once more for the names: on a VM's ext4 an
  fsync costs about 200 µs of kernel CPU, two per object. ``syncfs`` waits for every dirty
  page of the file system, so on one shared with heavy writers set
  ``archive_file_sync=object`` (an fsync of each object and its name, as ``put`` does).
- The retain-until is the object's **mtime** (as NetApp SnapLock keeps it in the atime), set
  on the temp file before it is fsynced, so the lock is part of the object's own inode: no
  visible object is ever without it, and it costs no second file (two fsyncs per put, not
  four). ``ctime``, which no user call can set, is when the object was written.
- The mtime is metadata: ``touch -d`` moves it. Purge and the retention report therefore
  take retention from the receipts, which state it, and treat an mtime (or a receipt's
  ctime) that disagrees with them as tampering (docs/design.md, "Archive").
- An OS error of a put (a full disk, a quota, a read-only mount) is an ``ArchiveError``
  naming the object (exit 4, docs/design.md "Service boundaries and errors"), never a
  traceback: the object is whole or absent, and a restart once there is room redoes it.
- Permissions do not stop root or the owner: the enforcement is that every tracevault path
  goes through this class. For tamper-proof retention use ``s3://`` with Object Lock in
  COMPLIANCE mode.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import os
import resource
import threading
import time
import uuid
import zlib
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Literal

from tracevault import native
from tracevault.archive._store import (
    LockMode,
    ObjectInfo,
    ObjectVersion,
    check_deletable,
    check_key,
)
from tracevault.errors import ArchiveError, ConfigError, NotFoundError, ServiceUnavailableError

__all__ = ["FileStore"]

log = logging.getLogger(__name__)

_READ_ONLY = 0o444
# a put without the GIL: optional (pyproject.toml), and off under TRACEVAULT_NO_C=1
_cput: ModuleType | None = native.load("tracevault.archive._cput")
_O_TMPFILE = getattr(os, "O_TMPFILE", 0)
# Files a put_many holds open before one syncfs makes them durable: a flush's objects in one
# go where the descriptor limit allows (two syncfs a flush), a share of it where it is low.
_BATCH_FILES = max(16, min(1024, resource.getrlimit(resource.RLIMIT_NOFILE)[0] // 16))
# One batch at a time in the process: the archiver's flush threads (one per partition) made
# batches in the same shard directories at once, and the kernel's locks (the directories',
# the journal's, ext4's orphan list of nameless files) spun: measured on this VM's ext4,
# 500 us of CPU an object with three at once against 100-130 alone, and the bench's window
# went from 1.7-2.4 s to 0.9-1.1 s with this lock.
_BATCH_LOCK = threading.Lock()
_RUNS = "runs+"  # where runs/<run>/<name> objects live (not a key segment: "+")
_SHARDS = 256


def _run_shard(run: str) -> str:
    return f"{zlib.crc32(run.encode()) % _SHARDS:02x}"


def _run_file(run: str, name: str) -> str:
    """Where, under objects/, the file store keeps the object of ``runs/<run>/<name>``."""
    return f"{_RUNS}/{_run_shard(run)}/{run}+{name}"


def _split_run_key(key: str) -> tuple[str, str] | None:
    """``(run, name)`` of a ``runs/<run>/<name>`` key, else None."""
    parts = key.split("/")
    if len(parts) == 3 and parts[0] == "runs":
        return parts[1], parts[2]
    return None


_TMP_MAX_AGE_S = 3600
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _ns(at: datetime) -> int:
    delta = at.astimezone(UTC) - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1_000


def _from_ns(ns: int) -> datetime:
    return datetime.fromtimestamp(ns // 1_000_000_000, tz=UTC).replace(
        microsecond=(ns % 1_000_000_000) // 1_000
    )


def _list_runs(objects: Path, prefix: str) -> list[ObjectInfo]:
    """The sharded run objects whose keys start with ``prefix``: one shard for a prefix
    that names a whole run (``runs/<run>/...``), every shard otherwise."""
    root = objects / _RUNS
    parts = prefix.split("/")
    if len(parts) >= 3:
        shards = [root / _run_shard(parts[1])]
        start = f"{parts[1]}+"
    else:
        shards = [root / d for d in sorted(os.listdir(root))] if root.is_dir() else []
        start = ""
    out: list[ObjectInfo] = []
    for shard in shards:
        try:
            entries = list(os.scandir(shard))
        except FileNotFoundError:
            continue
        for e in entries:
            if not e.name.startswith(start):
                continue
            run, _, name = e.name.partition("+")
            key = f"runs/{run}/{name}"
            if key.startswith(prefix):
                with contextlib.suppress(FileNotFoundError):  # deleted meanwhile
                    out.append(ObjectInfo(key, e.stat().st_size))
    return out


class FileStore:
    """A directory that behaves like a write-once, retention-locked bucket."""

    def __init__(
        self,
        root: str | Path,
        *,
        lock_mode: LockMode = "COMPLIANCE",
        tmp_max_age_s: float = _TMP_MAX_AGE_S,
        sync: Literal["batch", "object"] = "batch",
    ) -> None:
        self.root = Path(root).resolve()
        self._batch = sync == "batch"  # put_many syncs the file system once per batch
        # Whether this store has the older layout's objects/runs/ (a store made before the
        # shards): decided once, here, since only versions from before the shards wrote it
        # and they do not run beside this one; a store without it costs a put no lstat.
        self._legacy_runs = os.path.isdir(self.root / "objects" / "runs")
        self._objects = self.root / "objects"
        self._holds = self.root / "holds"
        self._tmp = self.root / "tmp"
        self._dirs: set[str] = set()  # object directories known to exist (durably)
        self._anon = bool(_O_TMPFILE)  # O_TMPFILE + linkat; off after the first refusal
        try:
            for d in (self._objects, self._holds, self._tmp):
                d.mkdir(parents=True, exist_ok=True)
            self._lock_mode = self._store_meta(lock_mode)
            self._sweep_tmp(tmp_max_age_s)
        except OSError as exc:
            raise ServiceUnavailableError(
                f"archive directory {self.root} cannot be created or written: {exc}; "
                "check the path and its permissions"
            ) from exc

    def _store_meta(self, lock_mode: LockMode) -> LockMode:
        meta = self.root / "store.json"
        if not meta.exists():
            tmp = self._write_tmp(json.dumps({"format": 1, "lock_mode": lock_mode}).encode())
            with contextlib.suppress(FileExistsError):  # another process made it first
                os.link(tmp, meta)
            tmp.unlink()
            _fsync_dir(self.root)
        recorded: LockMode = json.loads(meta.read_bytes())["lock_mode"]
        if recorded != lock_mode:
            log.warning(
                "file store %s was made with lock mode %s; the configured %s does not apply",
                self.root,
                recorded,
                lock_mode,
            )
        return recorded

    def _sweep_tmp(self, max_age_s: float) -> None:
        """Remove temp files a killed writer left (by ctime: their mtime is a retain-until).

        Only files over ``max_age_s`` old (an hour): a live writer in another process may
        own younger ones.
        """
        cutoff = time.time() - max_age_s
        for entry in os.scandir(self._tmp):
            with contextlib.suppress(FileNotFoundError):
                if entry.stat().st_ctime < cutoff:
                    os.unlink(entry.path)

    @property
    def url(self) -> str:
        return f"file://{self.root}"

    @property
    def lock_mode(self) -> LockMode:
        return self._lock_mode

    def _obj(self, key: str) -> Path:
        """Where ``key``'s file is: for a run's key its shard, unless the store's older
        layout holds it (then there)."""
        run_key = _split_run_key(check_key(key))
        if run_key is None:
            return self._objects / key
        run, name = run_key
        path = self._objects / _run_file(run, name)
        if not path.exists():
            legacy = self._objects / key
            if legacy.exists():
                return legacy
        return path

    def path_of(self, key: str) -> Path:
        """The file that holds ``key``'s object (for tools and tests that inspect the disk)."""
        return self._obj(key)

    def _hold(self, key: str) -> Path:
        return self._holds / check_key(key)

    def _write_tmp(self, data: bytes, until: datetime | None = None) -> Path:
        tmp = self._tmp / uuid.uuid4().hex
        with open(tmp, "xb") as f:
            f.write(data)
            f.flush()
            os.fchmod(f.fileno(), _READ_ONLY)
            if until is not None:
                os.utime(f.fileno(), ns=(_ns(until), _ns(until)))
            os.fsync(f.fileno())
        return tmp

    def _place(self, key: str, data: bytes, unsynced: set[str] | None = None) -> str | None:
        """The path ``key`` is written at, its directory made; None if an object of the
        older layout already holds it (the same bytes; different ones raise).

        With ``unsynced``, a directory made here is not synced: the directories whose new
        entries need it are added there (a batch's syncfs makes them durable at once)."""
        run_key = _split_run_key(check_key(key))
        if run_key is None:
            path = f"{self._objects}/{key}"
        else:
            run, name = run_key
            legacy = f"{self._objects}/{key}"
            if self._legacy_runs and os.path.lexists(legacy):  # written before runs had shards
                self._same_or_raise(key, Path(legacy), data)
                return None
            path = f"{self._objects}/{_run_file(run, name)}"
        parent = path.rpartition("/")[0]
        if parent not in self._dirs:
            if unsynced is None:
                self._make_dirs(parent)
            else:
                unsynced.update(self._make_dirs(parent, sync=False))
        return path

    def _unwritable(self, key: str, exc: OSError) -> ArchiveError:
        """An OS error writing ``key`` as the documented archive error (exit 4), naming the
        object: a full disk, a read-only mount or a name the file system refuses must not
        end a service with a traceback. Nothing is lost: a put is whole or absent, and the
        archiver redoes an unfinished flush from its last checkpoint object."""
        hint = {
            errno.ENOSPC: "the file system is full: free or add space, then restart",
            errno.EDQUOT: "the disk quota is used up: raise it, then restart",
            errno.EROFS: "the file system is read-only: remount it read-write, then restart",
            errno.EACCES: "permission denied: check the owner and mode of the archive directory",
            errno.ENAMETOOLONG: "a name is too long for this file system (a bug of the layout)",
        }.get(exc.errno or 0, "check the archive directory and its file system")
        where = f" ({exc.filename})" if exc.filename else ""
        return ArchiveError(
            f"object {key} could not be written to {self.url}{where}: {exc.strerror or exc}; {hint}"
        )

    def put_many(self, items: Sequence[tuple[str, bytes]], *, retain_until: datetime) -> None:
        """``put`` of each item, every one durable on return, synced together. An OS error
        is an ``ArchiveError`` naming the object (``_unwritable``)."""
        key = items[0][0] if items else ""
        try:
            self._put_many(items, retain_until)
        except OSError as exc:
            if exc.filename:  # the C path names the file it failed on: give its key
                key = self._key_of(str(exc.filename), items) or key
            raise self._unwritable(key, exc) from exc

    def _key_of(self, path: str, items: Sequence[tuple[str, bytes]]) -> str | None:
        for key, _ in items:
            with contextlib.suppress(OSError, ArchiveError, ConfigError):
                where = str(self._obj(key))
                if path in (where, where.rpartition("/")[0]):
                    return key
        return None

    def _put_many(self, items: Sequence[tuple[str, bytes]], retain_until: datetime) -> None:
        """``put`` of each item, every one durable on return, synced together.

        A flush of the archiver writes hundreds of objects that only count once its
        checkpoint object is written after them: they need to be durable then, not each on
        its own. With the C path the files are written nameless, one ``syncfs`` makes them
        durable, then they are linked and a last ``syncfs`` makes the names durable
        (``_cput.c``): a crash still leaves a name only on a whole object. Without it (or
        without O_TMPFILE) each item is a ``put``."""
        batching = self._batch and self._anon and _cput is not None
        placed: list[tuple[str, str, bytes]] = []
        unsynced: set[str] = set()  # directories with new entries, synced by the batch
        for key, data in items:
            path = self._place(key, data, unsynced if batching else None)
            if path is not None:
                placed.append((key, path, data))
        got = None
        if batching and placed and _cput is not None:
            batch = [(p.rpartition("/")[0], p.rpartition("/")[2], d) for _, p, d in placed]
            with _BATCH_LOCK:
                got = _cput.put_batch(
                    batch, _READ_ONLY, _ns(retain_until), _O_TMPFILE, _BATCH_FILES
                )
        if got is None:
            for d in sorted(unsynced):
                _fsync_dir(Path(d))
            self._dirs.update(p.rpartition("/")[0] for _, p, _ in placed)
            for key, _path, data in placed:
                self.put(key, data, retain_until=retain_until)
            return
        self._dirs.update(p.rpartition("/")[0] for _, p, _ in placed)  # synced with the batch
        for linked, (key, path, data) in zip(got, placed, strict=True):
            if not linked:
                self._same_or_raise(key, Path(path), data)

    def put(self, key: str, data: bytes, *, retain_until: datetime) -> None:
        try:
            self._put(key, data, retain_until)
        except OSError as exc:
            raise self._unwritable(key, exc) from exc

    def _put(self, key: str, data: bytes, retain_until: datetime) -> None:
        path = self._place(key, data)
        if path is None:
            return
        parent = path.rpartition("/")[0]
        if self._anon and _cput is not None:  # nameless, linked in place (_cput.c)
            got = _cput.put(
                parent, path.rpartition("/")[2], data, _READ_ONLY, _ns(retain_until), _O_TMPFILE
            )
            if got == 1:
                return
            if got == 0:
                self._same_or_raise(key, Path(path), data)
                return
            log.info(
                "file store %s: no O_TMPFILE or /proc/self/fd here; using temp files", self.root
            )
            self._anon = False
        # a named temp file in tmp/, linked (without the C path, or without O_TMPFILE)
        tmp = self._write_tmp(data, retain_until)
        try:
            os.link(tmp, path)
        except FileExistsError:
            self._same_or_raise(key, Path(path), data)
            return
        finally:
            tmp.unlink()
        _fsync_dir(Path(parent))

    def _make_dirs(self, parent: str, *, sync: bool = True) -> list[str]:
        """Make ``parent`` (and its missing ancestors) durably: a new directory's name is an
        entry of its own parent, synced like an object's. With ``sync=False`` nothing is
        synced or remembered: the directories to sync are returned (a batch syncs them)."""
        missing: list[str] = []
        d = parent
        while d != str(self._objects) and not os.path.isdir(d):
            missing.append(d)
            d = d.rpartition("/")[0]
        for m in reversed(missing):
            with contextlib.suppress(FileExistsError):  # another writer made it meanwhile
                os.mkdir(m)
        parents = list(dict.fromkeys(m.rpartition("/")[0] for m in missing))
        if sync:
            for m in parents:
                _fsync_dir(Path(m))
            self._dirs.add(parent)
        return parents

    def _same_or_raise(self, key: str, path: Path, data: bytes) -> None:
        existing = path.read_bytes()
        if existing != data:
            raise ArchiveError(
                f"object {key} already exists in {self.url} with different content "
                f"(sha256 {hashlib.sha256(existing).hexdigest()[:16]}…, {len(existing)} bytes; "
                f"refused {hashlib.sha256(data).hexdigest()[:16]}…, {len(data)} bytes); "
                "archive objects are never overwritten: investigate which writer produced it"
            )

    def get(self, key: str, *, version_id: str | None = None) -> bytes:
        if version_id is not None:
            raise NotFoundError(
                f"object {key} has no version {version_id!r} in {self.url}: a file store keeps "
                "one version per object"
            )
        try:
            return self._obj(key).read_bytes()
        except FileNotFoundError:
            raise NotFoundError(f"object {key} does not exist in {self.url}") from None

    @property
    def keeps_versions(self) -> bool:
        return False  # an object is one file, never replaced (put refuses different bytes)

    def history(self, prefix: str, *, start_after: str = "") -> list[ObjectVersion]:
        """One version per object: a file store never keeps a replaced or deleted one."""
        return [
            ObjectVersion(i.key, None, False, i.size)
            for i in self.list(prefix)
            if i.key > start_after
        ]

    def versions(self, key: str) -> list[ObjectVersion]:
        try:
            size = self._obj(key).stat().st_size
        except FileNotFoundError:
            return []
        return [ObjectVersion(key, None, False, size)]

    def list(self, prefix: str) -> list[ObjectInfo]:
        base = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
        start = self._objects / check_key(base) if base else self._objects
        out: list[ObjectInfo] = []
        for dirpath, dirs, files in os.walk(start):
            rel = Path(dirpath).relative_to(self._objects).as_posix()
            if rel == ".":
                dirs[:] = [d for d in dirs if d != _RUNS]  # read below, as keys
            for name in files:
                key = name if rel == "." else f"{rel}/{name}"
                if key.startswith(prefix):
                    with contextlib.suppress(FileNotFoundError):  # deleted meanwhile
                        out.append(ObjectInfo(key, (Path(dirpath) / name).stat().st_size))
        if prefix.startswith("runs/") or "runs/".startswith(prefix):
            out.extend(_list_runs(self._objects, prefix))
        out.sort(key=lambda i: i.key)
        return out

    def head(self, key: str) -> ObjectInfo:
        try:
            st = self._obj(key).stat()
        except FileNotFoundError:
            raise NotFoundError(f"object {key} does not exist in {self.url}") from None
        return ObjectInfo(
            key,
            st.st_size,
            self._lock_mode,
            _from_ns(st.st_mtime_ns),
            self._hold(key).exists(),
            _from_ns(st.st_ctime_ns),
        )

    def delete(self, key: str, *, now: datetime | None = None) -> None:
        info = self.head(key)
        check_deletable(info, now)
        path = self._obj(key)
        path.unlink()
        _fsync_dir(path.parent)
        log.info("deleted %s from %s", key, self.url)

    def set_legal_hold(self, key: str, on: bool) -> None:
        self.head(key)  # NotFoundError for a missing object
        marker = self._hold(key)
        if on:
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.touch()
        else:
            with contextlib.suppress(FileNotFoundError):
                marker.unlink()
        _fsync_dir(marker.parent)

    def close(self) -> None:
        """Nothing to release: every call opens and closes its own files."""
