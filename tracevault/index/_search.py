"""Searching the index: filters to typed rows, read-only SQL, and the index's lag.

``search(store, Filters(...))`` is the API the CLI and the desk share: it returns
:class:`RunHit` rows, each carrying what verifying that run needs (run id, partition,
generation, origin, leaf range, checkpoint size). The index is never trusted for more than
finding runs: ``tracevault search --verify`` verifies each hit from the archive
(docs/index.md, "Trust").
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any

import duckdb

from tracevault.archive import ObjectStore
from tracevault.errors import ConfigError, NotFoundError
from tracevault.index._build import _parse_batch, covered_sizes
from tracevault.index._read import LoadedIndex, load_index, open_views
from tracevault.index._rows import KINDS
from tracevault.index._tables import TABLES, index_keys

__all__ = [
    "FILTERS",
    "STATUSES",
    "Filters",
    "IndexLag",
    "RunHit",
    "RunList",
    "SearchResult",
    "index_lag",
    "run_sql",
    "search",
]

STATUSES = ("finished", "unfinished", "errored", "contested", "hole", "erased")
FILTERS = ("agent", "tenant", "since", "until", "status", "tool", "model", "kind", "error",
           "min_events")  # fmt: skip
_BUILD_HINT = "build it with `tracevault index rebuild`"


@dataclass(frozen=True, slots=True)
class Filters:
    """What an investigator filters on; every given filter must hold (AND). ``since`` /
    ``until`` bound the run's start (UTC, ``until`` exclusive); ``tool``, ``model``,
    ``kind``, ``error`` (an error type) hold when any event of the run has it."""

    agent: str | None = None
    tenant: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    status: str | None = None
    tool: str | None = None
    model: str | None = None
    kind: str | None = None
    error: str | None = None
    min_events: int | None = None
    limit: int | None = None

    @classmethod
    def of(cls, **given: Any) -> Filters:
        """From keyword arguments, refusing an unknown one naming the valid ones."""
        unknown = sorted(set(given) - {*FILTERS, "limit"})
        if unknown:
            raise ConfigError(
                f"unknown filter(s) {', '.join(unknown)}; valid: {', '.join(FILTERS)}"
            )
        return cls(**given)

    def where(self) -> tuple[str, list[Any]]:
        if self.status is not None and self.status not in STATUSES:
            raise ConfigError(f"unknown status {self.status!r}; valid: {', '.join(STATUSES)}")
        conds: list[str] = []
        args: list[Any] = []
        for col, val in (("agent_id", self.agent), ("tenant", self.tenant),
                         ("status", self.status)):  # fmt: skip
            if val is not None:
                conds.append(f"{col} = ?")
                args.append(val)
        for col, val in (("tools", self.tool), ("models", self.model), ("error_types", self.error)):
            if val is not None:
                conds.append(f"list_contains({col}, ?)")
                args.append(val)
        if self.kind is not None:
            if self.kind not in KINDS:
                raise ConfigError(f"unknown kind {self.kind!r}; valid: {', '.join(KINDS)}")
            conds.append(f"n_{self.kind.lower()} > 0")
        if self.since is not None:
            conds.append("started >= ?")
            args.append(self.since.astimezone(UTC))
        if self.until is not None:
            conds.append("started < ?")
            args.append(self.until.astimezone(UTC))
        if self.min_events is not None:
            conds.append("events >= ?")
            args.append(self.min_events)
        return (" AND ".join(conds) or "TRUE"), args

    def days(self) -> list[str] | None:
        """The day partitions a time range can touch (None: all): Hive pruning."""
        if self.since is None or self.until is None:
            return None
        first, last = self.since.astimezone(UTC).date(), self.until.astimezone(UTC).date()
        if (last - first).days > 366:
            return None
        return [(first + timedelta(days=i)).isoformat() for i in range((last - first).days + 1)]


@dataclass(frozen=True, slots=True)
class RunHit:
    """One run the index found, with what verifying it needs."""

    run_id: str
    tenant: str | None
    agent_id: str
    agent_key: str | None
    agent_version: str
    started: datetime
    ended: datetime
    status: str
    status_reason: str | None
    events: int
    tools: tuple[str, ...]
    models: tuple[str, ...]
    error_types: tuple[str, ...]
    partition: int | None
    generation: str | None
    origin: str | None
    first_leaf: int | None
    last_leaf: int | None
    checkpoint_size: int | None

    def to_json(self) -> dict[str, Any]:
        out = {f: getattr(self, f) for f in self.__dataclass_fields__}
        out["started"] = self.started.isoformat()
        out["ended"] = self.ended.isoformat()
        for f in ("tools", "models", "error_types"):
            out[f] = list(out[f])
        return out


_HIT_COLUMNS = ", ".join(RunHit.__dataclass_fields__)


@dataclass(slots=True)
class SearchResult:
    hits: list[RunHit]
    skipped: dict[str, str] = field(default_factory=dict)  # index object -> why
    objects: int = 0


def _loaded(
    store: ObjectStore, days: list[str] | None = None, tables: tuple[str, ...] = TABLES
) -> LoadedIndex:
    index = load_index(store, days=days, tables=tables)
    if index.empty and not index.skipped:
        if days is not None and index_keys(store, ("runs",)):
            return index  # an index, nothing on those days
        raise NotFoundError(f"the archive {store.url} has no index; {_BUILD_HINT}")
    return index


def _hit(row: tuple[Any, ...]) -> RunHit:
    vals = list(row)
    for i in (10, 11, 12):
        vals[i] = tuple(vals[i] or ())
    return RunHit(*vals)


def search(store: ObjectStore, filters: Filters) -> SearchResult:
    """The runs every filter holds for, newest start first."""
    where, args = filters.where()
    index = _loaded(store, filters.days(), ("runs", "status"))  # a run list reads no events
    con = open_views(index)
    try:
        limit = "" if filters.limit is None else f" LIMIT {int(filters.limit)}"
        # the WHERE is built from fixed column names; every value is a bound parameter
        query = f"SELECT {_HIT_COLUMNS} FROM runs WHERE {where} ORDER BY started DESC, run_id"  # noqa: S608
        rows = con.execute(query + limit, args).fetchall()
    finally:
        con.close()
    return SearchResult([_hit(r) for r in rows], index.skipped, len(index.objects))


class RunList:
    """The index's run list loaded once and kept, for many paged searches (the desk's Runs
    page): ``search`` loads every object and builds the views per call, which over a 1M-run
    index is seconds; here the deduplicated ``runs`` view is materialised once, and loaded
    again only when the index's objects change (a listing of ``index/`` per call)."""

    def __init__(self, store: ObjectStore) -> None:
        self._store = store
        self._lock = threading.Lock()
        self._keys: tuple[str, ...] = ()
        self._con: duckdb.DuckDBPyConnection | None = None
        self._skipped: dict[str, str] = {}

    def page(
        self, filters: Filters, *, offset: int, limit: int, id_contains: str = ""
    ) -> tuple[list[RunHit], int, dict[str, str]]:
        """Hits ``offset`` .. ``offset + limit`` of the runs every filter holds for (and
        whose id contains ``id_contains``), newest start first; the number of all of them;
        the index objects skipped as unreadable."""
        where, args = filters.where()
        if id_contains:
            where += " AND contains(lower(run_id), ?)"
            args.append(id_contains.lower())
        with self._lock:
            con = self._fresh()
            total = con.execute(f"SELECT count(*) FROM runs_m WHERE {where}", args).fetchone()  # noqa: S608
            query = (
                f"SELECT {_HIT_COLUMNS} FROM runs_m WHERE {where} "  # noqa: S608
                "ORDER BY started DESC, run_id LIMIT ? OFFSET ?"
            )
            rows = con.execute(query, [*args, int(limit), int(offset)]).fetchall()
        return [_hit(r) for r in rows], int(total[0]) if total else 0, dict(self._skipped)

    def close(self) -> None:
        with self._lock:
            if self._con is not None:
                self._con.close()
                self._con = None

    def _fresh(self) -> duckdb.DuckDBPyConnection:
        keys = tuple(sorted(index_keys(self._store, ("runs", "status"))))
        if self._con is not None and keys == self._keys:
            return self._con
        index = _loaded(self._store, None, ("runs", "status"))
        con = open_views(index)
        con.execute("CREATE TEMP TABLE runs_m AS SELECT * FROM runs")  # the dedup, once
        if self._con is not None:
            self._con.close()
        self._con, self._keys, self._skipped = con, keys, index.skipped
        return con


