"""Runs finished within the horizon, in a few bytes each (docs/fleet.md).

A finished run needs only enough to treat a resend: its fingerprint (to know it), its sealed
offsets (to read its hashes back and drop an exact duplicate) and its last seq (a seq past
it goes to the DLQ). That is 36 bytes in sorted numpy columns, against about 1.4 KB for the
run object an open run keeps. New entries collect in a small dict and are merged into the
columns in bulk; the dict's size is bounded, so its cost is constant, not per run.

Expiry is per chunk (all runs of one partition that finished in one transaction share a
chunk and its time): a chunk past the horizon is dropped from memory and its heads key is
tombstoned, so compaction removes it from the topic too.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from tracevault.heads import FinishedChunk

__all__ = ["FinishedRuns", "Known"]

_MERGE_AT = 8192
_I64 = np.int64
_I32 = np.int32


@dataclass(frozen=True, slots=True)
class Known:
    """What is remembered of one finished run."""

    first_offset: int
    last_offset: int
    last_seq: int


@dataclass(slots=True)
class _Chunk:
    key: bytes
    partition: int
    finished_at: int


class FinishedRuns:
    def __init__(self) -> None:
        self._fp: npt.NDArray[np.int64] = np.empty(0, _I64)
        self._first: npt.NDArray[np.int64] = np.empty(0, _I64)
        self._last: npt.NDArray[np.int64] = np.empty(0, _I64)
        self._seq: npt.NDArray[np.int64] = np.empty(0, _I64)
        self._chunk: npt.NDArray[np.int32] = np.empty(0, _I32)
        # fingerprint -> (first, last, last seq, chunk id); merged into the columns in bulk
        self._recent: dict[int, tuple[int, int, int, int]] = {}
        self._chunks: dict[int, _Chunk] = {}
        self._next_chunk = 0
        self._pending: list[tuple[FinishedChunk, int]] = []  # restored, not yet merged

    # -- adding --------------------------------------------------------------------------

    def new_chunk(self, key: bytes, partition: int, finished_at: int) -> int:
        cid = self._next_chunk
        self._next_chunk += 1
        self._chunks[cid] = _Chunk(key, partition, finished_at)
        return cid

    def add(self, fp: int, known: Known, chunk: int) -> None:
        self._recent[fp] = (known.first_offset, known.last_offset, known.last_seq, chunk)
        if len(self._recent) >= _MERGE_AT:
            self._merge()

    def add_chunk(self, key: bytes, partition: int, chunk: FinishedChunk) -> None:
        """A chunk read back from the heads topic at restore; merged once by :meth:`seal`."""
        cid = self.new_chunk(key, partition, chunk.finished_at)
        self._pending.append((chunk, cid))

    def seal(self) -> None:
        """Merge everything added so far into the sorted columns (after a restore)."""
        self._merge()

    def _merge(self) -> None:
        fps = [self._fp]
        firsts = [self._first]
        lasts = [self._last]
        seqs = [self._seq]
        chunks = [self._chunk]
        for ch, cid in self._pending:
            fps.append(np.frombuffer(ch.fingerprints, _I64))
            firsts.append(np.frombuffer(ch.first_offsets, _I64))
            lasts.append(np.frombuffer(ch.last_offsets, _I64))
            seqs.append(np.frombuffer(ch.last_seqs, _I64))
            chunks.append(np.full(len(ch), cid, _I32))
        self._pending.clear()
        if self._recent:
            items = self._recent
            fps.append(np.fromiter(items.keys(), _I64, len(items)))
            vals = np.array(list(items.values()), _I64).reshape(-1, 4)
            firsts.append(vals[:, 0].copy())
            lasts.append(vals[:, 1].copy())
            seqs.append(vals[:, 2].copy())
            chunks.append(vals[:, 3].astype(_I32))
            self._recent = {}
        if len(fps) == 1:
            return
        fp = np.concatenate(fps)
        order = np.argsort(fp, kind="stable")
        self._fp = fp[order]
        self._first = np.concatenate(firsts)[order]
        self._last = np.concatenate(lasts)[order]
        self._seq = np.concatenate(seqs)[order]
        self._chunk = np.concatenate(chunks)[order]

    # -- looking up --------------------------------------------------------------------------

    def get(self, fp: int) -> Known | None:
        got = self._recent.get(fp)
        if got is not None:
            return Known(got[0], got[1], got[2])
        if self._pending:
            self._merge()
        col = self._fp
        i = int(np.searchsorted(col, fp))
        # the newest entry of a fingerprint wins: a resend can only follow the last chain
        while i + 1 < len(col) and col[i + 1] == fp:
            i += 1
        if i < len(col) and col[i] == fp:
            return Known(int(self._first[i]), int(self._last[i]), int(self._seq[i]))
        return None

    def __len__(self) -> int:
        return int(len(self._fp) + len(self._recent) + sum(len(c) for c, _ in self._pending))

    @property
    def nbytes(self) -> int:
        """Bytes held: the columns (36 a run) and the recent dict (bounded, ~200 an entry)."""
        cols = (self._fp, self._first, self._last, self._seq, self._chunk)
        recent = sys.getsizeof(self._recent) + sum(
            sys.getsizeof(v) + sum(sys.getsizeof(x) for x in v) + sys.getsizeof(k)
            for k, v in self._recent.items()
        )
        pending = sum(c.fingerprints.itemsize * len(c) * 4 for c, _ in self._pending)
        return int(sum(c.nbytes for c in cols)) + (recent if self._recent else 0) + pending

    # -- forgetting --------------------------------------------------------------------------

    def expire(self, cutoff_us: int) -> list[tuple[bytes, int]]:
        """Forget chunks that finished before ``cutoff_us``; their (key, partition) to delete."""
        old = [cid for cid, c in self._chunks.items() if c.finished_at < cutoff_us]
        return self._forget(old)

    def drop_partitions(self, partitions: Iterable[int]) -> None:
        gone = set(partitions)
        self._forget([cid for cid, c in self._chunks.items() if c.partition in gone])

    def clear(self) -> None:
        self.__init__()  # type: ignore[misc]

    def _forget(self, cids: list[int]) -> list[tuple[bytes, int]]:
        if not cids:
            return []
        self._merge()
        out = [(self._chunks[c].key, self._chunks[c].partition) for c in cids]
        for c in cids:
            del self._chunks[c]
        keep = ~np.isin(self._chunk, np.array(cids, _I32))
        self._fp = self._fp[keep]
        self._first = self._first[keep]
        self._last = self._last[keep]
        self._seq = self._seq[keep]
        self._chunk = self._chunk[keep]
        return out
