"""Writing one sealed partition's log into the archive as a static log (docs/log.md, "Archive").

A flush writes, all at once and in parallel: the entry and data bundles and the hash tiles
that grew (full ones once, the newest partial one at its own path), one ``RunIndex`` per run
it touched and one day-index batch per day (every run the flush touched; a function of the
flush's leaves only, so a flush redone after a crash writes the same bytes); then, last, the
checkpoint object at the new size. The checkpoint object is what makes a flush count: a
reader never goes past the newest one, and a restart resumes from it (so a crash before it
is redone, and every object redone gets the same bytes or a new name).

Why resume from the archive's checkpoint rather than the next checkpoint record on the topic:
the partial tiles at the archived size are needed anyway to keep writing, and the checkpoint
object is re-verified (signature, origin, and the root the tiles give) before it is trusted.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from operator import attrgetter
from typing import NamedTuple

from tracevault.archive import (
    Hole,
    ObjectStore,
    compact_at,
    gone_trees,
    hole_node_source,
    holes_prefix,
    parse_hole_key,
)
from tracevault.archive.layout import day_batch_key, encode_day_batch, run_prefix
from tracevault.archive.tlog import (
    RunIndexJson,
    checkpoint_key,
    checkpoint_prefix,
    data_key,
    decode_values,
    encode_values,
    entries_key,
    log_prefix,
    run_index_key,
    tile_key,
)
from tracevault.errors import ArchiveError, LogError, NotFoundError
from tracevault.transparency import (
    TILE_WIDTH,
    Checkpoint,
    CompactTree,
    NoteVerifier,
    TileState,
    decode_bundle,
    encode_bundle,
    open_note,
    origin_generation,
    tile_node_source,
    tree_root,
)

__all__ = ["FlushJob", "LeafRecord", "PartitionLog"]

log = logging.getLogger(__name__)


class LeafRecord(NamedTuple):
    """One logged sealed record: what the leaf binds and the exact value to keep.

    A NamedTuple, not a frozen dataclass: one is built per sealed event (see ``_sealed``)."""

    run_id: str
    seq: int
    chain_hash: bytes
    finishes: bool
    sealed_at: int
    leaf: bytes  # leaf data
    leaf_hash: bytes
    value: bytes


_seq = attrgetter("seq")


def _day(micros: int) -> date:
    return datetime.fromtimestamp(micros / 1_000_000, tz=UTC).date()


@dataclass(slots=True)
class PartitionLog:
    """The archived log of one partition and what was appended since the last flush."""

    store: ObjectStore
    log: str  # key prefix log/<prefix>/<p>/
    prefix: str  # the topic prefix
    origin: str
    partition: int
    state: TileState
    root: bytes  # of the archived size (the newest checkpoint object's)
    entries: list[bytes] = field(default_factory=list)  # the newest (partial) bundle
    values: list[bytes] = field(default_factory=list)
    runs: dict[str, list[LeafRecord]] = field(default_factory=dict)  # since the last flush
    leaf_index: dict[str, list[int]] = field(default_factory=dict)
    bundles: dict[int, int] = field(default_factory=dict)  # full bundles to write: index -> 256
    full_entries: dict[int, tuple[bytes, bytes]] = field(default_factory=dict)
    archived: int = 0  # size handed to the newest flush (written or being written)
    unflushed_bytes: int = 0
    note: str | None = None  # the newest verified checkpoint not yet flushed
    note_size: int = 0
    # the compact tree at ``size`` (the tiles hold zeros for the leaves of a ``gone`` hole,
    # so ``state.compact()`` is not it after one); the archiver sets it at each checkpoint
    tree: CompactTree = field(default_factory=CompactTree)
    holes: list[tuple[str, bytes]] = field(default_factory=list)  # written by the next flush
    blank: int = 0  # leaves since the last flush that are no run's history (holes)

    @property
    def size(self) -> int:
        return self.state.size

    @property
    def unflushed(self) -> int:
        return self.state.size - self.archived

    @classmethod
    def open(
        cls,
        store: ObjectStore,
        prefix: str,
        origin: str,
        partition: int,
        verifiers: Sequence[NoteVerifier],
    ) -> PartitionLog:
        """The partition's log as archived: its newest checkpoint, checked, and partial tiles."""
        log_key = log_prefix(prefix, partition, origin_generation(origin))
        cps = store.list(checkpoint_prefix(log_key))
        if not cps:
            return cls(store, log_key, prefix, origin, partition, TileState(), tree_root(0, _none))
        hole_keys = [h for i in store.list(holes_prefix(log_key)) if (h := parse_hole_key(i.key))]
        key = cps[-1].key
        note = store.get(key).decode("utf-8", "replace")
        try:
            text, _ = open_note(note, verifiers)
            cp = Checkpoint.parse(text)
            if cp.origin != origin:
                raise LogError(f"it is for log {cp.origin!r}, not {origin!r}")

            def read(level: int, index: int, width: int) -> bytes:
                return store.get(tile_key(log_key, level, index, width))

            state = TileState.restore(cp.size, read)
            gone = [
                (h, Hole.from_json(store.get(h.key), h.key))
                for h in hole_keys
                if h.kind in {"gone", "continued"} and h.end <= cp.size
            ]
            node = hole_node_source(tile_node_source(cp.size, read), *gone_trees(gone))
            tree = compact_at(cp.size, node)
            if tree.root() != cp.root:
                raise LogError("the archived tiles do not give its root")
            width = cp.size % TILE_WIDTH
            entries: list[bytes] = []
            values: list[bytes] = []
            if width:
                n = cp.size // TILE_WIDTH
                ek, dk = entries_key(log_key, n, width), data_key(log_key, n, width)
                entries = decode_bundle(store.get(ek), ek)
                values = decode_values(store.get(dk), dk)
        except (LogError, NotFoundError, ArchiveError) as exc:
            raise ArchiveError(
                f"the archive's checkpoint {key} cannot be resumed from: {exc}. Operator "
                "action: run `tracevault replay verify --from archive` on a run of partition "
                f"{partition} and restore the log before restarting the archiver"
            ) from exc
        log.info("partition %d: resuming the archived log at size %d", partition, cp.size)
        return cls(
            store,
            log_key,
            prefix,
            origin,
            partition,
            state,
            cp.root,
            entries,
            values,
            archived=cp.size,
            tree=tree,
        )

    def extend(self, recs: Sequence[LeafRecord]) -> None:
        """``append`` of each, in bulk: a verified checkpoint adds hundreds of leaves."""
        if not recs:
            return
        index = self.state.size
        self.state.extend([r.leaf_hash for r in recs])
        self._bundle(index, [r.leaf for r in recs], [r.value for r in recs])
        runs, leaf_index = self.runs, self.leaf_index
        size = 0
        for rec in recs:
            size += len(rec.value)
            got = runs.get(rec.run_id)
            if got is None:
                runs[rec.run_id] = [rec]
                leaf_index[rec.run_id] = [index]
            else:
                got.append(rec)
                leaf_index[rec.run_id].append(index)
            index += 1
        self.unflushed_bytes += size

    def _bundle(self, index: int, leaves: Sequence[bytes], values: Sequence[bytes]) -> None:
        """Add the entries and values of leaves ``index ..`` to the bundles."""
        i, n = 0, len(leaves)
        while i < n:
            k = TILE_WIDTH - len(self.entries)
            self.entries.extend(leaves[i : i + k])
            self.values.extend(values[i : i + k])
            i += min(k, n - i)
            if len(self.entries) == TILE_WIDTH:
                b = (index + i - 1) // TILE_WIDTH
                self.full_entries[b] = (encode_bundle(self.entries), encode_values(self.values))
                self.entries, self.values = [], []

    def extend_blank(self, hashes: Sequence[bytes], leaves: Sequence[bytes]) -> None:
        """Leaves in the tree that are no run's history (a hole: docs/log.md, "Holes").

        ``leaves`` is each one's leaf data where it is known (a quarantined record with a
        run id no store can hold), else empty; the data bundle gets an empty value (the
        record's bytes are in ``quarantine/``, or gone)."""
        index = self.state.size
        self.state.extend(hashes)
        self._bundle(index, leaves, [b""] * len(leaves))
        self.blank += len(leaves)

    def skip_to(self, end: int, tree: CompactTree) -> None:
        """Continue the log at ``end`` from ``tree`` (its compact tree at ``end``): the
        leaves before it are a ``gone`` hole, zeros in the tiles (a reader takes every node
        overlapping them from the hole's compact tree)."""
        n = end - self.state.size
        if n < 0:
            raise ArchiveError(f"partition {self.partition}: a hole cannot end before the log")
        zero = bytes(32)
        while n:  # a tile at a time: a long hole is not one list of hashes
            k = min(n, TILE_WIDTH - len(self.entries))
            self.extend_blank([zero] * k, [b""] * k)
            n -= k
        self.tree = tree.copy()

    def add_hole(self, key: str, hole: Hole) -> None:
        """Write ``hole`` with the next flush (before its checkpoint object)."""
        self.holes.append((key, hole.to_json()))

    def append(self, rec: LeafRecord) -> int:
        """Add the next leaf; returns its index."""
        index = self.state.size
        self.extend([rec])
        return index

    def flush(
        self,
        until: datetime,
        pool: ThreadPoolExecutor,
        prefix_of_run: Callable[[str], str] = run_prefix,
    ) -> int:
        """Write everything since the last flush, the checkpoint last; returns objects written."""
        return self.take_flush(until, prefix_of_run).write(pool)

    def take_flush(
        self, until: datetime, prefix_of_run: Callable[[str], str] = run_prefix
    ) -> FlushJob:
        """Hand everything since the last flush to a job (written by ``FlushJob.write``)."""
        if self.note is None or self.note_size != self.state.size:
            raise ArchiveError(
                f"partition {self.partition}: flush at size {self.state.size} without the "
                "checkpoint of that size (a bug)"
            )
        size = self.state.size
        puts: list[tuple[str, bytes]] = []
        for n, (e, d) in sorted(self.full_entries.items()):
            puts.append((entries_key(self.log, n, TILE_WIDTH), e))
            puts.append((data_key(self.log, n, TILE_WIDTH), d))
        if self.entries and size > self.archived:
            n, w = size // TILE_WIDTH, len(self.entries)
            puts.append((entries_key(self.log, n, w), encode_bundle(self.entries)))
            puts.append((data_key(self.log, n, w), encode_values(self.values)))
        for level, index, width, data in self.state.take_tiles():
            puts.append((tile_key(self.log, level, index, width), data))
        puts.extend(self.holes)
        days: dict[date, set[str]] = {}
        # each run's RunIndex(run_id, log, origin, partition, size, leaves, fin, head).to_json()
        index_json = RunIndexJson(self.log, self.origin, self.partition, size)
        gen = origin_generation(self.origin)
        leaf_index = self.leaf_index
        for run_id, recs in self.runs.items():
            last = recs[-1]
            fin = last.finishes
            data = index_json(
                run_id,
                zip(leaf_index[run_id], map(_seq, recs), strict=True),
                fin,
                last.chain_hash.hex() if fin else "",
            )
            puts.append((run_index_key(prefix_of_run(run_id), self.partition, size, gen), data))
            for day in {_day(recs[0].sealed_at), _day(recs[-1].sealed_at)}:
                days.setdefault(day, set()).add(run_id)
        for day, run_ids in sorted(days.items()):  # one object per flush and day, not per run
            key = day_batch_key(day, self.prefix, self.partition, size, gen)
            puts.append((key, encode_day_batch(run_ids)))
        job = FlushJob(
            self.store,
            puts,
            (checkpoint_key(self.log, size), self.note.encode()),
            until,
            size,
            size - self.archived - self.blank,
            sum(r[-1].finishes for r in self.runs.values()),
        )
        self.full_entries.clear()
        self.holes.clear()
        self.blank = 0
        self.runs.clear()
        self.leaf_index.clear()
        self.archived = size
        self.unflushed_bytes = 0
        return job