_ALLOWED = {duckdb.StatementType.SELECT}


def run_sql(store: ObjectStore, sql: str) -> tuple[list[str], list[tuple[Any, ...]], LoadedIndex]:
    """One read-only query over the views ``runs``, ``events`` and ``status``: a single
    SELECT (or WITH … SELECT); anything else (writes, ATTACH, COPY, INSTALL/LOAD, SET,
    PRAGMA, several statements) is refused before it runs, and reading files or URLs fails
    in DuckDB (external access off). Returns (column names, rows, the loaded index)."""
    try:
        stmts = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise ConfigError(f"--sql does not parse: {exc}") from exc
    if len(stmts) != 1 or stmts[0].type not in _ALLOWED:
        kinds = ", ".join(s.type.name for s in stmts) or "nothing"
        raise ConfigError(
            f"--sql runs one read-only SELECT over the views runs, events and status; "
            f"refused: {kinds}"
        )
    index = _loaded(store)
    con = open_views(index)
    try:
        cur = con.execute(sql)
        cols = [d[0] for d in cur.description or ()]
        rows = cur.fetchall()
    except duckdb.PermissionException as exc:
        raise ConfigError(f"--sql may read only the index's views: {exc}") from exc
    except duckdb.BinderException as exc:  # an unknown column or view: name the valid ones
        raise ConfigError(f"--sql failed: {str(exc).splitlines()[0]}; {_columns(con)}") from exc
    except duckdb.Error as exc:
        raise ConfigError(f"--sql failed: {str(exc).splitlines()[0]}") from exc
    finally:
        con.close()
    return cols, rows, index


