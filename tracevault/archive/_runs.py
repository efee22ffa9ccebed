"""Which runs the archive holds, from their keys: ``archive ls``, the day index, and the run
id of a key (a mapped ``runs/<run>/`` segment reads it back from the run's own content).

Its own module because the retention report (``_retention``) and purge (``_purge``) both
start from the same listing of runs, and ``archive ls`` needs nothing else of them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import date

from tracevault.archive._store import ObjectStore
from tracevault.archive.layout import (
    day_batch_prefix,
    day_batch_runs,
    day_prefix,
    final_key,
    parse_segment_key,
    run_id_from_key,
    run_prefix,
)
from tracevault.archive.tlog import RunIndex, parse_run_index_key
from tracevault.errors import NotFoundError, TraceVaultError

__all__ = [
    "Progress",
    "RunSummary",
    "archived_run",
    "list_runs",
    "runs_on_day",
]

Progress = Callable[[int, int], None]


def _noop(done: int, total: int) -> None:
    return None


@dataclass(frozen=True, slots=True)
class RunSummary:
    """One run as ``archive ls`` shows it (from keys alone: nothing is fetched)."""

    run_id: str
    segments: int
    events: int
    complete: bool


class _RunIds:
    """The run id of each ``runs/`` or ``index/days/`` key. A mapped ``<run>`` segment
    (``layout.run_segment``: a run id too long or odd to be named readably) does not give it
    back: it is read once from the run's own content (a run index, a receipt, the marker)."""

    def __init__(self, store: ObjectStore) -> None:
        self._store = store
        self._mapped: dict[str, str] = {}

    def __call__(self, key: str) -> str:
        rid = run_id_from_key(key)
        if rid is not None:
            return rid
        parts = key.split("/")
        seg = parts[1] if parts[0] == "runs" else parts[3]
        got = self._mapped.get(seg)
        if got is None:
            got = self._mapped[seg] = self._read(seg, key)
        return got

    def _read(self, seg: str, key: str) -> str:
        store = self._store
        keys = [key] if key.startswith("index/days/") else []
        keys += [i.key for i in store.list(f"runs/{seg}/")]
        for k in keys:
            try:
                data = store.get(k)
                if k.startswith("index/days/"):
                    if data:
                        return data.decode("utf-8")
                elif parse_run_index_key(k) is not None:
                    return RunIndex.from_json(data, k).run_id
                elif k.endswith(".receipt.json"):
                    rid = json.loads(data)["run_id"]
                    if isinstance(rid, str):
                        return rid
            except (TraceVaultError, ValueError, KeyError, TypeError):
                continue
        return f"runs/{seg}/"  # nothing names it: the report names the prefix instead


def _summaries(store: ObjectStore, keys: Iterable[str]) -> list[RunSummary]:
    runs: dict[str, list[str]] = {}
    run_of = _RunIds(store)
    for key in keys:
        runs.setdefault(run_of(key), []).append(key)
    out = []
    for run_id, ks in sorted(runs.items()):
        idx = [k for k in ks if parse_run_index_key(k) is not None]
        if idx:  # the static log: one read per index object (a run has few)
            read = [RunIndex.from_json(store.get(k), k) for k in idx]
            seqs = {s for i in read for _, s in i.leaves}
            out.append(RunSummary(run_id, len(idx), len(seqs), any(i.finished for i in read)))
            continue
        ranges = [r for r in map(parse_segment_key, ks) if r is not None]
        last = max((r[1] for r in ranges), default=-1)
        out.append(RunSummary(run_id, len(ranges), last + 1, final_key(run_id) in ks))
    return out


def _day_batch_runs(store: ObjectStore, prefix: str) -> dict[str, list[str]]:
    """run -> day-batch keys listing it (the static log's day index; shared, never purged)."""
    out: dict[str, list[str]] = {}
    for i in store.list(prefix):
        for rid in day_batch_runs(store.get(i.key)):
            out.setdefault(rid, []).append(i.key)
    return out


def runs_on_day(store: ObjectStore, day: date) -> list[str]:
    """The run ids the day index lists for ``day`` (UTC): the segment layout's markers, then
    the static log's per-flush batches, each run once, in that order."""
    seen: dict[str, None] = {}
    run_of = _RunIds(store)
    for m in store.list(day_prefix(day)):
        seen.setdefault(run_of(m.key), None)
    for rid in _day_batch_runs(store, day_batch_prefix(day)):
        seen.setdefault(rid, None)
    return list(seen)


def list_runs(
    store: ObjectStore, *, day: date | None = None, run_id: str | None = None
) -> list[RunSummary]:
    """Every archived run, the runs seen on ``day`` (UTC), or the one ``run_id``."""
    if run_id is not None:
        keys = [i.key for i in store.list(run_prefix(run_id))]
        if not keys:
            raise NotFoundError(f"run {run_id!r} is not in the archive {store.url}")
        return _summaries(store, keys)
    if day is None:
        return _summaries(store, (i.key for i in store.list("runs/")))
    out = []
    for rid in sorted(runs_on_day(store, day)):
        out.extend(_summaries(store, (i.key for i in store.list(run_prefix(rid)))))
    return out


def archived_run(store: ObjectStore, run_id: str) -> tuple[bool, int] | None:
    """(archived to its end, events archived) of ``run_id`` in either layout, or None when
    nothing of it is archived yet: :func:`list_runs` of the one run, for progress displays."""
    try:
        (summary,) = list_runs(store, run_id=run_id)
    except NotFoundError:
        return None
    return summary.complete, summary.events


def _run_ids(store: ObjectStore) -> list[str]:
    run_of = _RunIds(store)
    return sorted({run_of(i.key) for i in store.list("runs/")})


def _day_index_runs(store: ObjectStore) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    run_of = _RunIds(store)
    for m in store.list("index/days/"):
        out.setdefault(run_of(m.key), []).append(m.key)
    return out
