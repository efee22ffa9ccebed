"""Reading a run from the static-log layout (``tracevault.archive.tlog``), with its log evidence.

One listing of ``runs/<run>/`` finds the run's index objects; they name the partition log,
the leaf index of every seq and the tree size each flush archived. The records come from the
data bundles; the evidence (``RunLogEvidence``) from the log itself: the newest archived
checkpoint of the partition, an inclusion proof per event read from the hash tiles as it is
checked (``LazyProof``: only the few elements a range check reads are built), and a
consistency proof from every checkpoint a run index names to the newest one. Nothing here is
trusted: ``check_run_log`` decides with the public keys only (docs/log.md).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import pairwise

from tracevault.archive._holes import (
    Hole,
    HoleKey,
    gone_trees,
    hole_node_source,
    holes_prefix,
    parse_hole_key,
)
from tracevault.archive.tlog import (
    RunIndex,
    checkpoint_key,
    checkpoint_prefix,
    data_key,
    decode_values,
    entries_key,
    parse_checkpoint_key,
    parse_run_index_key,
    tile_key,
)
from tracevault.errors import ArchiveError, LogError, NotFoundError
from tracevault.transparency import (
    HASH_SIZE,
    TILE_WIDTH,
    Checkpoint,
    LazyProof,
    LeafProofs,
    NodeSource,
    RunLogEvidence,
    consistency_proof,
    decode_bundle,
    edge_source,
    parse_leaf,
    split_note,
    tile_node_source,
    tile_width,
)

__all__ = ["LogHead", "LogRun", "read_log_head", "read_log_run", "run_index_keys", "run_log_keys"]


@dataclass(frozen=True, slots=True)
class LogRun:
    """A run as the static log holds it: its sealed values in seq order, where each came
    from, and the evidence that places it in the signed log."""

    run_id: str
    values: tuple[bytes, ...]
    objects: tuple[str, ...]  # the data bundle of each value
    index_keys: tuple[str, ...]
    finished: bool
    head: str
    evidence: RunLogEvidence
    unindexed: tuple[tuple[int, int, str], ...] = ()
    """(leaf, seq, entry bundle) of the run's leaves past its last indexed one that no index
    object lists: the tail of the run's index was deleted."""
    lost: tuple[int, str, str] | None = None
    """(first seq, hole object, what happened) when seqs the run lacks lie in a hole of its
    log (docs/log.md, "Holes")."""


def run_index_keys(keys: Sequence[str]) -> list[str]:
    return [k for k in keys if parse_run_index_key(k) is not None]


