"""The checkpoint record the sequencer writes into each sealed partition, in the transaction.

Why the leaves travel with the checkpoint: a reader of the sealed topic sees every record
anyone managed to append, not only the sequencer's. The record lists the leaf hashes it adds
to the tree, after the compact tree at their start; both are checked against the *signed*
root, so a reader keeps exactly the records whose leaf hash is listed, in order, and can tell
an injected record from a genuine one without trusting the topic (docs/log.md).

Binary layout (big-endian)::

    "TVCP" | u8 version=1 | u32 note length | note (UTF-8 signed note)
    | u64 start | u8 k | k × 32-byte compact tree hashes at start
    | u32 n | n × 32-byte leaf hashes (leaves start .. start+n-1)

The Kafka record carries header ``tracevault-record: checkpoint`` and key ``\\x00checkpoint``
(never a valid run id key), and is produced to the partition it checkpoints.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tracevault.errors import LogError
from tracevault.transparency._checkpoint import Checkpoint
from tracevault.transparency._merkle import HASH_SIZE, CompactTree
from tracevault.transparency._note import NoteSigner, NoteVerifier, open_note, sign_note

__all__ = [
    "CHECKPOINT_KEY",
    "RECORD_HEADER",
    "RECORD_HEADER_CHECKPOINT",
    "RECORD_HEADER_TREE",
    "TREE_KEY",
    "CheckpointRecord",
    "VerifiedCheckpoint",
    "is_checkpoint_record",
    "is_tree_record",
]

RECORD_HEADER = "tracevault-record"
RECORD_HEADER_CHECKPOINT = b"checkpoint"
CHECKPOINT_KEY = b"\x00checkpoint"
#: The sequencer's compact tree of a partition, in the same partition of ``<prefix>.heads``
#: (value ``CompactTree.to_bytes()``); compaction keeps the latest per partition.
RECORD_HEADER_TREE = b"tree"
TREE_KEY = b"\x00tree"
_MAGIC = b"TVCP"
_VERSION = 1
_HEAD = struct.Struct(">4sBI")
_U64 = struct.Struct(">Q")
_U32 = struct.Struct(">I")


#: Kafka record headers as confluent-kafka gives them (a list of pairs) or takes them.
Headers = Sequence[tuple[str, str | bytes | None]] | Mapping[str, str | bytes | None] | None


def _marked(headers: Headers, kind: bytes) -> bool:
    if not headers:
        return False
    if isinstance(headers, Mapping):
        return headers.get(RECORD_HEADER) == kind
    return any(k == RECORD_HEADER and v == kind for k, v in headers)


def is_checkpoint_record(headers: Headers) -> bool:
    """True when the Kafka headers mark a checkpoint record (not a sealed event)."""
    return _marked(headers, RECORD_HEADER_CHECKPOINT)


def is_tree_record(headers: Headers) -> bool:
    """True when the Kafka headers mark the sequencer's compact tree record in heads."""
    return _marked(headers, RECORD_HEADER_TREE)


@dataclass(frozen=True, slots=True)
class CheckpointRecord:
    note: str
    start: int
    prefix: tuple[bytes, ...]
    leaves: tuple[bytes, ...]

    @classmethod
    def build(
        cls,
        tree_at_start: CompactTree,
        leaves: Sequence[bytes],
        origin: str,
        signer: NoteSigner,
    ) -> tuple[CheckpointRecord, CompactTree]:
        """Sign the checkpoint after appending ``leaves``; returns the record and new tree."""
        tree = tree_at_start.copy()
        tree.extend(leaves)
        body = Checkpoint(origin, tree.size, tree.root()).body()
        note = sign_note(body, [signer])
        rec = cls(note, tree_at_start.size, tuple(tree_at_start.hashes), tuple(leaves))
        return rec, tree

    @property
    def end(self) -> int:
        return self.start + len(self.leaves)

    def encode(self) -> bytes:
        note = self.note.encode()
        return b"".join(
            [
                _HEAD.pack(_MAGIC, _VERSION, len(note)),
                note,
                _U64.pack(self.start),
                bytes([len(self.prefix)]),
                *self.prefix,
                _U32.pack(len(self.leaves)),
                *self.leaves,
            ]
        )

    @classmethod
    def decode(cls, data: bytes) -> CheckpointRecord:
        def need(pos: int, n: int, what: str) -> None:
            if pos + n > len(data):
                raise LogError(f"checkpoint record ends inside its {what}")

        need(0, _HEAD.size, "header")
        magic, version, note_len = _HEAD.unpack_from(data, 0)
        if magic != _MAGIC:
            raise LogError("not a checkpoint record: bad magic")
        if version != _VERSION:
            raise LogError(f"checkpoint record version {version} is not one we read")
        pos = _HEAD.size
        need(pos, note_len, "note")
        try:
            note = data[pos : pos + note_len].decode("utf-8")
        except UnicodeDecodeError:
            raise LogError("checkpoint record's note is not UTF-8") from None
        pos += note_len
        need(pos, 9, "start")
        (start,) = _U64.unpack_from(data, pos)
        k = data[pos + 8]
        pos += 9
        need(pos, k * HASH_SIZE, "compact tree")
        prefix = tuple(data[pos + i * HASH_SIZE : pos + (i + 1) * HASH_SIZE] for i in range(k))
        pos += k * HASH_SIZE
        need(pos, 4, "leaf count")
        (n,) = _U32.unpack_from(data, pos)
        pos += 4
        need(pos, n * HASH_SIZE, "leaf hashes")
        leaves = tuple(data[pos + i * HASH_SIZE : pos + (i + 1) * HASH_SIZE] for i in range(n))
        pos += n * HASH_SIZE
        if pos != len(data):
            raise LogError(f"checkpoint record has {len(data) - pos} trailing bytes")
        return cls(note, start, prefix, leaves)

    def verify(
        self, verifiers: Sequence[NoteVerifier], origin: str | None = None
    ) -> VerifiedCheckpoint:
        """Check the signature, then that the listed leaves grow the tree to the signed root.

        Raises :class:`LogError` naming what failed. ``origin``, when given, must be the one
        signed (a checkpoint of another partition or prefix cannot stand in).
        """
        text, signers = open_note(self.note, verifiers)
        cp = Checkpoint.parse(text)
        if origin is not None and cp.origin != origin:
            raise LogError(f"checkpoint is for log {cp.origin!r}, expected {origin!r}")
        if cp.size != self.end:
            raise LogError(
                f"checkpoint of size {cp.size} does not match its {len(self.leaves)} leaves "
                f"from {self.start}"
            )
        tree = CompactTree(self.start, list(self.prefix))
        tree.extend(self.leaves)
        if tree.root() != cp.root:
            raise LogError(
                f"leaves {self.start}..{self.end - 1} do not grow the tree to the signed root "
                f"of checkpoint {cp.origin}@{cp.size}"
            )
        return VerifiedCheckpoint(cp, self.note, self.start, self.leaves, tree, signers)


@dataclass(frozen=True, slots=True)
class VerifiedCheckpoint:
    """A checkpoint whose signature held and whose leaves reproduce its root."""

    checkpoint: Checkpoint
    note: str
    start: int
    leaves: tuple[bytes, ...]
    tree: CompactTree
    signed_by: list[NoteVerifier]
