"""Building the index from the archive alone: ``index rebuild`` (everything) and ``index
update`` (only what the index does not cover yet).

Which runs: the archive's day batches (``index/day-runs/<day>/<prefix>-<p>-<size>[-<gen>]``,
one per flush, naming the runs it saw) of every flush past the tree size the index covers for
that log, plus every run the index still holds as unfinished (it may have gone on). Each such
run is read whole, up to the log's newest checkpoint at the start of the build (``upto``), from
its run index objects and the data bundles at that size; so the same archive state always
gives the same rows, and the same object names and bytes (docs/index.md, "Writing").
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from urllib.parse import unquote

from tracevault.archive import Hole, ObjectStore, holes_prefix, parse_hole_key, utc_now
from tracevault.archive.layout import DAY_BATCH_ROOT, day_batch_runs, run_prefix
from tracevault.archive.tlog import (
    RunIndex,
    checkpoint_prefix,
    data_key,
    decode_values,
    parse_checkpoint_key,
    parse_run_index_key,
)
from tracevault.errors import TraceVaultError
from tracevault.index._rows import IndexedRun, LogPlace, StatusRow, run_rows
from tracevault.index._tables import (
    day_of,
    events_table,
    index_key,
    index_keys,
    log_tag,
    parquet_bytes,
    parse_index_key,
    status_table,
    table_of,
)
from tracevault.transparency import TILE_WIDTH, tile_width

__all__ = ["BuildReport", "build_index", "covered_sizes", "hole_statuses"]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class BuildReport:
    """What one build wrote: objects, runs and events indexed, runs it could not read."""

    written: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    runs: int = 0
    events: int = 0
    statuses: int = 0
    unreadable: dict[str, str] = field(default_factory=dict)  # run id -> why
    covered: dict[str, int] = field(default_factory=dict)  # log tag -> tree size


@dataclass(frozen=True, slots=True)
class _Log:
    prefix: str
    generation: str
    partition: int

    @property
    def tag(self) -> str:
        return log_tag(self.prefix, self.generation, self.partition)


def _log_of(key: str) -> _Log:
    """``log/<prefix>/[<gen>/]<p>/`` to its parts."""
    parts = key.strip("/").split("/")
    gen = parts[2] if len(parts) == 4 else ""
    return _Log(unquote(parts[1]), gen, int(parts[-1]))


def _parse_batch(key: str) -> tuple[_Log, int] | None:
    """A day batch's ``<prefix>-<p>-<size:012d>[-<gen>]`` (the prefix may hold ``-``)."""
    parts = key.rsplit("/", 1)[-1].split("-")
    for i in range(len(parts) - 1, 1, -1):
        if len(parts[i]) == 12 and parts[i].isdigit() and parts[i - 1].isdigit():
            gen = "-".join(parts[i + 1 :])
            return _Log(unquote("-".join(parts[: i - 1])), gen, int(parts[i - 1])), int(parts[i])
    return None


def covered_sizes(keys: Iterable[str]) -> dict[str, int]:
    """log tag -> the tree size the index objects among ``keys`` cover."""
    out: dict[str, int] = {}
    for k in keys:
        parsed = parse_index_key(k)
        if parsed is not None and parsed.table == "runs":
            out[parsed.log_tag] = max(out.get(parsed.log_tag, 0), parsed.last)
    return out


