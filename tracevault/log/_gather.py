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

from collections.abc import Sequence
from dataclasses import dataclass

from tracevault.errors import LogError
from tracevault.log._checkpoint import Checkpoint
from tracevault.log._evidence import LeafProof, RunLogEvidence
from tracevault.log._merkle import (
    CompactTree,
    NodeSource,
    consistency_proof,
    hash_children,
    range_hash,
)
from tracevault.log._note import NoteVerifier, split_note
from tracevault.log._record import CheckpointRecord

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


@dataclass(frozen=True, slots=True)
class RunLeaf:
    """One of the run's records as read: its seq, its leaf hash and where it was."""

    seq: int
    leaf: bytes
    obj: str


def compact_source(tree: CompactTree, leaves: Sequence[bytes]) -> NodeSource:
    """Perfect-subtree hashes from a compact tree at ``tree.size`` and the leaves after it.

    It answers every node an inclusion proof for a leaf at or after ``tree.size`` needs (a
    left sibling wholly before ``tree.size`` is one of the compact tree's subtrees, one that
    straddles it is combined from them and the leaves), and the consistency proofs between
    trees that extend it. Any other node raises :class:`LogError`.
    """
    start = tree.size
    memo: dict[tuple[int, int], bytes] = {}
    lo = 0
    for level in reversed(range(start.bit_length())):
        if start >> level & 1:
            memo[(level, lo >> level)] = tree.hashes[len(memo)]
            lo += 1 << level
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
    """L1 on one record: its signature (when keys are given), origin, size and root."""
    rec = found.record
    try:
        if verifiers:
            return rec.verify(verifiers, origin).checkpoint
        text, _ = split_note(rec.note)
        cp = Checkpoint.parse(text)
        tree = CompactTree(rec.start, list(rec.prefix))
        tree.extend(rec.leaves)
        if cp.origin != origin or cp.size != rec.end or tree.root() != cp.root:
            raise LogError(f"its leaves do not grow the tree to its root for {origin}")
        return cp
    except LogError as e:
        raise LogError(
            f"L1 signature: checkpoint record {found.obj}: {e}", checkpoint=found.obj
        ) from None


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
    tree = base.copy()
    listed: list[bytes] = []
    for found in checkpoints:
        rec = found.record
        if rec.start != tree.size or list(rec.prefix) != tree.hashes:
            raise LogError(
                f"L4 consistency: checkpoint record {found.obj} starts at leaf {rec.start} on "
                f"another tree than the previous record ended ({tree.size} leaves): a checkpoint "
                "is missing, or the log forked",
                checkpoint=found.obj,
            )
        tree.extend(rec.leaves)
        listed.extend(rec.leaves)
    size = tree.size
    last = checkpoints[-1]
    index_of: dict[bytes, int] = {}
    for i, h in enumerate(listed):
        index_of.setdefault(h, base.size + i)
    node = compact_source(base, listed)
    proofs: list[LeafProof] = []
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
        proofs.append(LeafProof(rl.seq, idx, tuple(fast_inclusion_proof(idx, size, node)), rl.obj))
    others: list[tuple[str, tuple[bytes, ...]]] = []
    for found, cp in zip(checkpoints[:-1], opened[:-1], strict=True):
        if cp.size > base.size:
            others.append((found.record.note, tuple(consistency_proof(cp.size, size, node))))
    return RunLogEvidence(origin, last.record.note, tuple(proofs), tuple(others), last.obj)