def run_log_keys(
    indexes: Sequence[RunIndex], newest: int, *, own_entries: bool = False
) -> set[str]:
    """The log objects :func:`read_log_run` and the check of its proofs read for the run of
    ``indexes`` when the partition's newest checkpoint has size ``newest``, from keys alone.

    The checkpoints its indexes name and the newest; the data bundles of its leaves; the entry
    bundles from its last leaf on (the unindexed-tail scan, for a run no index says finished)
    and, with ``own_entries``, those of its leaves too; and every hash tile an inclusion
    proof of one of its leaves or a consistency proof from one of its checkpoints reads. The
    tiles come from running the same proofs over a node source that records what it is
    asked for (reads depend on positions only, never on hashes). Leaves of one 256-leaf
    bundle share every proof node above it and their siblings below lie in its own level-0
    tile, so one leaf a bundle stands for all. Used to check only those objects' versions
    (verify on S3) and to hold exactly them (``archive hold``; docs/log.md, "Archive").
    """
    if not indexes or newest <= 0:
        return set()
    log_key = indexes[0].log
    leaves = sorted({leaf for i in indexes for leaf, _ in i.leaves if leaf < newest})
    keys = {checkpoint_key(log_key, newest)} | {checkpoint_key(log_key, i.size) for i in indexes}
    if not leaves:
        return keys
    blocks: dict[int, int] = {}  # bundle -> first leaf of the run in it
    for leaf in leaves:
        blocks.setdefault(leaf // TILE_WIDTH, leaf)
    last = (newest - 1) // TILE_WIDTH
    finished = any(i.finished for i in indexes)  # no tail scan (read_log_run)
    scan = range(0) if finished else range(leaves[-1] // TILE_WIDTH, last + 1)
    for n in blocks:
        keys.add(data_key(log_key, n, tile_width(0, n, newest)))
    for n in [*scan, *(blocks if own_entries else ())]:
        keys.add(entries_key(log_key, n, tile_width(0, n, newest)))

    def read_tile(level: int, index: int, width: int) -> bytes:
        keys.add(tile_key(log_key, level, index, width))
        return bytes(width * HASH_SIZE)

    node = tile_node_source(newest, read_tile)
    edge = edge_source(newest, node)
    for leaf in blocks.values():
        for _ in LazyProof(leaf, newest, node, edge):
            pass
    for old in {i.size for i in indexes}:
        if 0 < old < newest:
            consistency_proof(old, newest, node)
    return keys


def _completed(
    pairs: list[tuple[RunIndex, str]], log_key: str, cps: Sequence[str]
) -> list[tuple[RunIndex, str]]:
    """The run's index objects less those of flushes that never completed.

    A flush writes its run indexes before its checkpoint object, which is what makes it
    count; an archiver killed in between leaves indexes naming a size that has no
    checkpoint, and after its restart it flushes the same leaves again at other boundaries
    (so they are listed again by the redone flush's indexes). Such an index, below the
    newest checkpoint, is passed over. Passing one over hides nothing: a leaf of the run that
    no other index lists breaks the run's seqs (the chain check) or lies past its last listed
    leaf (the unindexed-tail scan), and on S3 a deleted checkpoint is a delete marker (A0).
    An index past the newest checkpoint is kept, so the reader names it (docs/log.md,
    "Archive").
    """
    have = set(cps)
    newest = parse_checkpoint_key(cps[-1])
    kept = [
        (i, k)
        for i, k in pairs
        if checkpoint_key(log_key, i.size) in have or newest is None or i.size > newest
    ]
    return kept or pairs


class _Reader:
    def __init__(self, get: Callable[[str], bytes]) -> None:
        self._get = get
        self._cache: dict[str, bytes] = {}

    def get(self, key: str) -> bytes:
        got = self._cache.get(key)
        if got is None:
            try:
                got = self._get(key)
            except NotFoundError:
                raise ArchiveError(f"object {key} is missing from the archive (deleted?)") from None
            self._cache[key] = got
        return got


def read_log_run(
    get: Callable[[str], bytes],
    list_keys: Callable[[str], list[str]],
    run_id: str,
    index_keys: Sequence[str],
    anchor: str | None = None,
) -> LogRun:
    """The run from its index objects (``index_keys``, from the run's listing).

    ``anchor`` (a signed checkpoint note of the partition no larger than the newest archived
    one, e.g. a witness's cosigned copy) is what the proofs are built against instead of the
    newest: the tiles hold every node of any smaller tree, and the archived checkpoints
    become the others, each with its consistency proof (docs/log.md, "Witness").

    Objects are read in this order: index objects, holes, the checkpoint proven against,
    data bundles, the unindexed tail's entry bundles, the other checkpoints.
    """
    r = _Reader(get)
    log_key, origin, cps, pairs = _run_indexes(r, list_keys, run_id, index_keys)
    indexes = [i for i, _ in pairs]
    index_keys = [k for _, k in pairs]
    by_seq = _leaves_by_seq(pairs, run_id)
    newest_key = parse_checkpoint_key(cps[-1])
    holes = [
        h
        for k in list_keys(holes_prefix(log_key))
        if (h := parse_hole_key(k)) is not None and newest_key is not None and h.end <= newest_key
    ]
    lost = _lost_seqs(r, run_id, by_seq, holes) if holes else None
    gone = [
        (h, Hole.from_json(r.get(h.key), h.key)) for h in holes if h.kind in {"gone", "continued"}
    ]
    last_leaf = max(leaf for leaf, _ in by_seq.values())
    cp_key, note, size, newest = _proof_checkpoint(r, log_key, cps, gone, last_leaf, anchor=anchor)

    def read_tile(level: int, index: int, width: int) -> bytes:
        return r.get(tile_key(log_key, level, index, width))

    # any smaller tree's nodes too; those overlapping a gone hole from its compact tree
    node = hole_node_source(tile_node_source(newest, read_tile), *gone_trees(gone))
    edge = edge_source(size, node)
    seqs = sorted(by_seq)
    leaves = [by_seq[seq][0] for seq in seqs]
    where = _Where(log_key, run_id, cp_key, size, newest)
    values, objects = _values(r, where, seqs, leaves)

    proofs = _proofs(seqs, leaves, objects, size, node, edge)
    fin = [i for i in indexes if i.finished]
    # The unindexed-tail scan looks for leaves of the run that no index lists, past its
    # last listed one. A run whose index says it finished has none to find: verify holds
    # that claim to the chain's end (check A4: the last event is its RUN_FINISHED, with the
    # head the index names) and the sequencer seals nothing of a finished run. Deleting the
    # finishing index to hide a tail removes the claim, and the scan runs. Without this, a
    # run's verify read every entry bundle written after it.
    unindexed: list[tuple[int, int, str]] = (
        [] if fin else _unindexed(r, where, by_seq, last_leaf, holes)
    )
    others = _others(r, where, {i.size for i in indexes}, gone, node)
    return LogRun(
        run_id,
        tuple(values),
        tuple(objects),
        tuple(sorted(index_keys)),
        bool(fin),
        fin[-1].head if fin else "",
        RunLogEvidence(
            origin,
            note if anchor is None else anchor,
            proofs,
            tuple(others),
            cp_key if anchor is None else None,  # the caller names where the anchor came from
        ),
        tuple(unindexed),
        lost,
    )


@dataclass(frozen=True, slots=True)
class LogHead:
    """The first sealed values of a run and how many events its index objects list, read
    without the log's proofs: NOT verified (the desk's first screen, while it verifies)."""

    values: tuple[bytes, ...]  # seqs 0, 1, … in order, at most the number asked for
    objects: tuple[str, ...]  # the data bundle of each value
    total: int  # the last seq the run's last index object lists, plus one


def read_log_head(
    get: Callable[[str], bytes], run_id: str, index_keys: Sequence[str], n: int
) -> LogHead:
    """The first ``n`` sealed values of ``run_id`` from its index objects (``index_keys``).

    Reads the last index object (the count, and the tree size its flush left the bundles
    at), the others in flush order only until they place seqs 0..n-1, and the data bundles
    of those leaves: for a 100,000-event run two or three index objects and two bundles,
    where :func:`read_log_run` reads every bundle, tile and checkpoint that proves the run.
    Nothing here is checked against the signed log; the values stop at the first seq the
    indexes do not place (ArchiveError when an object is unreadable or names another run
    or log; NotFoundError when one is missing).
    """
    keys = sorted(index_keys)
    if not keys:
        raise ArchiveError(f"run {run_id!r} has no index objects")
    last = RunIndex.from_json(get(keys[-1]), keys[-1])
    total = max((seq for _, seq in last.leaves), default=-1) + 1
    want = min(n, total)
    placed: dict[int, int] = {}  # seq -> leaf
    for key in keys:
        idx = last if key == keys[-1] else RunIndex.from_json(get(key), key)
        if idx.run_id != run_id or idx.log != last.log:
            raise ArchiveError(f"run index {key} is for run {idx.run_id!r} in log {idx.log}")
        for leaf, seq in idx.leaves:
            if seq < want:
                placed.setdefault(seq, leaf)
        if len(placed) >= want:
            break
    values: list[bytes] = []
    objects: list[str] = []
    bundles: dict[str, list[bytes]] = {}
    for seq in range(want):
        at = placed.get(seq)
        if at is None:
            break
        leaf = at
        if leaf >= last.size:
            raise ArchiveError(f"run {run_id!r} seq {seq} is leaf {leaf}, past its last flush")
        b = leaf // TILE_WIDTH
        # the bundle as the run's last flush left it: full, or the partial one it wrote
        dkey = data_key(last.log, b, tile_width(0, b, last.size))
        bundle = bundles.get(dkey)
        if bundle is None:
            bundle = bundles[dkey] = decode_values(get(dkey), dkey)
        if leaf % TILE_WIDTH >= len(bundle):
            raise ArchiveError(f"data bundle {dkey} has no record for leaf {leaf}")
        values.append(bundle[leaf % TILE_WIDTH])
        objects.append(dkey)
    return LogHead(tuple(values), tuple(objects), total)


def _proofs(  # noqa: PLR0917 - the run's leaves and the tree they are proven in
    seqs: list[int],
    leaves: list[int],
    objects: list[str],
    size: int,
    node: NodeSource,
    edge: Callable[[int], bytes],
) -> LeafProofs:
    """The run's inclusion proofs in the tree of ``size``, each built as it is read."""

    def proof(leaf: int) -> LazyProof:
        # built as check_run_log reads it: it proves consecutive leaves as ranges and reads
        # a few elements of a few proofs (docs/log.md, "Verifying a run")
        return LazyProof(leaf, size, node, edge)

    def proof_at(leaf: int, in_size: int) -> LazyProof:
        # only after L2 failed: the leaf's proof in an older checkpoint's tree, to name
        # the first rewritten seq (docs/log.md, "Verifying a run")
        return LazyProof(leaf, in_size, node, edge_source(in_size, node))

    return LeafProofs(seqs, leaves, objects, proof, proof_at)


@dataclass(frozen=True, slots=True)
class _Where:
    """Which log the run is read from and the tree it is proven against: what the reading
    steps after the checkpoint choice share (and name in their errors)."""

    log_key: str
    run_id: str
    cp_key: str
    size: int  # the tree the proofs are built against (the anchor's, or cp_key's)
    newest: int  # the newest archived tree the tiles and bundles are named for


def _run_indexes(
    r: _Reader, list_keys: Callable[[str], list[str]], run_id: str, index_keys: Sequence[str]
) -> tuple[str, str, list[str], list[tuple[RunIndex, str]]]:
    """The run's log, its origin, the log's checkpoint keys and the run's index objects of
    completed flushes (each with its key)."""
    if not index_keys:
        raise ArchiveError(f"run {run_id!r} has no index objects")
    indexes = [RunIndex.from_json(r.get(k), k) for k in sorted(index_keys)]
    logs = {(i.log, i.origin) for i in indexes}
    if len(logs) != 1:
        raise ArchiveError(
            f"run {run_id!r}: its index objects name {len(logs)} logs ({sorted(logs)}); a run "
            "lives in one partition"
        )
    (log_key, origin) = logs.pop()
    cps = list_keys(checkpoint_prefix(log_key))
    if not cps:
        raise ArchiveError(f"log {log_key} has no checkpoint object (deleted?)")
    pairs = _completed(list(zip(indexes, sorted(index_keys), strict=True)), log_key, cps)
    return log_key, origin, cps, pairs


def _leaves_by_seq(pairs: list[tuple[RunIndex, str]], run_id: str) -> dict[int, tuple[int, str]]:
    """seq -> (leaf, index key) over the run's indexes, which must agree where they overlap."""
    by_seq: dict[int, tuple[int, str]] = {}
    for idx, key in pairs:
        if idx.run_id != run_id:
            raise ArchiveError(f"run index {key} is for run {idx.run_id!r}, not {run_id!r}")
        for leaf, seq in idx.leaves:
            seen = by_seq.get(seq)
            if seen is not None and seen[0] != leaf:
                raise ArchiveError(
                    f"run {run_id!r} seq {seq}: index {key} says leaf {leaf}, {seen[1]} says "
                    f"leaf {seen[0]}"
                )
            by_seq[seq] = (leaf, key)
    return by_seq


def _proof_checkpoint(
    r: _Reader,
    log_key: str,
    cps: list[str],
    gone: list[tuple[HoleKey, Hole]],
    last_leaf: int,
    *,
    anchor: str | None,
) -> tuple[str, str, int, int]:
    """(checkpoint key, its note, the size proofs are built against, the newest size)."""
    cp_key = cps[-1]
    after = [h.first for h, _ in gone if h.first > last_leaf]
    if after and anchor is None:
        # proofs across a hole whose hashes are gone cannot be built: the run is proven
        # against the checkpoint where the log stood when the hole began (archived first)
        cp_key = checkpoint_key(log_key, min(after))
        if cp_key not in cps:
            raise ArchiveError(
                f"log {log_key} has a hole at leaf {min(after)} but no checkpoint object at "
                "that size to prove the run before it against (deleted?)"
            )
    note = r.get(cp_key).decode("utf-8", "replace")
    try:
        cp = Checkpoint.parse(split_note(note)[0])
    except LogError as exc:
        raise ArchiveError(f"checkpoint {cp_key} is unreadable: {exc}") from exc
    size = newest = cp.size
    if anchor is not None:
        try:
            size = Checkpoint.parse(split_note(anchor)[0]).size
        except LogError as exc:
            raise ArchiveError(f"the checkpoint to prove against is unreadable: {exc}") from exc
        if size > newest:
            raise ArchiveError(
                f"log {log_key} is archived up to size {newest} ({cp_key}); the checkpoint of "
                f"size {size} is past it: verify from the topic, or once the archiver caught up"
            )
    return cp_key, note, size, newest


def _values(
    r: _Reader, w: _Where, seqs: list[int], leaves: list[int]
) -> tuple[list[bytes], list[str]]:
    """The run's sealed values in seq order and the data bundle each came from."""
    values: list[bytes] = []
    objects: list[str] = []
    bundle: list[bytes] = []
    dkey, bundle_n = "", -1
    log_key, size, newest = w.log_key, w.size, w.newest
    i, total = 0, len(leaves)
    while i < total:
        leaf = leaves[i]
        n = leaf // TILE_WIDTH
        if n != bundle_n and leaf < size:  # a run's leaves come bundle by bundle
            dkey = data_key(log_key, n, tile_width(0, n, newest))
            bundle, bundle_n = decode_values(r.get(dkey), dkey), n
        # the run's next leaves in this bundle, when they are consecutive (one run's
        # transaction, or a whole run alone in its partition): taken as one slice
        lo = leaf % TILE_WIDTH
        k = min(TILE_WIDTH - lo, total - i)
        if (
            k > 1
            and leaves[i + k - 1] == leaf + k - 1  # O(1) first: interleaved runs stop here
            and leaf + k <= size
            and lo + k <= len(bundle)
            and leaves[i : i + k] == list(range(leaf, leaf + k))
        ):
            values.extend(bundle[lo : lo + k])
            objects.extend([dkey] * k)
            i += k
            continue
        if leaf >= size:
            raise ArchiveError(
                f"run {w.run_id!r} seq {seqs[i]} is leaf {leaf}, beyond the newest checkpoint "
                f"{w.cp_key} (size {size})"
            )
        try:
            values.append(bundle[lo])
        except IndexError:
            raise ArchiveError(f"data bundle {dkey} has no record for leaf {leaf}") from None
        objects.append(dkey)
        i += 1
    return values, objects


def _unindexed(
    r: _Reader,
    w: _Where,
    by_seq: dict[int, tuple[int, str]],
    last_leaf: int,
    holes: Sequence[HoleKey],
) -> list[tuple[int, int, str]]:
    """(leaf, seq, entry bundle) of the run's leaves past its last listed one that no index
    lists, from the entry bundles of the newest tree."""
    unindexed: list[tuple[int, int, str]] = []
    for n in range(last_leaf // TILE_WIDTH, (w.newest - 1) // TILE_WIDTH + 1):
        ekey = entries_key(w.log_key, n, tile_width(0, n, w.newest))
        try:
            entries = decode_bundle(r.get(ekey), ekey)
        except LogError as exc:
            raise ArchiveError(str(exc)) from exc
        for i, data in enumerate(entries, start=n * TILE_WIDTH):
            if i <= last_leaf or (holes and any(h.overlaps(i, i + 1) for h in holes)):
                continue  # the run's own, or a hole's (no run's history)
            try:
                rid, seq, _ = parse_leaf(data)
            except LogError as exc:
                raise ArchiveError(f"entry bundle {ekey} leaf {i}: {exc}") from exc
            if rid == w.run_id and seq not in by_seq:
                unindexed.append((i, seq, ekey))
    return unindexed


def _others(
    r: _Reader,
    w: _Where,
    index_sizes: set[int],
    gone: list[tuple[HoleKey, Hole]],
    node: NodeSource,
) -> list[tuple[str, tuple[bytes, ...]]]:
    """The checkpoints the run's indexes name and the newest, less the one proven against,
    each with its consistency proof to that one."""
    size, newest = w.size, w.newest
    others: list[tuple[str, tuple[bytes, ...]]] = []
    for old in sorted((index_sizes | {newest}) - {size}):
        if old > size and any(size <= h.first < old for h, _ in gone):
            continue  # across a hole whose hashes are gone: no consistency proof exists
        okey = checkpoint_key(w.log_key, old)
        other = r.get(okey).decode("utf-8", "replace")
        if old <= newest:
            pair = (old, size) if old < size else (size, old)
            others.append((other, tuple(consistency_proof(*pair, node))))
        else:
            others.append((other, ()))  # a checkpoint past the newest listed one: L4 fails
    return others


def _lost_seqs(
    r: _Reader, run_id: str, by_seq: dict[int, tuple[int, str]], holes: Sequence[HoleKey]
) -> tuple[int, str, str] | None:
    """``LogRun.lost`` of the run: when seqs it lacks lie in a hole of its log, the first,
    the hole object and what happened.

    The missing seqs (before its first archived one, or between two) are placed between the
    leaves of the seqs either side; a hole there took them. A quarantined leaf is named only
    when its record is the run's own (its hole object says which run and seq)."""
    seqs = sorted(by_seq)
    gaps: list[tuple[int, int, int, int]] = []  # (first seq lost, last, leaf before, after)
    if seqs[0] > 0:
        gaps.append((0, seqs[0] - 1, -1, by_seq[seqs[0]][0]))
    for a, b in pairwise(seqs):
        if b > a + 1:
            gaps.append((a + 1, b - 1, by_seq[a][0], by_seq[b][0]))
    for lo_seq, hi_seq, lo, hi in gaps:
        for h in holes:
            if h.kind == "continued" or not h.overlaps(lo + 1, hi):
                continue
            hole = Hole.from_json(r.get(h.key), h.key)
            if hole.kind == "quarantined":
                seq = hole.runs.get(run_id)
                if seq is None or not lo_seq <= seq <= hi_seq:
                    continue
                return (
                    seq,
                    h.key,
                    f"run {run_id!r} seq {seq} is leaf {hole.first} of its log, quarantined "
                    f"({hole.reason}, kept as {hole.quarantine_key}) and so not archived as "
                    f"run history: {hole.why}",
                )
            lost = f"seq {lo_seq}" if lo_seq == hi_seq else f"seqs {lo_seq}..{hi_seq}"
            return (
                lo_seq,
                h.key,
                f"run {run_id!r} lost {lost} to a hole in its partition's log: "
                f"{hole.describe()}. The events were sealed and signed, then gone from "
                "Kafka before the archiver read them; the archive cannot prove or replay them",
            )
    return None
