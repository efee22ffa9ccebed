"""The local spool: an append-only, durably written log of events Kafka did not take.

Layout of ``spool_dir``::

    <created-ns>-<pid>-<rand>.tvspool          one segment, written by one Publisher
    <created-ns>-<pid>-<rand>.tvspool.cursor   bytes of it already delivered (atomic rename)

A segment starts with ``TVSPOOL1``, a 2-byte topic length and the topic; then records
``[u32 length][u32 crc32][u16 key length][key][value]`` (big-endian; crc over what follows
it). Records are appended in the order the Publisher took them, so a run's events stay in
seq order, and each write is ``fsync``-ed before the events count as spooled.

Ownership: a writer holds ``flock(LOCK_EX)`` on its segment for as long as it lives, so a
drainer (a later Publisher, or ``tracevault spool drain``) only touches segments whose
writer is gone. A crash mid-append leaves a torn last record: readers stop there (its crc
or length does not check out), and it was never reported as spooled.
"""

from __future__ import annotations

import fcntl
import logging
import os
import struct
import time
import uuid
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tracevault.errors import ConfigError

__all__ = [
    "SUFFIX",
    "SpoolCorruption",
    "SpoolRecord",
    "SpoolSegment",
    "SpoolWriter",
    "list_segments",
]

logger = logging.getLogger(__name__)

SUFFIX = ".tvspool"
_MAGIC = b"TVSPOOL1"
_REC = struct.Struct(">II")
_KEYLEN = struct.Struct(">H")
#: A new segment is started past this size, so drained segments can be deleted early.
SEGMENT_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class SpoolRecord:
    """One spooled Kafka message and the byte offset just past it in its segment."""

    key: bytes
    value: bytes
    end: int


@dataclass(frozen=True, slots=True)
class SpoolCorruption:
    """Bytes in a segment that are not a whole, intact record."""

    path: str
    offset: int
    reason: str


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _ensure_dir(spool_dir: Path) -> None:
    try:
        spool_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(
            f"spool_dir {spool_dir} cannot be created ({exc}); set TRACEVAULT_SPOOL_DIR to a "
            "writable local directory"
        ) from exc


class SpoolWriter:
    """Appends to one segment of ``spool_dir`` for one topic; not thread-safe (one owner)."""

    def __init__(self, spool_dir: Path, topic: str) -> None:
        self.spool_dir = spool_dir
        self.topic = topic
        self._fd: int | None = None
        self.path: Path | None = None
        self.size = 0

    def _open(self) -> int:
        _ensure_dir(self.spool_dir)
        name = f"{time.time_ns():020d}-{os.getpid()}-{uuid.uuid4().hex[:8]}{SUFFIX}"
        path = self.spool_dir / name
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        topic = self.topic.encode("utf-8")
        header = _MAGIC + _KEYLEN.pack(len(topic)) + topic
        os.write(fd, header)
        os.fsync(fd)
        _fsync_dir(self.spool_dir)
        self._fd, self.path, self.size = fd, path, len(header)
        logger.warning("Kafka is not taking events: spooling to %s", path)
        return fd

    def append(self, records: list[tuple[bytes, bytes]]) -> None:
        """Write ``records`` (key, value) and fsync; they are durable when this returns."""
        if not records:
            return
        fd = self._fd if self._fd is not None else self._open()
        chunks = []
        for key, value in records:
            body = _KEYLEN.pack(len(key)) + key + value
            chunks.append(_REC.pack(len(body), zlib.crc32(body)))
            chunks.append(body)
        data = b"".join(chunks)
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
        os.fsync(fd)
        self.size += len(data)

    @property
    def full(self) -> bool:
        return self.size >= SEGMENT_BYTES

    def close(self) -> None:
        """Release the segment (it stays on disk for a drainer) and start a new one next."""
        if self._fd is not None:
            os.close(self._fd)  # also drops the flock
        self._fd, self.path, self.size = None, None, 0


class SpoolSegment:
    """Reading side of one segment: records after the delivered cursor, and the cursor."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.cursor_path = path.with_name(path.name + ".cursor")
        self.topic = ""
        self.header_end = 0
        self._lock_fd: int | None = None
        self.corruption: SpoolCorruption | None = None

    def try_lock(self) -> bool:
        """Take the segment from a writer that is gone; False while its writer lives."""
        fd = os.open(self.path, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self._lock_fd = fd
        return True

    def unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def read_header(self) -> None:
        with self.path.open("rb") as f:
            head = f.read(len(_MAGIC) + _KEYLEN.size)
            if len(head) < len(_MAGIC) + _KEYLEN.size or not head.startswith(_MAGIC):
                raise ValueError(f"{self.path} is not a tracevault spool segment")
            (n,) = _KEYLEN.unpack(head[len(_MAGIC) :])
            topic = f.read(n)
        self.topic = topic.decode("utf-8")
        self.header_end = len(head) + n

    def cursor(self) -> int:
        try:
            return max(int(self.cursor_path.read_text("ascii").strip()), self.header_end)
        except FileNotFoundError:
            return self.header_end

    def commit(self, offset: int) -> None:
        """Durably record that everything before ``offset`` reached Kafka."""
        tmp = self.cursor_path.with_name(self.cursor_path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, str(offset).encode("ascii"))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.cursor_path)
        _fsync_dir(self.path.parent)

    def remove(self) -> None:
        """Delete a fully delivered segment and its cursor."""
        self.path.unlink(missing_ok=True)
        self.cursor_path.unlink(missing_ok=True)
        _fsync_dir(self.path.parent)
        self.unlock()

    def records(
        self, start: int, end: int | None = None, limit: int = 1 << 62
    ) -> Iterator[SpoolRecord]:
        """Intact records from byte ``start`` up to ``end`` (default: end of file).

        Stops at the first torn or corrupt record and remembers it in ``corruption``.
        """
        with self.path.open("rb") as f:
            f.seek(start)
            data = f.read() if end is None else f.read(max(0, end - start))
        pos = 0
        n = 0
        while pos < len(data) and n < limit:
            if pos + _REC.size > len(data):
                self._corrupt(start + pos, "torn record header at the end (a crash mid-write)")
                return
            length, crc = _REC.unpack_from(data, pos)
            body = data[pos + _REC.size : pos + _REC.size + length]
            if len(body) < length:
                self._corrupt(start + pos, "torn record at the end (a crash mid-write)")
                return
            if zlib.crc32(body) != crc or length < _KEYLEN.size:
                self._corrupt(start + pos, "crc32 mismatch: the bytes were changed on disk")
                return
            (klen,) = _KEYLEN.unpack_from(body)
            pos += _REC.size + length
            n += 1
            yield SpoolRecord(
                bytes(body[_KEYLEN.size : _KEYLEN.size + klen]),
                bytes(body[_KEYLEN.size + klen :]),
                start + pos,
            )

    def _corrupt(self, offset: int, reason: str) -> None:
        self.corruption = SpoolCorruption(str(self.path), offset, reason)
        logger.error("spool segment %s: %s at byte %s", self.path, reason, offset)


def list_segments(spool_dir: Path) -> list[SpoolSegment]:
    """Segments of ``spool_dir``, oldest first (names start with the creation time)."""
    if not spool_dir.is_dir():
        return []
    return [SpoolSegment(p) for p in sorted(spool_dir.glob(f"*{SUFFIX}"))]
