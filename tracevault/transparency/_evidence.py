"""The log checks every verifier runs, whatever the source (topic, archive, bundle).

A source (the sealed topic, the archive's tiles, a bundle's tlog-proofs) only has to gather a
:class:`RunLogEvidence`; :func:`check_run_log` decides, in the order docs/log.md ("Verifying
a run") fixes, and raises a :class:`LogError` naming the run, seq, object and checkpoint of
the first failure. Only public keys are trusted: nothing about the source is.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple, overload

from tracevault.errors import LogError
from tracevault.transparency._checkpoint import Checkpoint
from tracevault.transparency._lazyproof import proof_from
from tracevault.transparency._leaf import leaf_hashes
from tracevault.transparency._merkle import hash_children, root_from_inclusion, verify_consistency
from tracevault.transparency._note import NoteVerifier, open_note

__all__ = [
    "LOG_CHECKS",
    "LeafProof",
    "LeafProofs",
    "RunEvent",
    "RunEvents",
    "RunLogEvidence",
    "check_run_log",
]

LOG_CHECKS = (
    "L1 signature: the checkpoint is signed by a trusted log key (and enough witnesses)",
    "L2 inclusion: every event of the run is a leaf of the signed log",
    "L3 end: the run's RUN_FINISHED is a leaf of the signed log",
    "L4 consistency: every other checkpoint seen is consistent with it (no fork, no rollback)",
)


class RunEvent(NamedTuple):
    """What the log binds of one event: its seq and chain hash (and whether it ends the run).

    A named tuple, not a dataclass: a verifier makes one per event of a run."""

    seq: int
    chain_hash: bytes
    finishes: bool = False


class RunEvents(Sequence[RunEvent]):
    """A run's events as columns: seqs and chain hashes, the last one finishing or not.

    What a verifier that walked the run into columns hands ``check_run_log``: no object per
    event, and the leaves are hashed straight from the columns.
    """

    __slots__ = ("finishes", "hashes", "seqs")

    def __init__(self, seqs: Sequence[int], hashes: Sequence[bytes], finishes: bool) -> None:
        if len(seqs) != len(hashes):
            raise LogError("run events: seqs and chain hashes differ in length")
        self.seqs, self.hashes, self.finishes = seqs, hashes, finishes

    def __len__(self) -> int:
        return len(self.seqs)

    @overload
    def __getitem__(self, i: int) -> RunEvent: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[RunEvent]: ...
    def __getitem__(self, i: int | slice) -> RunEvent | Sequence[RunEvent]:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self.seqs)
        return RunEvent(self.seqs[i], self.hashes[i], self.finishes and i == len(self.seqs) - 1)


@dataclass(frozen=True, slots=True)
class LeafProof:
    """Leaf ``index`` of the partition's log holds ``seq``; ``proof`` is against the checkpoint."""

    seq: int
    index: int
    proof: Sequence[bytes]
    obj: str | None = None


class LeafProofs(Sequence[LeafProof]):
    """A run's leaf proofs as columns (seq, leaf index, object), each proof built on reading.

    Why not a tuple of :class:`LeafProof`: a source places every event of a 100,000-event
    run, and ``check_run_log`` proves consecutive leaves as ranges, reading one proof per
    range; one object per event (and its proof) cost more than the checks themselves.
    ``proof(index)`` gives leaf ``index``'s inclusion proof against the checkpoint;
    ``proof_at(index, size)``, when the source can build one (the archive's tiles), its proof
    in the tree of ``size`` leaves: read only to name the first changed seq after L2 failed.
    """

    __slots__ = ("_proof", "indexes", "objs", "proof_at", "seqs")

    def __init__(
        self,
        seqs: Sequence[int],
        indexes: Sequence[int],
        objs: Sequence[str | None],
        proof: Callable[[int], Sequence[bytes]],
        proof_at: Callable[[int, int], Sequence[bytes]] | None = None,
    ) -> None:
        if not len(seqs) == len(indexes) == len(objs):
            raise LogError("leaf proofs: seqs, indexes and objects differ in length")
        self.seqs, self.indexes, self.objs, self._proof = seqs, indexes, objs, proof
        self.proof_at = proof_at

    def __len__(self) -> int:
        return len(self.seqs)

    @overload
    def __getitem__(self, i: int) -> LeafProof: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[LeafProof]: ...
    def __getitem__(self, i: int | slice) -> LeafProof | Sequence[LeafProof]:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        index = self.indexes[i]
        return LeafProof(self.seqs[i], index, self._proof(index), self.objs[i])


