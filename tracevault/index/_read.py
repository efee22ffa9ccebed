"""Reading the index: its Parquet objects into DuckDB views ``runs`` and ``events``.

The objects are read from the store (file:// or S3, through the archive's own store
interface) into in-memory Arrow tables, registered, and the views made over them; only then
is the connection closed to the outside (``enable_external_access=false``, configuration
locked), so a query, ``--sql`` included, reads nothing but the index (docs/index.md, "SQL").
An object that does not read as its table (truncated, corrupt, another shape) is named and
skipped, never fatal: the index is derived, the archive is the record.

Duplicates are expected and removed here: several writers (restarts, archivers, a rebuild
beside incremental objects) may index the same run; ``runs`` keeps the row of the largest
checkpoint size, ``events`` one row per (run_id, seq), and a run's status is its latest status
row's when it has one.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

import duckdb
import pyarrow as pa

from tracevault.archive import ObjectStore
from tracevault.index._tables import SCHEMAS, TABLES, index_keys, parse_index_key, read_parquet

__all__ = ["LoadedIndex", "load_index", "open_views"]

log = logging.getLogger(__name__)

_RUNS_VIEW = """
CREATE VIEW runs AS
WITH base AS (
  SELECT * EXCLUDE (_rn) FROM (
    SELECT *, row_number() OVER (
      PARTITION BY run_id ORDER BY checkpoint_size DESC NULLS LAST, events DESC) AS _rn
    FROM _runs_raw) WHERE _rn = 1),
latest AS (
  SELECT run_id, status, reason FROM (
    SELECT *, row_number() OVER (PARTITION BY run_id ORDER BY "at" DESC, status, source) AS _rn
    FROM _status_raw) WHERE _rn = 1)
SELECT base.* REPLACE (coalesce(latest.status, base.status) AS status),
       latest.reason AS status_reason,
       CAST(started AS DATE) AS day
FROM base LEFT JOIN latest USING (run_id)
"""

_EVENTS_VIEW = """
CREATE VIEW events AS
SELECT * EXCLUDE (_rn) FROM (
  SELECT *, row_number() OVER (PARTITION BY run_id, seq ORDER BY leaf DESC NULLS LAST) AS _rn
  FROM _events_raw) WHERE _rn = 1
"""


@dataclass(slots=True)
class LoadedIndex:
    """The index's objects as Arrow tables, and what could not be read."""

    tables: dict[str, pa.Table]
    objects: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # key -> why

    @property
    def empty(self) -> bool:
        return not self.objects


def load_index(
    store: ObjectStore, *, days: Sequence[str] | None = None, tables: Sequence[str] = TABLES
) -> LoadedIndex:
    """Every index object of ``tables`` under ``index/`` (runs and events of ``days`` only,
    if given: Hive pruning); a table not read is empty (a run list needs no events)."""
    parts: dict[str, list[pa.Table]] = {t: [] for t in TABLES}
    out = LoadedIndex({})
    wanted = None if days is None else set(days)
    for key in index_keys(store, tables):
        parsed = parse_index_key(key)
        if parsed is None:
            continue
        # status rows lie on the day of the change (an erasure weeks after the run): all read
        if wanted is not None and parsed.table != "status" and parsed.day not in wanted:
            continue
        try:
            parts[parsed.table].append(read_parquet(store.get(key), parsed.table))
        except (pa.ArrowException, OSError, ValueError) as exc:
            out.skipped[key] = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            log.info("index object %s skipped: %s", key, out.skipped[key])  # callers report
            continue
        out.objects.append(key)
    out.tables = {
        t: pa.concat_tables(ps) if ps else SCHEMAS[t].empty_table() for t, ps in parts.items()
    }
    return out


def open_views(index: LoadedIndex) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection holding views ``runs`` and ``events`` (and ``status``,
    every status row), then closed to files, URLs, extensions and configuration changes."""
    con = duckdb.connect(":memory:", config={"autoinstall_known_extensions": False,
                                            "autoload_known_extensions": False})  # fmt: skip
    for name, table in index.tables.items():
        con.register(f"_{name}_raw", table)
    con.execute(_RUNS_VIEW)
    con.execute(_EVENTS_VIEW)
    con.execute("CREATE VIEW status AS SELECT * FROM _status_raw")
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")
    return con
