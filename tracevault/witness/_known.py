"""What the witness keeps beside each size it cosigns: the checked record that ended there.

Why a module of its own: the rollback and replay refusals (docs/log.md, "Witness") need the
roots of the sizes just below the witness's and the offset the record was read at, and both
outlive a restart as a ``head/`` object next to the cosigned checkpoint.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass

from tracevault.archive.witness_layout import origin_prefix
from tracevault.transparency import EMPTY_ROOT, CheckpointRecord, CompactTree, hash_children

__all__ = ["Known", "head_key", "prefix_root"]

_KEEP_LEAVES = 1024


def prefix_root(tree: CompactTree, size: int) -> bytes | None:
    """The root of the first ``size`` leaves of ``tree`` when it follows from its compact
    hashes alone (``size`` is a sum of its leading subtrees), else None.

    Why: a compact tree of ``n`` is the roots of the perfect subtrees of ``[0, n)``; a smaller
    tree ending on one of their boundaries is those leading subtrees, so its root is known and
    whether a checkpoint of that size is a prefix of ``n`` is decided without any other node.
    """
    if size == 0:
        return EMPTY_ROOT
    end, count = 0, 0
    for level in reversed(range(tree.size.bit_length())):
        if end == size:
            break
        if tree.size >> level & 1:
            end += 1 << level
            count += 1
    if end != size or count == 0:
        return None
    root = tree.hashes[count - 1]
    for h in reversed(tree.hashes[: count - 1]):
        root = hash_children(h, root)
    return root


@dataclass(frozen=True, slots=True)
class Known:
    """What the witness knows of its latest size beyond (size, root): the checked record
    that ended there (its start tree and leaves) and that record's offset in the partition.

    Why: with the record, the root of every size from its start to its end is known, so a
    smaller checkpoint of another root is shown not to be a prefix; with the offset, a
    record read later in the partition that is smaller was presented after the larger one
    (a rollback, or an old checkpoint replayed). Kept in the store (``head/``), so a
    restarted witness still knows both.
    """

    rec: CheckpointRecord
    offset: int | None

    @classmethod
    def of(cls, rec: CheckpointRecord, offset: int | None) -> Known:
        """Keep at most the last ``_KEEP_LEAVES`` leaves (a poll's joined range can hold
        many): the roots of the sizes just below the witness's are what a rollback shows."""
        if len(rec.leaves) <= _KEEP_LEAVES:
            return cls(rec, offset)
        cut = len(rec.leaves) - _KEEP_LEAVES
        tree = CompactTree(rec.start, list(rec.prefix))
        tree.extend(rec.leaves[:cut])
        kept = CheckpointRecord(rec.note, tree.size, tuple(tree.hashes), rec.leaves[cut:])
        return cls(kept, offset)

    def tree(self) -> CompactTree:
        tree = CompactTree(self.rec.start, list(self.rec.prefix))
        tree.extend(self.rec.leaves)
        return tree

    def root_at(self, size: int) -> bytes | None:
        """The root of the first ``size`` leaves when this record shows it, else None."""
        rec = self.rec
        start = CompactTree(rec.start, list(rec.prefix))
        if size < rec.start:
            return prefix_root(start, size)
        if size > rec.end:
            return None
        start.extend(rec.leaves[: size - rec.start])
        return start.root()

    def to_json(self) -> bytes:
        doc = {"offset": self.offset, "record_b64": base64.b64encode(self.rec.encode()).decode()}
        return json.dumps(doc, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Known:
        doc = json.loads(data)
        offset = doc.get("offset")
        return cls(
            CheckpointRecord.decode(base64.b64decode(doc["record_b64"])),
            offset if isinstance(offset, int) else None,
        )


def head_key(origin: str, size: int) -> str:
    return f"{origin_prefix(origin)}head/{size:020d}"