@dataclass(frozen=True, slots=True)
class RunLogEvidence:
    """A signed checkpoint of the run's partition log, and proofs that place the run in it.

    ``others`` are further checkpoints the source saw (older or newer ones, other copies) with
    a consistency proof between each and ``checkpoint`` (from the smaller to the larger).
    """

    origin: str
    checkpoint: str
    leaves: Sequence[LeafProof]  # a tuple, or LeafProofs
    others: tuple[tuple[str, tuple[bytes, ...]], ...] = ()
    checkpoint_obj: str | None = None


def _open(
    note: str, keys: Sequence[NoteVerifier], origin: str, where: str
) -> tuple[Checkpoint, list[NoteVerifier]]:
    try:
        text, good = open_note(note, keys)
        cp = Checkpoint.parse(text)
    except LogError as e:
        raise LogError(f"L1 signature: {where}: {e}", checkpoint=where) from None
    if cp.origin != origin:
        raise LogError(
            f"L1 signature: {where} is for log {cp.origin!r}, not {origin!r}", checkpoint=where
        )
    return cp, good


def _root_or_known(  # noqa: PLR0917 - the RFC's arguments, in its order
    index: int,
    size: int,
    leaf: bytes,
    proof: Sequence[bytes],
    known: dict[tuple[int, int], bytes],
    start: int = 0,
) -> tuple[bytes | None, list[tuple[tuple[int, int], bytes]]]:
    """RFC 9162 2.1.3.2 as ``root_from_inclusion``, stopping early at a node already proven.

    ``known`` maps a node's position in the tree of ``size`` leaves (levels climbed, index at
    that level) to its hash, for every node on a path that reached the signed root. Meeting
    one with the same hash proves this leaf too (the node is in the signed tree, and the
    leaf's path reaches it), so None is returned and the rest of the proof is not read:
    about one hash per event of a run instead of one per level. Otherwise the root is
    returned. Either way with the path, which the caller adds to ``known`` once proven.

    With ``start`` > 0, ``leaf`` is the hash of the perfect subtree of ``2**start`` leaves
    from ``index`` (aligned), and the proof is read from its element ``start``: the first
    ``start`` steps of the leaf's own climb would have built exactly that subtree.
    """
    if not 0 <= index < size:
        raise LogError(f"leaf {index} is not in a tree of size {size}")
    fn, sn, level = index >> start, (size - 1) >> start, start
    r = leaf
    path: list[tuple[tuple[int, int], bytes]] = []
    for p in proof_from(proof, start):
        if sn == 0:
            raise LogError(f"inclusion proof for leaf {index} of {size} is too long")
        if fn & 1 or fn == sn:
            r = hash_children(p, r)
            if not fn & 1:
                while not fn & 1 and fn != 0:
                    fn >>= 1
                    sn >>= 1
                    level += 1
        else:
            r = hash_children(r, p)
        fn >>= 1
        sn >>= 1
        level += 1
        if known.get((level, fn)) == r:
            return None, path
        path.append(((level, fn), r))
    if sn != 0:
        raise LogError(f"inclusion proof for leaf {index} of {size} is too short")
    return r, path


def _subtree(leaves: Sequence[bytes]) -> bytes:
    """The root of a perfect subtree over ``leaves`` (a power of two of them)."""
    level = list(leaves)
    sha = hashlib.sha256
    while len(level) > 1:
        level = [sha(b"\x01" + level[k] + level[k + 1]).digest() for k in range(0, len(level), 2)]
    return level[0]