@dataclass(slots=True)
class FlushJob:
    """One flush's objects; ``write`` puts them in parallel, then the checkpoint object."""

    store: ObjectStore
    puts: list[tuple[str, bytes]]
    checkpoint: tuple[str, bytes]
    until: datetime
    size: int
    leaves: int
    finished: int
    index: Callable[[], object] | None = None  # the index step's objects (tracevault.index)

    def write(self, pool: ThreadPoolExecutor) -> int:
        """Put the objects, then the checkpoint.

        A store that can make many objects durable together (FileStore: one sync of the file
        system, not two fsyncs an object) takes them at once. Otherwise (S3) they go on the
        pool's threads: one task per thread, each taking the next object not yet taken until
        none is left, not a task per object: each task costs a queue hand-off, a thread
        wake-up and a future, every one of them a GIL round trip that the archiver's main
        thread pays for too, and a flush has hundreds of small objects. Taking the next object
        (rather than a fixed share) keeps a thread that met a slow PUT from holding up the
        flush."""
        until, store_put = self.until, self.store.put
        url = self.store.url
        index = None if self.index is None else pool.submit(self.index)  # beside the puts

        def put(k: str, v: bytes) -> None:
            try:
                store_put(k, v, retain_until=until)
            except OSError as exc:  # a store's own errors are TraceVaultErrors already
                raise ArchiveError(f"object {k} could not be written to {url}: {exc}") from exc

        put_many = getattr(self.store, "put_many", None)
        if put_many is not None:
            try:
                put_many(self.puts, retain_until=until)
            except OSError as exc:
                first = self.puts[0][0] if self.puts else self.checkpoint[0]
                raise ArchiveError(
                    f"objects of the flush to size {self.size} (the first {first}) could not "
                    f"be written to {url}: {exc}"
                ) from exc
        else:
            left = iter(self.puts)  # shared: a list iterator hands each object out once

            def put_left() -> None:
                for k, v in left:
                    put(k, v)

            n = max(1, min(pool._max_workers, len(self.puts)))
            for f in [pool.submit(put_left) for _ in range(n)]:
                f.result()
        if index is not None:
            index.result()  # before the checkpoint: what a checkpoint makes count is indexed
        put(*self.checkpoint)  # last: it makes the flush count
        return len(self.puts) + 1


def _none(level: int, index: int) -> bytes:
    raise LogError("the empty tree has no nodes")
