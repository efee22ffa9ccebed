"""The local spool: an append-only, durably written log of events Kafka did not take.

Layout of ``spool_dir``::

    <created-ns>-<pid>-<rand>.tvspool          one segment, written by one Publisher
    <created-ns>-<pid>-<rand>.tvspool.cursor   bytes of it already delivered (atomic rename)

A segment starts with ``TVSPOOL1``, a 2-byte topic length and the topic; then records
``[u32 length][u32 crc32][u16 key length][key][value]`` (big-endian; crc over what follows
it). Records are appended in the order the Publisher took them, so a run's events stay in
seq order, and each write is ``fsync``-ed before the events count as spooled.

Ownership: the process that writes a segment holds ``flock(LOCK_EX)`` on it until it has
drained the segment or it exits, so a drainer (a later Publisher, or ``tracevault spool
drain``) only touches segments whose owner is gone, and each record reaches Kafka from one
owner. A segment the writer closes because it is full stays its owner's: the owner's backlog
holds the lock through a duplicate of the writer's descriptor (:meth:`SpoolWriter.segment`),
and a lock taken on a segment its owner deleted meanwhile is refused
(:meth:`SpoolSegment.try_lock`).

A crash mid-append leaves a torn tail: a last record cut short, or zero bytes a file system
left after a power loss. It was never reported as spooled, so the drainer that takes the
segment over truncates it (:meth:`SpoolSegment.repair_tail`), logs a warning and reports the
bytes cut; ``spool status`` shows it without changing the file.
Damage anywhere else (a crc mismatch with intact records after it, or a whole last record
whose bytes changed) is corruption: readers stop there and leave the file for a person.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import struct
import time
import uuid
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

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
_CHUNK = 1 << 20
#: Longer than any record an append writes (an event is far below Kafka's 1 MB default).
_MAX_RECORD = 16 << 20
#: Records read between two calls of a torn-tail check's ``between`` (a few ms unloaded).
_SERVE_EVERY = 1024


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
    #: the damage runs to the end of the file and is what a crash mid-append leaves
    tail: bool = False


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

    def __init__(self, spool_dir: Path, topic: str, *, announce: bool = True) -> None:
        self.spool_dir = spool_dir
        self.topic = topic
        self._announce = announce
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
        if self._announce:
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
        try:
            while view:
                n = os.write(fd, view)
                view = view[n:]
            os.fsync(fd)
        except OSError:
            # A full disk mid-write: cut the partial record, so a later append does not
            # land behind damage (that would be corruption, not a torn tail).
            with contextlib.suppress(OSError):
                os.ftruncate(fd, self.size)
            raise
        self.size += len(data)

    def segment(self) -> SpoolSegment:
        """The reading side of the segment being written, holding its lock as well.

        The lock is a duplicate of the writer's descriptor, so it outlives :meth:`close`:
        the owner drains a segment it closed because it was full, and no other drainer may
        claim it meanwhile (that sent it twice). Released by the segment's ``remove`` or
        ``unlock``.
        """
        assert self._fd is not None and self.path is not None
        seg = SpoolSegment(self.path, lock_fd=os.dup(self._fd))
        seg.read_header()
        return seg

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

    def __init__(self, path: Path, *, lock_fd: int | None = None) -> None:
        self.path = path
        self.cursor_path = path.with_name(path.name + ".cursor")
        self.topic = ""
        self.header_end = 0
        #: a descriptor holding the segment's flock (``lock_fd``: handed over by its writer)
        self._lock_fd = lock_fd
        self.corruption: SpoolCorruption | None = None

    def try_lock(self) -> bool:
        """Take the segment from an owner that is gone; False while its owner lives.

        Raises ``FileNotFoundError`` when the segment is gone: its owner delivered and
        deleted it, before this opened it or between the open and the lock (then the lock
        is on a deleted file, and taking it would send the segment a second time).
        """
        fd = os.open(self.path, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        if os.fstat(fd).st_nlink == 0:
            os.close(fd)
            raise FileNotFoundError(f"{self.path} was delivered and deleted by its owner")
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

        Reads in chunks, so a batch near the start of a large segment costs only its own
        bytes. Stops at the first torn or corrupt record and remembers it in ``corruption``.
        """
        with self.path.open("rb") as f:
            size = os.fstat(f.fileno()).st_size
            stop = size if end is None else min(end, size)
            f.seek(start)
            data = b""
            base = start  # file offset of data[0]
            pos = 0
            n = 0
            while n < limit and base + pos < stop:
                if pos + _REC.size > len(data) and base + len(data) < stop:
                    data, base, pos = self._more(f, data, base, pos, need=_REC.size, stop=stop)
                if pos + _REC.size > len(data):
                    self._corrupt(base + pos, "torn record header at the end (a crash mid-write)")
                    return
                length, crc = _REC.unpack_from(data, pos)
                need = _REC.size + length
                if pos + need > len(data) and base + len(data) < stop:
                    data, base, pos = self._more(f, data, base, pos, need=need, stop=stop)
                body = data[pos + _REC.size : pos + need]
                if len(body) < length and length > _MAX_RECORD:
                    # No append writes a record this long: a changed length field, not a
                    # crash (cutting here would drop the intact records after it).
                    self._corrupt(base + pos, f"record length {length} is impossible", tail=False)
                    return
                if len(body) < length:
                    if not any(data[pos:]):
                        self._corrupt(base + pos, "zero bytes at the end (a crash mid-write)")
                    else:
                        self._corrupt(base + pos, "torn record at the end (a crash mid-write)")
                    return
                if zlib.crc32(body) != crc or length < _KEYLEN.size:
                    self._corrupt(
                        base + pos,
                        "crc32 mismatch: the bytes were changed on disk",
                        tail=self._zero_tail(f, base + pos, size),
                    )
                    return
                (klen,) = _KEYLEN.unpack_from(body)
                pos += need
                n += 1
                yield SpoolRecord(
                    bytes(body[_KEYLEN.size : _KEYLEN.size + klen]),
                    bytes(body[_KEYLEN.size + klen :]),
                    base + pos,
                )

    @staticmethod
    def _more(
        f: BinaryIO, data: bytes, base: int, pos: int, *, need: int, stop: int
    ) -> tuple[bytes, int, int]:
        """Keep ``data[pos:]`` and read on, so at least ``need`` bytes follow ``pos``."""
        rest = data[pos:]
        want = max(need - len(rest), _CHUNK)
        more = f.read(min(want, stop - (base + len(data))))
        return rest + more, base + pos, 0

    @staticmethod
    def _zero_tail(f: BinaryIO, offset: int, size: int) -> bool:
        """Whether everything from ``offset`` to the end of the file is zero bytes."""
        if size - offset > _CHUNK:
            return False
        f.seek(offset)
        return not any(f.read())

    def _corrupt(self, offset: int, reason: str, *, tail: bool | None = None) -> None:
        torn = "crash mid-write" in reason if tail is None else tail
        if tail and "crc32" in reason:
            reason = "zero bytes at the end (a crash mid-write)"
        self.corruption = SpoolCorruption(str(self.path), offset, reason, torn)
        logger.log(
            logging.WARNING if torn else logging.ERROR,
            "spool segment %s: %s at byte %s",
            self.path,
            reason,
            offset,
        )

    def torn_tail(self, between: Callable[[], None] | None = None) -> SpoolCorruption | None:
        """The torn tail after the cursor, if any (reads the segment; changes nothing).

        ``between`` runs every ``_SERVE_EVERY`` records: a Publisher adopting a large
        segment spools its agent's new events meanwhile (docs/design.md, "The spool").
        """
        self.corruption = None
        for i, _ in enumerate(self.records(self.cursor()), 1):
            if between is not None and not i % _SERVE_EVERY:
                between()
        return self._tail()

    def _tail(self) -> SpoolCorruption | None:
        found = self.corruption
        return found if found is not None and found.tail else None

    def repair_tail(self, between: Callable[[], None] | None = None) -> int:
        """Truncate a torn tail left by a writer that died mid-append; the bytes cut.

        Call only while holding the segment's lock (its writer is gone). The cut bytes were
        never reported as spooled; anything else wrong with the segment is left as it is.
        ``between`` is :meth:`torn_tail`'s.
        """
        torn = self.torn_tail(between)
        if torn is None:
            return 0
        size = self.path.stat().st_size
        fd = os.open(self.path, os.O_WRONLY)
        try:
            os.ftruncate(fd, torn.offset)
            os.fsync(fd)
        finally:
            os.close(fd)
        self.corruption = None
        cut = size - torn.offset
        logger.warning(
            "spool segment %s: cut a torn tail of %s bytes at byte %s (%s); the records "
            "before it are delivered",
            self.path,
            cut,
            torn.offset,
            torn.reason,
        )
        return cut


def list_segments(spool_dir: Path) -> list[SpoolSegment]:
    """Segments of ``spool_dir``, oldest first (names start with the creation time)."""
    if not spool_dir.is_dir():
        return []
    return [SpoolSegment(p) for p in sorted(spool_dir.glob(f"*{SUFFIX}"))]
