"""``rebuild`` and ``update``: the two ways the index is brought up to the archive."""

from __future__ import annotations

from tracevault.archive import ObjectStore
from tracevault.index._build import BuildReport, build_index, covered_sizes
from tracevault.index._read import load_index
from tracevault.index._tables import index_keys

__all__ = ["rebuild", "update"]


def rebuild(store: ObjectStore) -> BuildReport:
    """The whole index from the archive alone; every older index object is then deleted
    (index objects are unlocked and derived: docs/index.md, "Retention")."""
    return build_index(store, writer="rebuild", replace=True)


def update(store: ObjectStore, *, writer: str = "update") -> BuildReport:
    """Index only what the index does not cover yet: flushes past the tree size its objects
    name for each log, and the runs it holds as unfinished (they may have gone on)."""
    covered = covered_sizes(index_keys(store, ("runs",)))
    unfinished: list[str] = []
    if covered:
        # the runs table only: its events (~20 x its size) say nothing of which runs are done
        runs = load_index(store, tables=("runs",)).tables["runs"]
        seen: dict[str, tuple[str, int]] = {}
        for rid, status, size in zip(
            runs.column("run_id").to_pylist(),
            runs.column("status").to_pylist(),
            runs.column("checkpoint_size").to_pylist(),
            strict=True,
        ):
            if rid not in seen or size > seen[rid][1]:
                seen[rid] = (status, size)
        unfinished = sorted(r for r, (s, _) in seen.items() if s == "unfinished")
    return build_index(store, writer=writer, covered=covered, unfinished=unfinished)
