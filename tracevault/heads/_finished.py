"""Finished runs in the heads topic: one chunk record per partition per transaction.

Why not one heads record per finished run, as for open runs: a restart would read (and
decode) every run finished within the horizon, so restart time and memory would grow with
history (docs/fleet.md). Instead, when a run finishes the sequencer writes, in the same
transaction, a tombstone for the run's own heads key and one chunk for all runs of that
partition that finished in the transaction. A restart reads the chunk's fixed-width columns
with ``array.frombytes`` (no per-run decoding); the full heads stay in the chunk for the
rare reader that needs one run's (``locate_run``). After the horizon the chunk's key is
tombstoned and compaction removes it.

Key ``\\x00fin/<finished_at µs>/<sequencer id>/<n>``; value (big-endian)::

    "TVFN" | u8 version=1 | i64 finished_at µs (newest in the chunk) | u32 n
    | n × i64 fingerprint | n × i64 first offset | n × i64 last offset | n × i64 last seq
    | n × (u32 length ‖ HeadState record)

The fingerprint is the first 8 bytes of SHA-256(run id), as a signed integer.
"""

from __future__ import annotations

import hashlib
import struct
from array import array
from collections.abc import Sequence
from dataclasses import dataclass

from tracevault.errors import SchemaError
from tracevault.heads._record import Head, decode_head, encode_head

__all__ = [
    "FINISHED_KEY_PREFIX",
    "FinishedChunk",
    "fingerprint",
    "is_finished_key",
]

FINISHED_KEY_PREFIX = b"\x00fin/"
_MAGIC = b"TVFN"
_HEAD = struct.Struct(">4sBqI")
_U32 = struct.Struct(">I")
_COLUMNS = 4


def fingerprint(run_id: str) -> int:
    """64 bits of SHA-256(run id): collisions need about 4 billion runs in one horizon."""
    return int.from_bytes(hashlib.sha256(run_id.encode("utf-8")).digest()[:8], "big", signed=True)


def is_finished_key(key: bytes | None) -> bool:
    return key is not None and key.startswith(FINISHED_KEY_PREFIX)


def _column(values: Sequence[int]) -> bytes:
    col = array("q", values)
    if struct.pack("=q", 1) != struct.pack(">q", 1):
        col.byteswap()
    return col.tobytes()


def _read_column(data: bytes, pos: int, n: int) -> array[int]:
    col = array("q")
    col.frombytes(data[pos : pos + 8 * n])
    if struct.pack("=q", 1) != struct.pack(">q", 1):
        col.byteswap()
    return col


@dataclass(frozen=True, slots=True)
class FinishedChunk:
    """The runs of one partition that finished in one transaction."""

    finished_at: int
    fingerprints: array[int]
    first_offsets: array[int]
    last_offsets: array[int]
    last_seqs: array[int]
    _data: bytes = b""
    _heads_at: int = 0

    @staticmethod
    def encode(heads: Sequence[Head], finished_at: int) -> bytes:
        parts = [_HEAD.pack(_MAGIC, 1, finished_at, len(heads))]
        parts.append(_column([fingerprint(h.run_id) for h in heads]))
        parts.append(_column([h.first_offset for h in heads]))
        parts.append(_column([h.last_offset for h in heads]))
        parts.append(_column([h.last_seq for h in heads]))
        for h in heads:
            rec = encode_head(h)
            parts.append(_U32.pack(len(rec)))
            parts.append(rec)
        return b"".join(parts)

    @classmethod
    def decode(
        cls, data: bytes, what: str = "finished chunk", *, keep_heads: bool = True
    ) -> FinishedChunk:
        """Read the columns only; :meth:`head` decodes one run's full head on demand
        (``keep_heads=False``: the sequencer's restore, which needs the columns alone)."""
        if len(data) < _HEAD.size:
            raise SchemaError(f"{what}: shorter than its header")
        magic, version, at, n = _HEAD.unpack_from(data, 0)
        if magic != _MAGIC or version != 1:
            raise SchemaError(f"{what}: not a finished-runs chunk (magic {magic!r} v{version})")
        pos = _HEAD.size
        if len(data) < pos + _COLUMNS * 8 * n:
            raise SchemaError(f"{what}: {n} runs announced, columns cut short")
        fps, firsts, lasts, seqs = (_read_column(data, pos + i * 8 * n, n) for i in range(_COLUMNS))
        if not keep_heads:
            return cls(at, fps, firsts, lasts, seqs)
        return cls(at, fps, firsts, lasts, seqs, _data=data, _heads_at=pos + _COLUMNS * 8 * n)

    def __len__(self) -> int:
        return len(self.fingerprints)

    def head(self, run_id: str) -> Head | None:
        """The full head of ``run_id`` if this chunk holds it (decoded with ``keep_heads``)."""
        fp = fingerprint(run_id)
        pos = self._heads_at
        data = self._data
        for f in self.fingerprints:
            if pos + 4 > len(data):
                raise SchemaError("finished chunk: heads section cut short")
            (size,) = _U32.unpack_from(data, pos)
            if f == fp:
                head = decode_head(data[pos + 4 : pos + 4 + size])
                if head.run_id == run_id:
                    return head
            pos += 4 + size
        return None
