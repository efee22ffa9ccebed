"""A run's :class:`RunLogEvidence` from the checkpoint records of its sealed partition.

Why here and not in the replayer: any reader that sees a partition's checkpoint records (the
topic, an archive keeping them) needs the same three steps (docs/log.md, "Verify and
bundles"):

1. Open each checkpoint record (its signature by a trusted key when keys are given, and that
   its listed leaves grow its compact tree to the signed root), and check that they follow
   one another (each starts where the previous ended, on the same compact tree).
2. Place the run's records among the listed leaves, in offset order. A record whose leaf no
   checkpoint lists (another producer injected it, even chain-valid) is named by seq and
   object: it is not in the log.
3. Prove each placed leaf against the last checkpoint, and the earlier checkpoints consistent
   with it, from a node source built from the first record's compact tree and every listed
   leaf since (:func:`compact_source`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from tracevault.errors import LogError
from tracevault.transparency._checkpoint import Checkpoint
from tracevault.transparency._evidence import LeafProofs, RunLogEvidence
from tracevault.transparency._lazyproof import LazyProof
from tracevault.transparency._merkle import (
    CompactTree,
    NodeSource,
    consistency_proof,
    hash_children,
    range_hash,
)
from tracevault.transparency._note import NoteVerifier, open_note, split_note
from tracevault.transparency._record import CheckpointRecord

__all__ = [
    "FoundCheckpoint",
    "RunLeaf",
    "compact_source",
    "fast_inclusion_proof",
    "run_log_evidence",
]


@dataclass(frozen=True, slots=True)
class FoundCheckpoint:
    """A checkpoint record as a reader found it, and where (``topic[p]@offset``, a key)."""

    record: CheckpointRecord
    obj: str


class RunLeaf(NamedTuple):
    """One of the run's records as read: its seq, its leaf hash and where it was.

    A named tuple, not a dataclass: a reader makes one per event of a run.
    """

    seq: int
    leaf: bytes
    obj: str


def compact_positions(size: int) -> list[tuple[int, int]]:
    """``(level, index)`` of each perfect subtree of the compact tree of ``size`` leaves,
    largest first (the order of ``CompactTree.hashes``)."""
    out: list[tuple[int, int]] = []
    lo = 0
    for level in reversed(range(size.bit_length())):
        if size >> level & 1:
            out.append((level, lo >> level))
            lo += 1 << level
    return out


def compact_source(tree: CompactTree, leaves: Sequence[bytes]) -> NodeSource:
    """Perfect-subtree hashes from a compact tree at ``tree.size`` and the leaves after it.

    It answers every node an inclusion proof for a leaf at or after ``tree.size`` needs (a
    left sibling wholly before ``tree.size`` is one of the compact tree's subtrees, one that
    straddles it is combined from them and the leaves), and the consistency proofs between
    trees that extend it. Any other node raises :class:`LogError`.
    """
    start = tree.size
    memo = dict(zip(compact_positions(start), tree.hashes, strict=True))
    end = start + len(leaves)

    def node(level: int, index: int) -> bytes:
        got = memo.get((level, index))
        if got is not None:
            return got
        first = index << level
        last = first + (1 << level)
        if last > end:
            raise LogError(f"no node of leaves {first}..{last - 1}: the log ends at {end}")
        if level == 0:
            if first < start:
                raise LogError(f"leaf {first} lies before the compact tree at {start}")
            return leaves[first - start]
        if last <= start:
            raise LogError(
                f"node of leaves {first}..{last - 1} lies inside the compact tree at {start}"
            )
        got = hash_children(node(level - 1, 2 * index), node(level - 1, 2 * index + 1))
        memo[(level, index)] = got
        return got

    return node


def fast_inclusion_proof(index: int, size: int, node: NodeSource) -> list[bytes]:
    """RFC 6962 ``PATH(index, D[size])`` bottom-up: the same hashes as ``inclusion_proof``.

    Why a second builder: it asks ``node`` for each perfect sibling once instead of walking
    the RFC's recursion, so proving every event of a 100,000-event run stays cheap. Below
    level ``inner`` the siblings are perfect subtrees (but for one right-edge range); above,
    the path runs along the tree's right border and only left siblings appear.
    """
    if not 0 <= index < size:
        raise LogError(f"leaf {index} is not in a tree of size {size}")
    inner = (index ^ (size - 1)).bit_length()
    proof: list[bytes] = []
    for level in range(inner):
        sib = (index >> level) ^ 1
        first = sib << level
        if first + (1 << level) <= size:
            proof.append(node(level, sib))
        else:
            proof.append(range_hash(first, size, node))
    for level in range(inner, size.bit_length()):
        if index >> level & 1:
            proof.append(node(level, (index >> level) ^ 1))
    return proof


def _open(found: FoundCheckpoint, verifiers: Sequence[NoteVerifier], origin: str) -> Checkpoint:
    """L1 on one record: its signature (when keys are given), its origin and size.

    Its root is checked in :class:`_LogBuilder`'s one pass over the listed leaves.
    """
    rec = found.record
    try:
        text = open_note(rec.note, verifiers)[0] if verifiers else split_note(rec.note)[0]
        cp = Checkpoint.parse(text)
        if cp.origin != origin:
            raise LogError(f"it is for log {cp.origin!r}, not {origin!r}")
        if cp.size != rec.end:
            raise LogError(
                f"its size {cp.size} is not its {len(rec.leaves)} leaves from {rec.start}"
            )
        return cp
    except LogError as e:
        raise LogError(
            f"L1 signature: checkpoint record {found.obj}: {e}", checkpoint=found.obj
        ) from None


class _LogBuilder:
    """Appends listed leaves to the compact tree once, keeping every perfect subtree it forms.

    Appending leaf by leaf computes each perfect subtree from the compact tree's start onward
    exactly once; kept, they are the node source of every proof (``node``), so checking each
    record's root and proving the run cost one hash per leaf together.
    """

    def __init__(self, base: CompactTree) -> None:
        self.base = base.size
        self.size = base.size
        self.leaves: list[bytes] = []
        self.memo: dict[tuple[int, int], bytes] = {}
        self.stack: list[bytes] = list(base.hashes)
        self.edges: dict[int, bytes] = {}
        pos = 0
        for level in reversed(range(base.size.bit_length())):
            if base.size >> level & 1:
                self.memo[(level, pos >> level)] = base.hashes[len(self.memo)]
                pos += 1 << level

    def extend(self, leaves: Sequence[bytes]) -> None:
        memo, stack, size = self.memo, self.stack, self.size
        sha, pop, push = hashlib.sha256, stack.pop, stack.append
        for leaf in leaves:
            cur, level = leaf, 0
            while size >> level & 1:
                cur = sha(b"\x01" + pop() + cur).digest()  # hash_children, inlined: per leaf
                level += 1
                memo[(level, size >> level)] = cur
            push(cur)
            size += 1
        self.leaves.extend(leaves)
        self.size = size

    def root(self) -> bytes:
        r = self.stack[-1]
        for h in reversed(self.stack[:-1]):
            r = hash_children(h, r)
        return r

    def node(self, level: int, index: int) -> bytes:
        if level == 0 and index >= self.base:
            return self.leaves[index - self.base]
        got = self.memo.get((level, index))
        if got is None:
            raise LogError(f"no node at level {level}, index {index} from leaf {self.base}")
        return got

    def edge(self, first: int) -> bytes:
        """The hash of leaves ``first .. size-1`` (the tree's incomplete right edge)."""
        got = self.edges.get(first)
        if got is None:
            got = self.edges[first] = range_hash(first, self.size, self.node)
        return got


def run_log_evidence(
    origin: str,
    run_id: str,
    leaves: Sequence[RunLeaf],
    checkpoints: Sequence[FoundCheckpoint],
    verifiers: Sequence[NoteVerifier] = (),
) -> RunLogEvidence:
    """The evidence that places ``leaves`` (in offset order) in ``origin``'s signed log.

    ``checkpoints`` are the records read from the one before the run's first record's
    transaction through the first one after its last record, in offset order. Raises
    :class:`LogError` (L1 a record that does not open, L4 records that do not follow one
    another, L2 a run record no checkpoint lists), naming the record.
    """
    first_obj = leaves[0].obj if leaves else "the partition"
    if not checkpoints:
        raise LogError(
            f"L1 signature: no checkpoint record of log {origin} covers run {run_id} (from "
            f"{first_obj}): it was sealed before the signed log, or its checkpoint is missing",
            run=run_id,
            obj=first_obj,
        )
    opened = [_open(f, verifiers, origin) for f in checkpoints]
    first = checkpoints[0].record
    base = CompactTree(first.start, list(first.prefix))
    log = _LogBuilder(base)
    for found, cp in zip(checkpoints, opened, strict=True):
        rec = found.record
        if rec.start != log.size or list(rec.prefix) != log.stack:
            raise LogError(
                f"L4 consistency: checkpoint record {found.obj} starts at leaf {rec.start} on "
                f"another tree than the previous record ended ({log.size} leaves): a checkpoint "
                "is missing, or the log forked",
                checkpoint=found.obj,
            )
        log.extend(rec.leaves)
        if log.root() != cp.root:
            raise LogError(
                f"L1 signature: checkpoint record {found.obj}: leaves {rec.start}..{rec.end - 1} "
                f"do not grow the tree to the signed root of {cp.origin}@{cp.size}",
                checkpoint=found.obj,
            )
    size = log.size
    last = checkpoints[-1]
    index_of: dict[bytes, int] = {}
    for i, h in enumerate(log.leaves):
        index_of.setdefault(h, base.size + i)
    indexes: list[int] = []
    add = indexes.append
    prev = -1
    for rl in leaves:
        idx = index_of.get(rl.leaf, -1)
        if idx <= prev:
            raise LogError(
                f"L2 inclusion: run {run_id} seq {rl.seq} in {rl.obj} is not in the signed log "
                f"{origin} (no checkpoint up to {last.obj} lists it): a record the sequencer "
                "did not write (injected by another producer)",
                run=run_id,
                seq=rl.seq,
                obj=rl.obj,
                checkpoint=last.obj,
            )
        prev = idx
        add(idx)

    def leaf_proof(index: int) -> LazyProof:
        return LazyProof(index, size, log.node, log.edge)

    proofs = LeafProofs([rl.seq for rl in leaves], indexes, [rl.obj for rl in leaves], leaf_proof)
    # Every record's root was reproduced above from one sequence of leaves, so they are all
    # consistent with one another; the oldest one goes to L4 with its proof, for
    # check_run_log (and a bundle's reader) to check the log did not fork since it.
    others: list[tuple[str, tuple[bytes, ...]]] = []
    if len(checkpoints) > 1 and opened[0].size > base.size:
        proof = consistency_proof(opened[0].size, size, log.node)
        others.append((checkpoints[0].record.note, tuple(proof)))
    return RunLogEvidence(origin, last.record.note, proofs, tuple(others), last.obj)
