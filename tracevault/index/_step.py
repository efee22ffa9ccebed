"""The archiver's index step: each flush's index rows, written with the flush (docs/index.md,
"Writing").

The archiver hands the step what it already holds at a flush (``take``, on its main thread:
references, no work), and the flush's thread calls the returned ``IndexFlush`` before it puts
the flush's checkpoint object. So whatever a checkpoint makes count is indexed: a crash before
the checkpoint redoes the flush, and its index objects with it; none after it is owed.

Cheap, because the archiver's budget is a tenth of its throughput: the flush's sealed values
are walked once in C (``_ccolumns.c``) straight into Arrow buffers; a run's row is its row of
the previous flush (held here while the run is open) plus this flush's counts. Only a run
that goes on after a restart is read back from the archive (``_Reader.run``, as a rebuild
reads it), so the row always says what a rebuild says. Without the C (not built,
``TRACEVAULT_NO_C``, a value it declines) the rows are built by ``run_rows``, the reference.

Idempotent and safe from several instances: each object is named by the log and the tree
sizes it covers, and its writer name carries a digest of its bytes, so the same flush
indexed again is the same object (a no-op put) and a flush indexed differently (another
instance's view) is another object, never a refused overwrite; readers keep one row per run
and per event (``_read``).
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc

from tracevault import native
from tracevault.archive import Hole, ObjectStore, utc_now
from tracevault.errors import TraceVaultError
from tracevault.index._build import _Reader, _tag_parts, hole_statuses
from tracevault.index._rows import (
    ERASE_AGENT,
    KINDS,
    StatusRow,
    agent_key_of,
    run_rows,
    tenant_of,
    tool_name,
)
from tracevault.index._tables import (
    EVENT_SCHEMA,
    day_of,
    events_table,
    index_key,
    log_tag,
    parquet_bytes,
    status_table,
    table_of,
)
from tracevault.schemas.fast import armed_walks
from tracevault.transparency import CONTESTED_PREFIX

__all__ = ["IndexFlush", "IndexStep", "held"]

log = logging.getLogger(__name__)

_ccolumns: ModuleType | None = native.load("tracevault.index._ccolumns")
_OPEN_RUNS = 100_000  # open runs' rows held; one evicted is read back if it goes on
_TS = pa.timestamp("us", tz="UTC")
_COUNTS = tuple((k, f"n_{k.lower()}") for k in KINDS)  # a kind and its runs column


class LeafLike(Protocol):
    """What the step reads of an archived leaf (the archiver's ``LeafRecord``)."""

    @property
    def seq(self) -> int: ...
    @property
    def chain_hash(self) -> bytes: ...
    @property
    def finishes(self) -> bool: ...
    @property
    def value(self) -> bytes: ...


class FlushingLog(Protocol):
    """What the step reads of a partition log about to be flushed (``PartitionLog``)."""

    @property
    def log(self) -> str: ...
    @property
    def origin(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def archived(self) -> int: ...
    @property
    def size(self) -> int: ...
    @property
    def runs(self) -> Mapping[str, Sequence[LeafLike]]: ...
    @property
    def leaf_index(self) -> Mapping[str, Sequence[int]]: ...
    @property
    def holes(self) -> Sequence[tuple[str, bytes]]: ...


@dataclass(slots=True)
class _Part:
    """One run's part of a flush: what its row adds up."""

    counts: dict[str, int]
    first_at: int
    max_at: int
    tools: set[str]
    models: set[str]
    errors: set[str]
    agent_id: str
    agent_version: str
    tenant: str | None
    agent_key: str | None
    last_error: bool  # the part's last event carries an error
    statuses: list[StatusRow] = field(default_factory=list)


def held(
    plog: FlushingLog,
) -> tuple[str, str, int, tuple[int, int], dict[str, Sequence[LeafLike]], dict[str, Sequence[int]],
           list[tuple[str, bytes]]]:  # fmt: skip
    """What a flush of ``plog`` holds, as references (log, origin, partition, the tree sizes
    it covers, runs, leaf indexes, holes): the in-process step's and the child's."""
    return (plog.log, plog.origin, plog.partition, (plog.archived, plog.size), dict(plog.runs),
            dict(plog.leaf_index), [(k, v) for k, v in plog.holes])  # fmt: skip


class IndexStep:
    """The index rows of an archiver's flushes, one ``take`` per flush."""

    def __init__(self, store: ObjectStore, *, writer: str = "archiver") -> None:
        self.store = store
        self.writer = writer
        self._open: dict[str, dict[str, Any]] = {}  # run id -> its newest row, while open
        self._lock = threading.Lock()
        walks = armed_walks()
        self._walks = None if walks is None or _ccolumns is None else walks
        self.c_flushes = 0  # flushes whose events the C walked (the rest: Python)
        self.events = 0  # events indexed
        self.cpu_s = 0.0  # CPU time of the flushes' threads in the step (what it costs)
        # pyarrow imports pandas (where installed) at its first table: now, at start-up,
        # before the index child freezes what it built (_worker.serve), not in a flush
        pa.Table.from_arrays([pa.array([], pa.int64())], names=["warm"])

    def take(self, plog: FlushingLog) -> IndexFlush:
        """What ``plog``'s next flush holds, before it is taken (call on the archiver's
        thread, right before ``take_flush``, which clears it)."""
        return IndexFlush(self, *held(plog))

    # -- a run's row --------------------------------------------------------------------

    def _prior(self, run_id: str, first_seq: int) -> dict[str, Any] | None:
        with self._lock:
            row = self._open.get(run_id)
        if row is not None or first_seq == 0:
            return row
        try:  # a run going on after a restart (or evicted): as a rebuild reads it
            got = _Reader(self.store).run(run_id)
        except TraceVaultError as exc:
            log.warning("index: run %r read back for its row failed: %s", run_id, exc)
            return None
        return None if got is None else got.run

    def _remember(self, run_id: str, row: dict[str, Any]) -> None:
        with self._lock:
            if row["status"] == "unfinished":
                self._open[run_id] = row
                while len(self._open) > _OPEN_RUNS:
                    self._open.pop(next(iter(self._open)))
            else:
                self._open.pop(run_id, None)


def _merge(  # noqa: PLR0917 - a row's inputs, as the flush holds them
    prior: dict[str, Any] | None,
    run_id: str,
    part: _Part,
    recs: Sequence[LeafLike],
    leaves: Sequence[int],
    place: dict[str, Any],
) -> dict[str, Any]:
    """The run's row after this flush: its prior row (None: the run starts here) plus
    ``part``; the same row ``run_rows`` gives for the run read whole (a rebuild's).
    ``place``: the flush's log columns (partition, generation, origin, log, checkpoint size)."""
    last = recs[-1]
    if prior is None:
        counts = dict(part.counts)
        tools, models, errors = part.tools, part.models, part.errors
        head_row: dict[str, Any] = {
            "tenant": part.tenant,
            "agent_id": part.agent_id,
            "agent_key": part.agent_key,
            "agent_version": part.agent_version,
            "started": part.first_at,
            "ended": part.max_at,
            "events": len(recs),
            "first_leaf": min(leaves),
            "last_leaf": max(leaves),
        }
        finished, head = False, ""
    else:
        counts = {k: prior[col] + part.counts[k] for k, col in _COUNTS}
        tools = set(prior["tools"]) | part.tools
        models = set(prior["models"]) | part.models
        errors = set(prior["error_types"]) | part.errors
        head_row = {
            "tenant": prior["tenant"],
            "agent_id": prior["agent_id"],
            "agent_key": prior["agent_key"],
            "agent_version": prior["agent_version"],
            "started": prior["started"],
            "ended": max(prior["ended"], part.max_at),
            "events": prior["events"] + len(recs),
            "first_leaf": min(prior["first_leaf"], *leaves),
            "last_leaf": max(prior["last_leaf"], *leaves),
        }
        finished = prior["status"] != "unfinished"
        head = prior["head"]
    if last.finishes and not finished:
        finished, head = True, last.chain_hash.hex()
    errored = last.finishes and part.last_error
    status = "errored" if errored else ("finished" if finished else "unfinished")
    return {
        "run_id": run_id,
        **head_row,
        "status": status,
        **{col: counts[k] for k, col in _COUNTS},
        "tools": sorted(tools),
        "models": sorted(models),
        "error_types": sorted(errors),
        **place,
        "head": head,
    }


@dataclass(slots=True)
class IndexFlush:
    """One flush's index rows, built and written by ``__call__`` on the flush's thread."""

    step: IndexStep
    log: str
    origin: str
    partition: int
    sizes: tuple[int, int]  # the tree sizes the flush covers: (archived, new size)
    runs: dict[str, Sequence[LeafLike]]
    leaf_index: dict[str, Sequence[int]]
    holes: list[tuple[str, bytes]]

    def __call__(self) -> list[str]:
        """Build and put this flush's index objects (unlocked: derived, rebuildable); the
        keys written."""
        started = time.thread_time()
        try:
            return self._index()
        finally:
            with self.step._lock:
                self.step.cpu_s += time.thread_time() - started
                self.step.events += sum(len(r) for r in self.runs.values())

    def _index(self) -> list[str]:
        runs = {r: recs for r, recs in self.runs.items() if recs}
        parts, events = self._columns(runs)
        step, size = self.step, self.sizes[1]
        _, generation, partition = _tag_parts(self.log)
        place = {"partition": partition, "generation": generation, "origin": self.origin,
                 "log": self.log, "checkpoint_size": size}  # fmt: skip
        rows: list[dict[str, Any]] = []
        statuses: list[StatusRow] = []
        days: list[str] = []
        for run_id, recs in runs.items():
            part = parts.get(run_id)
            if part is None:  # unreadable: warned, left to `index rebuild`
                continue
            row = _merge(
                step._prior(run_id, recs[0].seq),
                run_id,
                part,
                recs,
                self.leaf_index[run_id],
                place,
            )
            step._remember(run_id, row)
            rows.append(row)
            days.append(day_of(row["started"]))
            statuses += part.statuses
        for key, data in self.holes:
            statuses += hole_statuses(Hole.from_json(data, key), key)
        return self._write(rows, days, events, statuses)

    def _columns(
        self, runs: dict[str, Sequence[LeafLike]]
    ) -> tuple[dict[str, _Part], pa.Table | None]:
        """Each run's part and the flush's events table (rows run after run), in C when it
        reads every value, else in Python."""
        walks = self.step._walks
        if walks is not None and _ccolumns is not None and runs:
            sealed, trace, kinds = walks
            values = [r.value for recs in runs.values() for r in recs]
            counts = [len(recs) for recs in runs.values()]
            tool_kind = [k.value for k in kinds].index("TOOL_CALL")
            got = _ccolumns.columns(values, counts, sealed, trace, len(kinds), tool_kind)
            if got is not None:
                self.step.c_flushes += 1
                return self._from_c(runs, got, [k.value for k in kinds])
        return self._from_python(runs)

    def _from_c(
        self,
        runs: dict[str, Sequence[LeafLike]],
        got: tuple[int, dict[str, Any], list[tuple[int, bytes]], list[tuple[Any, ...]]],
        kind_names: list[str],
    ) -> tuple[dict[str, _Part], pa.Table]:
        n, bufs, tool_reqs, per_run = got
        tool_col = _strings(n, *bufs["tool"])
        fixed: dict[int, str | None] = {row: tool_name(req) for row, req in tool_reqs}
        if fixed:  # the few the C left to Python
            tools = tool_col.to_pylist()
            for row, name in fixed.items():
                tools[row] = name
            tool_col = pa.array(tools, pa.string())
        parts: dict[str, _Part] = {}
        run_ids: list[str] = []
        start = 0
        for (run_id, recs), info in zip(runs.items(), per_run, strict=True):
            kc, first_at, max_at, models, errors, names, agent_id, version, key, note, err = info
            end = start + len(recs)
            first_seq0 = recs[0].seq == 0
            tool_set = set(names)
            if fixed:
                tool_set |= {t for r, t in fixed.items() if start <= r < end and t is not None}
            part = _Part(
                dict(zip(kind_names, kc, strict=True)),
                first_at,
                max_at,
                tool_set,
                set(models),
                set(errors),
                agent_id,
                version,
                tenant_of(key) if first_seq0 else None,
                agent_key_of(note) if first_seq0 else None,
                err,
                self._implied(run_id, agent_id, recs) if first_seq0 else [],
            )
            parts[run_id] = part
            run_ids += [run_id] * len(recs)
            start = end
        leaves = [x for r in runs for x in self.leaf_index[r]]
        kinds = pc.take(pa.array(kind_names), _fixed(pa.uint8(), n, bufs["kind"]))
        arrays = {
            "run_id": pa.array(run_ids, pa.string()),
            "seq": _fixed(pa.int64(), n, bufs["seq"]),
            "kind": kinds,
            "at": _fixed(_TS, n, bufs["at"]),
            "tool": tool_col,
            "model": _strings(n, *bufs["model"]),
            "duration_us": _fixed(pa.int64(), n, *reversed(bufs["duration_us"])),
            "error_type": _strings(n, *bufs["error_type"]),
            "request_bytes": _fixed(pa.int64(), n, bufs["request_bytes"]),
            "response_bytes": _fixed(pa.int64(), n, bufs["response_bytes"]),
            "error_bytes": _fixed(pa.int64(), n, *reversed(bufs["error_bytes"])),
            "hash": _strings(n, None, *bufs["hash"]),
            "leaf": pa.array(leaves, pa.int64()),
        }
        table = pa.Table.from_arrays([arrays[f.name] for f in EVENT_SCHEMA], schema=EVENT_SCHEMA)
        return parts, table

    def _implied(self, run_id: str, agent_id: str, recs: Sequence[LeafLike]) -> list[StatusRow]:
        """The status rows an erasure or contested record's first value says of another
        run (read in Python: such records are few)."""
        if not run_id.startswith(CONTESTED_PREFIX) and agent_id != ERASE_AGENT:
            return []
        leaf = self.leaf_index[run_id][0]
        try:
            got = run_rows(run_id, [recs[0].value], [leaf], None, finished=False, head="")
        except TraceVaultError as exc:
            log.warning("index: the first record of run %r not read: %s", run_id, exc)
            return []
        return got.statuses

    def _from_python(
        self, runs: dict[str, Sequence[LeafLike]]
    ) -> tuple[dict[str, _Part], pa.Table | None]:
        parts: dict[str, _Part] = {}
        cols = []
        for run_id, recs in runs.items():
            leaves = list(self.leaf_index[run_id])
            try:
                got = run_rows(run_id, [r.value for r in recs], leaves, None,
                               finished=False, head="")  # fmt: skip
            except TraceVaultError as exc:
                log.warning("index: run %r not indexed at this flush: %s", run_id, exc)
                continue
            row, first_seq0 = got.run, recs[0].seq == 0
            parts[run_id] = _Part(
                {k: row[f"n_{k.lower()}"] for k in KINDS},
                row["started"],
                row["ended"],
                set(row["tools"]),
                set(row["models"]),
                set(row["error_types"]),
                row["agent_id"],
                row["agent_version"],
                row["tenant"] if first_seq0 else None,
                row["agent_key"] if first_seq0 else None,
                got.events["error_type"][-1] is not None,
                got.statuses if first_seq0 else [],
            )
            cols.append(got.events)
        return parts, events_table(cols) if cols else None

    # -- the objects ----------------------------------------------------------------------

    def _write(
        self,
        rows: list[dict[str, Any]],
        days: list[str],
        events: pa.Table | None,
        statuses: list[StatusRow],
    ) -> list[str]:
        tag = log_tag(*_tag_parts(self.log))
        objects: list[tuple[str, str, pa.Table]] = []
        for day in sorted(set(days)):
            run_rows_ = [r for r, d in zip(rows, days, strict=True) if d == day]
            objects.append(("runs", day, table_of("runs", run_rows_)))
            if events is not None and events.num_rows:
                ids = pa.array([r["run_id"] for r in run_rows_], pa.string())
                mine = events if len(set(days)) == 1 else events.filter(
                    pc.is_in(events["run_id"], ids)
                )  # fmt: skip
                if mine.num_rows:
                    objects.append(("events", day, mine))
        by_day: dict[str, list[StatusRow]] = {}
        for s in statuses:
            by_day.setdefault(day_of(s.at), []).append(s)
        for day, srows in sorted(by_day.items()):
            srows.sort(key=lambda s: (s.run_id, s.at, s.status, s.source))
            objects.append(("status", day, status_table(srows)))
        now, written = utc_now(), []
        for table, day, data in objects:
            body = parquet_bytes(data)
            writer = f"{self.step.writer}.{hashlib.sha256(body).hexdigest()[:12]}"
            key = index_key(table, day, writer, tag, self.sizes)
            self.step.store.put(key, body, retain_until=now)
            written.append(key)
        return written


def _fixed(typ: pa.DataType, n: int, data: bytes, valid: bytes | None = None) -> pa.Array:
    return pa.Array.from_buffers(typ, n, [_buf(valid), pa.py_buffer(data)])


def _strings(n: int, valid: bytes | None, offsets: bytes, data: bytes) -> pa.Array:
    bufs = [_buf(valid), pa.py_buffer(offsets), pa.py_buffer(data)]
    return pa.Array.from_buffers(pa.string(), n, bufs)


def _buf(b: bytes | None) -> pa.Buffer | None:
    return None if b is None else pa.py_buffer(b)