def _check_inclusion(  # noqa: PLR0917 - private, one call site
    run_id: str,
    events: Sequence[RunEvent],
    evidence: RunLogEvidence,
    cp: Checkpoint,
    where: str,
    leaves: Sequence[bytes] | None,
    older: Callable[[], list[Checkpoint]] = list,
) -> None:
    """L2: every event's leaf reaches the signed root.

    Why not one proof per event: the events of a run sit in runs of consecutive leaves (one
    per transaction, or the whole run), and a range of leaves is proven by hashing it into
    its perfect subtrees and climbing from each with the proof of its first leaf, so only a
    few proofs per range are read. An event outside such a range, or a subtree that does
    not reach the root, is checked leaf by leaf, so the failure names the exact seq.
    """
    got = evidence.leaves
    if isinstance(got, LeafProofs):
        seqs, indexes = list(got.seqs), got.indexes
    else:
        seqs, indexes = [p.seq for p in got], [p.index for p in got]
    if isinstance(events, RunEvents):
        ev_seqs, ev_hashes = list(events.seqs), events.hashes
    else:
        ev_seqs, ev_hashes = [ev.seq for ev in events], [ev.chain_hash for ev in events]
    at: Sequence[int]  # the position of each event's proof
    if ev_seqs == seqs == list(range(len(seqs))):  # a proof per event, in order: the archive
        at, index = range(len(seqs)), list(indexes)
    else:
        position = dict(zip(seqs, range(len(seqs)), strict=True))
        at = [position.get(seq, -1) for seq in ev_seqs]
        if -1 in at:
            seq = ev_seqs[at.index(-1)]
            raise LogError(
                f"L2 inclusion: run {run_id} seq {seq} has no proof in {where}",
                run=run_id,
                seq=seq,
                checkpoint=where,
            )
        index = [indexes[j] for j in at]
    if leaves is None or len(leaves) != len(ev_seqs):
        leaves = leaf_hashes(run_id, ev_seqs, ev_hashes)
    known: dict[tuple[int, int], bytes] = {}
    i, total = 0, len(index)
    while i < total:
        lo = index[i]
        n = 1
        while i + n < total and index[i + n] == lo + n:
            n += 1
        pos = 0
        while pos < n:
            first = lo + pos
            level = min(
                (first & -first).bit_length() - 1 if first else 64, (n - pos).bit_length() - 1
            )
            k = i + pos
            ok = False
            if level and 0 <= first < cp.size:
                sub = _subtree(leaves[k : k + (1 << level)])
                try:
                    root, path = _root_or_known(first, cp.size, sub, got[at[k]].proof, known, level)
                except LogError:  # a proof that cannot be read: leaf by leaf names the seq
                    root, path = b"", []
                ok = root is None or root == cp.root
                if ok:
                    known.update(path)
            if not ok:
                for m in range(k, k + (1 << level)):
                    try:
                        _check_leaf(run_id, events[m], got[at[m]], leaves[m], cp, where, known)
                    except LogError as e:
                        found = _first_unproven(got, at, index, leaves, m, older())
                        if found is None:
                            raise
                        j, old = found
                        raise _rewritten(run_id, events, got[at[j]], m, j, old, where) from e
            pos += 1 << level
        i += n


def _first_unproven(  # noqa: PLR0917 - private, one call site
    got: Sequence[LeafProof],
    at: Sequence[int],
    index: Sequence[int],
    leaves: Sequence[bytes],
    m: int,
    older: list[Checkpoint],
) -> tuple[int, Checkpoint] | None:
    """After leaf ``m`` failed: the first position from ``m`` on that no older trusted
    checkpoint proves either, and the checkpoint that proved the ones before it.

    Why: the proofs come from the source's own hashes (the archive's tiles). A store admin
    who rewrites seq ``k`` rewrites those hashes too, so every leaf sharing a subtree with
    ``k`` leads to another root, and the first one (seq 0) would be named. A leaf that an
    older signed checkpoint still proves (its proof in that smaller tree holds only leaves
    before it) is genuine; the first that none proves is where the rewrite starts. None when
    the source cannot build such proofs, or no older checkpoint proves leaf ``m``.
    """
    proof_at = getattr(got, "proof_at", None)
    if proof_at is None or not older:
        return None
    last: Checkpoint | None = None
    for j in range(m, len(index)):
        i = index[j]
        proven = None
        for old in older:
            if old.size > i:
                try:
                    if root_from_inclusion(i, old.size, leaves[j], proof_at(i, old.size)) == (
                        old.root
                    ):
                        proven = old
                        break
                except LogError:
                    continue
        if proven is None:
            return None if last is None else (j, last)
        last = proven
    return None