class _Reader:
    """The archive's objects a build reads, each data bundle once."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store
        self._bundles: dict[str, list[bytes]] = {}
        self._keys: dict[tuple[str, int, int], str] = {}  # (log, tile, upto) -> bundle key
        self.newest: dict[str, int] = {}  # log key -> newest checkpoint size at first sight

    def newest_size(self, log_key: str) -> int:
        if log_key not in self.newest:
            listed = self.store.list(checkpoint_prefix(log_key))
            sizes = [parse_checkpoint_key(i.key) for i in listed]
            self.newest[log_key] = max((s for s in sizes if s is not None), default=0)
        return self.newest[log_key]

    def value(self, log_key: str, leaf: int, upto: int) -> bytes:
        n = leaf // TILE_WIDTH
        key = self._keys.get((log_key, n, upto))
        if key is None:
            key = self._keys[log_key, n, upto] = data_key(log_key, n, tile_width(0, n, upto))
        got = self._bundles.get(key)
        if got is None:
            if len(self._bundles) > 64:  # bounded memory: runs arrive roughly in log order
                self._bundles.clear()
            got = self._bundles[key] = decode_values(self.store.get(key), key)
        return got[leaf % TILE_WIDTH]

    def run(self, run_id: str) -> IndexedRun | None:
        """The run's rows up to its log's newest checkpoint, or None if it has no run index
        object (the legacy segment layout, which this index does not cover) or none at or
        below that checkpoint (an archiver is writing its first flush right now)."""
        keys = [i.key for i in self.store.list(run_prefix(run_id))]
        idx_keys = [k for k in keys if parse_run_index_key(k) is not None]
        if not idx_keys:
            return None
        indexes = [RunIndex.from_json(self.store.get(k), k) for k in idx_keys]
        log_key = indexes[0].log
        upto = self.newest_size(log_key)
        indexes = [i for i in indexes if i.log == log_key and i.size <= upto]
        if not indexes:  # its flush is being written (no checkpoint yet): the next update
            return None
        pairs = sorted({(seq, leaf) for i in indexes for leaf, seq in i.leaves})
        lg = _log_of(log_key)
        # the checkpoint of the run's last flush: it covers every leaf of the run indexed
        # here, and does not depend on when the index was built (a rebuild equals an update)
        size = max(i.size for i in indexes)
        place = LogPlace(log_key, indexes[0].origin, lg.partition, lg.generation, size)
        values = [self.value(log_key, leaf, upto) for _, leaf in pairs]
        done = [i for i in indexes if i.finished]
        return run_rows(
            run_id,
            values,
            [leaf for _, leaf in pairs],
            place,
            finished=bool(done),
            head=done[0].head if done else "",
        )


def _holes(store: ObjectStore, log: _Log, upto: int) -> list[StatusRow]:
    from tracevault.archive.tlog import log_prefix  # noqa: PLC0415 - one use

    out = []
    for info in store.list(holes_prefix(log_prefix(log.prefix, log.partition, log.generation))):
        hk = parse_hole_key(info.key)
        if hk is None or hk.end > upto:
            continue
        out += hole_statuses(Hole.from_json(store.get(info.key), info.key), info.key)
    return out


def hole_statuses(hole: Hole, key: str) -> list[StatusRow]:
    """A ``hole`` status row for each run the hole object at ``key`` names."""
    at = datetime.fromisoformat(hole.detected_at.replace("Z", "+00:00")).astimezone(UTC)
    micros = int(at.timestamp() * 1_000_000)
    why = f"{hole.kind} leaves {hole.first}..{hole.end - 1}: {hole.why}"
    return [StatusRow(r, "hole", micros, why, key) for r in sorted(hole.runs)]


def _candidates(
    store: ObjectStore, covered: dict[str, int], unfinished: Iterable[str]
) -> tuple[dict[str, None], dict[str, _Log]]:
    """Run ids to (re)index, in log order, and the logs with flushes past what is covered."""
    runs: dict[str, None] = dict.fromkeys(unfinished)
    logs: dict[str, _Log] = {}
    batches = []
    for info in store.list(DAY_BATCH_ROOT):
        parsed = _parse_batch(info.key)
        if parsed is None or parsed[1] <= covered.get(parsed[0].tag, 0):
            continue
        batches.append((parsed[0].tag, parsed[1], info.key))
        logs[parsed[0].tag] = parsed[0]
    for _, _, key in sorted(batches):
        runs.update(dict.fromkeys(day_batch_runs(store.get(key))))
    return runs, logs


def build_index(
    store: ObjectStore,
    *,
    writer: str = "rebuild",
    covered: dict[str, int] | None = None,
    unfinished: Iterable[str] = (),
    replace: bool = False,
) -> BuildReport:
    """Index every run past ``covered`` (log tag -> tree size; None: from the start) and the
    ``unfinished`` ones; write one object per table, day and log. ``replace`` (a rebuild)
    then deletes every other index object: they are unlocked and derived."""
    covered = dict(covered or {})
    before = index_keys(store)
    runs, _ = _candidates(store, covered, unfinished)
    reader = _Reader(store)
    report = BuildReport()
    groups: dict[tuple[str, str, str], list[dict[str, object]]] = {}
    event_groups: dict[tuple[str, str, str], list[IndexedRun]] = {}
    statuses: dict[tuple[str, str], list[StatusRow]] = {}
    for run_id in runs:
        try:
            got = reader.run(run_id)
        except TraceVaultError as exc:
            report.unreadable[run_id] = str(exc)
            log.warning("index: run %r not indexed: %s", run_id, exc)
            continue
        if got is None:
            continue
        row = got.run
        tag = log_tag(*_tag_parts(row["log"]))
        day = day_of(row["started"])
        groups.setdefault(("runs", day, tag), []).append(row)
        event_groups.setdefault(("events", day, tag), []).append(got)
        for s in got.statuses:
            statuses.setdefault((day_of(s.at), tag), []).append(s)
        report.runs += 1
        report.events += got.n_events
    for log_key in reader.newest:
        lg = _log_of(log_key)
        for s in _holes(store, lg, reader.newest[log_key]):
            statuses.setdefault((day_of(s.at), lg.tag), []).append(s)
    uptos = {_log_of(k).tag: v for k, v in reader.newest.items()}
    now = utc_now()
    for (table, day, tag), rows in sorted(groups.items()):
        rows.sort(key=lambda r: (r["run_id"], r.get("seq", 0)))
        key = index_key(table, day, writer, tag, (covered.get(tag, 0), uptos[tag]))
        store.put(key, parquet_bytes(table_of(table, rows)), retain_until=now)
        report.written.append(key)
    for (table, day, tag), got_runs in sorted(event_groups.items()):
        # each run's events are in seq order already: ordering the runs orders the rows
        got_runs.sort(key=lambda g: str(g.run["run_id"]))
        key = index_key(table, day, writer, tag, (covered.get(tag, 0), uptos[tag]))
        table_ = events_table([g.events for g in got_runs])
        store.put(key, parquet_bytes(table_), retain_until=now)
        report.written.append(key)
    for (day, tag), srows in sorted(statuses.items()):
        srows.sort(key=lambda s: (s.run_id, s.at, s.status, s.source))
        key = index_key("status", day, writer, tag, (covered.get(tag, 0), uptos[tag]))
        store.put(key, parquet_bytes(status_table(srows)), retain_until=now)
        report.written.append(key)
        report.statuses += len(srows)
    if replace:
        for key in sorted(set(before) - set(report.written)):
            store.delete(key)
            report.deleted.append(key)
    report.covered = {**covered, **uptos}
    return report


def _tag_parts(log_key: object) -> tuple[str, str, int]:
    lg = _log_of(str(log_key))
    return lg.prefix, lg.generation, lg.partition
