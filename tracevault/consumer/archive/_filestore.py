"""``file://PATH``: the embedded store, enforcing write-once and retention by itself.

On disk::

    PATH/objects/<key>        the object, mode 0444 once written
    PATH/locks/<key>.json     {"lock_mode", "retain_until", "sha256"}, mode 0444
    PATH/holds/<key>          empty marker while the object is under legal hold
    PATH/tmp/                 objects being written (never visible under objects/)

Why this shape: an object appears by ``os.link`` of a fully written, fsynced temp file, which
fails if the name exists, so a crash leaves either nothing or the whole object and a second
writer can never replace a first. The lock is written (atomically, ``os.replace``) *before*
the object appears, so no visible object is ever without its retain-until. The files are
read-only, but file permissions do not stop root or the owner: the real enforcement is that
every tracevault path goes through this class. For tamper-proof retention use ``s3://`` with
Object Lock in COMPLIANCE mode.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import uuid
from datetime import UTC, datetime
from pathlib import Path

from tracevault.consumer.archive._store import (
    LockMode,
    ObjectInfo,
    check_deletable,
    check_key,
)
from tracevault.errors import ArchiveError, NotFoundError, ServiceUnavailableError

__all__ = ["FileStore"]

log = logging.getLogger(__name__)

_READ_ONLY = 0o444


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class FileStore:
    """A directory that behaves like a write-once, retention-locked bucket."""

    def __init__(self, root: str | Path, *, lock_mode: LockMode = "COMPLIANCE") -> None:
        self.root = Path(root).resolve()
        self._lock_mode: LockMode = lock_mode
        self._objects = self.root / "objects"
        self._locks = self.root / "locks"
        self._holds = self.root / "holds"
        self._tmp = self.root / "tmp"
        try:
            for d in (self._objects, self._locks, self._holds, self._tmp):
                d.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ServiceUnavailableError(
                f"archive directory {self.root} cannot be created or written: {exc}; "
                "check the path and its permissions"
            ) from exc

    @property
    def url(self) -> str:
        return f"file://{self.root}"

    @property
    def lock_mode(self) -> LockMode:
        return self._lock_mode

    def _obj(self, key: str) -> Path:
        return self._objects / check_key(key)

    def _lock(self, key: str) -> Path:
        return self._locks / (check_key(key) + ".json")

    def _hold(self, key: str) -> Path:
        return self._holds / check_key(key)

    def _write_tmp(self, data: bytes) -> Path:
        tmp = self._tmp / uuid.uuid4().hex
        with open(tmp, "xb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, _READ_ONLY)
        return tmp

    def put(self, key: str, data: bytes, *, retain_until: datetime) -> None:
        path = self._obj(key)
        if path.exists():
            self._same_or_raise(key, path, data)
            return
        digest = hashlib.sha256(data).hexdigest()
        lock = {
            "lock_mode": self._lock_mode,
            "retain_until": retain_until.isoformat(),
            "sha256": digest,
        }
        lock_path = self._lock(key)
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        # A lock left by a crash before its object appeared protects nothing: replace it.
        tmp_lock = self._write_tmp(json.dumps(lock, sort_keys=True).encode())
        os.replace(tmp_lock, lock_path)
        _fsync_dir(lock_path.parent)
        tmp = self._write_tmp(data)
        try:
            os.link(tmp, path)
        except FileExistsError:
            self._same_or_raise(key, path, data)
            return
        finally:
            tmp.unlink()
        _fsync_dir(path.parent)

    def _same_or_raise(self, key: str, path: Path, data: bytes) -> None:
        existing = path.read_bytes()
        if existing != data:
            raise ArchiveError(
                f"object {key} already exists in {self.url} with different content "
                f"(sha256 {hashlib.sha256(existing).hexdigest()[:16]}…, {len(existing)} bytes; "
                f"refused {hashlib.sha256(data).hexdigest()[:16]}…, {len(data)} bytes); "
                "archive objects are never overwritten: investigate which writer produced it"
            )

    def get(self, key: str) -> bytes:
        try:
            return self._obj(key).read_bytes()
        except FileNotFoundError:
            raise NotFoundError(f"object {key} does not exist in {self.url}") from None

    def list(self, prefix: str) -> list[ObjectInfo]:
        base = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
        start = self._objects / base if base else self._objects
        if base:
            check_key(base)
        out: list[ObjectInfo] = []
        for dirpath, _dirs, files in os.walk(start):
            rel = Path(dirpath).relative_to(self._objects).as_posix()
            for name in files:
                key = name if rel == "." else f"{rel}/{name}"
                if key.startswith(prefix):
                    with contextlib.suppress(FileNotFoundError):  # deleted meanwhile
                        out.append(ObjectInfo(key, (Path(dirpath) / name).stat().st_size))
        out.sort(key=lambda i: i.key)
        return out

    def head(self, key: str) -> ObjectInfo:
        try:
            st = self._obj(key).stat()
        except FileNotFoundError:
            raise NotFoundError(f"object {key} does not exist in {self.url}") from None
        try:
            lock = json.loads(self._lock(key).read_bytes())
            mode: str | None = lock["lock_mode"]
            until: datetime | None = datetime.fromisoformat(lock["retain_until"])
        except FileNotFoundError:
            mode, until = None, None
        written = datetime.fromtimestamp(st.st_mtime, tz=UTC)
        return ObjectInfo(key, st.st_size, mode, until, self._hold(key).exists(), written)

    def delete(self, key: str, *, now: datetime | None = None) -> None:
        info = self.head(key)
        check_deletable(info, now)
        self._obj(key).unlink()
        with contextlib.suppress(FileNotFoundError):
            self._lock(key).unlink()
        _fsync_dir(self._obj(key).parent)
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