def _rewritten(  # noqa: PLR0917 - private, one call site
    run_id: str,
    events: Sequence[RunEvent],
    p: LeafProof,
    m: int,
    j: int,
    old: Checkpoint,
    where: str,
) -> LogError:
    seq = events[j].seq
    return LogError(
        f"L2 inclusion: run {run_id} seq {seq}"
        + (f" in {p.obj}" if p.obj else "")
        + f" is not leaf {p.index} of {where}: seqs {events[m].seq}..{events[j - 1].seq} "
        f"before it are leaves of the older signed checkpoint {old.origin}@{old.size}, so "
        f"the log's hashes were rewritten from seq {seq} on",
        run=run_id,
        seq=seq,
        obj=p.obj,
        checkpoint=where,
    )


def _check_leaf(  # noqa: PLR0917 - private, one call site
    run_id: str,
    ev: RunEvent,
    p: LeafProof,
    leaf: bytes,
    cp: Checkpoint,
    where: str,
    known: dict[tuple[int, int], bytes],
) -> None:
    try:
        root, path = _root_or_known(p.index, cp.size, leaf, p.proof, known)
    except LogError as e:
        root, path, why = b"", [], str(e)
    else:
        why = "the proof leads to another root"
    if root is None or root == cp.root:
        known.update(path)  # every node on a proven path is proven
        return
    raise LogError(
        f"L2 inclusion: run {run_id} seq {ev.seq}"
        + (f" in {p.obj}" if p.obj else "")
        + f" is not leaf {p.index} of {where}: {why}",
        run=run_id,
        seq=ev.seq,
        obj=p.obj,
        checkpoint=where,
    )


def _older(
    evidence: RunLogEvidence, keys: Sequence[NoteVerifier], cp: Checkpoint
) -> list[Checkpoint]:
    """The other checkpoints seen that a trusted key signed, smaller than ``cp``, smallest
    first (a failed one is L4's to name)."""
    out = []
    for note, _ in evidence.others:
        try:
            other, _ = _open(note, keys, evidence.origin, "another checkpoint")
        except LogError:
            continue
        if other.size < cp.size:
            out.append(other)
    return sorted(out, key=lambda c: c.size)


def check_run_log(
    run_id: str,
    events: Sequence[RunEvent],
    evidence: RunLogEvidence,
    keys: Sequence[NoteVerifier],
    *,
    witnesses: Sequence[NoteVerifier] = (),
    min_witnesses: int = 0,
    require_finished: bool = True,
    leaves: Sequence[bytes] | None = None,
) -> Checkpoint:
    """Raise :class:`LogError` at the first of L1-L4 that fails; return the checkpoint.

    ``leaves``: the events' leaf hashes, when the caller already hashed these very events
    (the topic's evidence is gathered by them); never a source's word for them.
    """
    cp_name = evidence.checkpoint_obj or "checkpoint"
    cp, good = _open(evidence.checkpoint, [*keys, *witnesses], evidence.origin, cp_name)
    where = f"{cp_name} ({cp.origin}@{cp.size})"
    key_ids = {(k.name, k.key_id) for k in keys}
    if not any((g.name, g.key_id) in key_ids for g in good):
        raise LogError(
            f"L1 signature: {where} is not signed by a trusted log key", checkpoint=where
        )
    wit = sum((g.name, g.key_id) not in key_ids for g in good)
    if wit < min_witnesses:
        raise LogError(
            f"L1 signature: {where} has {wit} trusted witness cosignature(s), "
            f"{min_witnesses} required (of {', '.join(sorted({w.name for w in witnesses}))})",
            checkpoint=where,
        )
    _check_inclusion(
        run_id, events, evidence, cp, where, leaves, lambda: _older(evidence, keys, cp)
    )
    if require_finished and not (events and events[-1].finishes):
        last = events[-1].seq if events else None
        raise LogError(
            f"L3 end: run {run_id} has no RUN_FINISHED in {where} (last seq {last}): "
            "it was cut short or its tail was removed",
            run=run_id,
            seq=last,
            checkpoint=where,
        )
    for note, proof in evidence.others:
        other, _ = _open(note, keys, evidence.origin, "another checkpoint")
        old, new = (other, cp) if other.size <= cp.size else (cp, other)
        try:
            verify_consistency(old.size, new.size, proof, old.root, new.root)
        except LogError as e:
            raise LogError(
                f"L4 consistency: {old.origin}@{old.size} and @{new.size}: {e}", checkpoint=where
            ) from None
    return cp