def _columns(con: duckdb.DuckDBPyConnection) -> str:
    views = []
    for view in ("runs", "events", "status"):
        cols = [d[0] for d in con.execute(f"SELECT * FROM {view} LIMIT 0").description or ()]  # noqa: S608
        views.append(f"{view}({', '.join(cols)})")
    return "valid: " + "; ".join(views)


@dataclass(frozen=True, slots=True)
class IndexLag:
    """How far the index is behind the archive, per partition log (tree sizes)."""

    behind: dict[str, tuple[int, int]]  # log tag -> (indexed size, archived size)
    flushes: int  # archived flushes the index does not cover yet
    newest_unindexed_day: date | None

    @property
    def leaves(self) -> int:
        return sum(a - i for i, a in self.behind.values())

    def __str__(self) -> str:
        if not self.behind:
            return "the index covers the whole archive"
        logs = ", ".join(f"{t}: {i} of {a}" for t, i, a in _rows(self.behind))
        return (
            f"the index is {self.leaves} leaves ({self.flushes} archived flushes) behind the "
            f"archive ({logs}); `tracevault index update` catches it up"
        )


def _rows(behind: dict[str, tuple[int, int]]) -> Iterable[tuple[str, int, int]]:
    return ((t, i, a) for t, (i, a) in sorted(behind.items()))


def index_lag(store: ObjectStore) -> IndexLag:
    """From keys alone: the tree size each log's index objects cover against the archive's
    day batches (one per flush)."""
    from tracevault.archive.layout import DAY_BATCH_ROOT  # noqa: PLC0415

    covered = covered_sizes(index_keys(store, ("runs",)))
    archived: dict[str, int] = {}
    flushes = 0
    newest: date | None = None
    for info in store.list(DAY_BATCH_ROOT):
        parsed = _parse_batch(info.key)
        if parsed is None:
            continue
        tag, size = parsed[0].tag, parsed[1]
        archived[tag] = max(archived.get(tag, 0), size)
        if size > covered.get(tag, 0):
            flushes += 1
            day = date.fromisoformat(info.key.split("/")[2])
            newest = day if newest is None else max(newest, day)
    behind = {t: (covered.get(t, 0), a) for t, a in archived.items() if a > covered.get(t, 0)}
    return IndexLag(behind, flushes, newest)
