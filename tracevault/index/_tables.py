"""The index's three tables as Apache Parquet objects under ``index/`` (docs/index.md).

Keys (Hive-partitioned by the run's start day, UTC, so every engine prunes by day)::

    index/runs/day=<YYYY-MM-DD>/<writer>~<log tag>~<from:012d>-<to:012d>.parquet
    index/events/day=<YYYY-MM-DD>/<writer>~<log tag>~<from:012d>-<to:012d>.parquet
    index/status/day=<YYYY-MM-DD>/<writer>~<log tag>~<from:012d>-<to:012d>.parquet

``<log tag>`` names the partition log (``<prefix>.<generation>.<partition>``, percent-encoded)
and ``<from>-<to>`` the tree sizes the object covers: the same archive state indexed again
(a restart, a second writer) gives the same name and the same bytes, which the store takes as
a no-op. Parquet is written without timestamps or row-group statistics that vary, so the
bytes depend on the rows alone. Index objects carry no retention lock: they are derived and
rebuildable (``put`` with ``retain_until`` now; docs/index.md, "Retention").
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any
from urllib.parse import quote, unquote

import pyarrow as pa
import pyarrow.parquet as pq

from tracevault.archive import ObjectStore
from tracevault.index._rows import KINDS, StatusRow

__all__ = [
    "EVENT_SCHEMA",
    "INDEX_ROOT",
    "RUN_SCHEMA",
    "SCHEMAS",
    "STATUS_SCHEMA",
    "TABLES",
    "IndexKey",
    "day_of",
    "events_table",
    "index_key",
    "index_keys",
    "log_tag",
    "parquet_bytes",
    "parse_index_key",
    "read_parquet",
    "status_table",
    "table_of",
]

INDEX_ROOT = "index/"
TABLES = ("runs", "events", "status")
_TS = pa.timestamp("us", tz="UTC")

RUN_SCHEMA = pa.schema(
    [
        ("run_id", pa.string()),
        ("tenant", pa.string()),
        ("agent_id", pa.string()),
        ("agent_key", pa.string()),
        ("agent_version", pa.string()),
        ("started", _TS),
        ("ended", _TS),
        ("status", pa.string()),
        ("events", pa.int64()),
        *[(f"n_{k.lower()}", pa.int64()) for k in KINDS],
        ("tools", pa.list_(pa.string())),
        ("models", pa.list_(pa.string())),
        ("error_types", pa.list_(pa.string())),
        ("partition", pa.int32()),
        ("generation", pa.string()),
        ("origin", pa.string()),
        ("log", pa.string()),
        ("first_leaf", pa.int64()),
        ("last_leaf", pa.int64()),
        ("checkpoint_size", pa.int64()),
        ("head", pa.string()),
    ]
)

EVENT_SCHEMA = pa.schema(
    [
        ("run_id", pa.string()),
        ("seq", pa.int64()),
        ("kind", pa.string()),
        ("at", _TS),
        ("tool", pa.string()),
        ("model", pa.string()),
        ("duration_us", pa.int64()),
        ("error_type", pa.string()),
        ("request_bytes", pa.int64()),
        ("response_bytes", pa.int64()),
        ("error_bytes", pa.int64()),
        ("hash", pa.string()),
        ("leaf", pa.int64()),
    ]
)

STATUS_SCHEMA = pa.schema(
    [
        ("run_id", pa.string()),
        ("status", pa.string()),
        ("at", _TS),
        ("reason", pa.string()),
        ("source", pa.string()),
    ]
)

SCHEMAS = {"runs": RUN_SCHEMA, "events": EVENT_SCHEMA, "status": STATUS_SCHEMA}


@dataclass(frozen=True, slots=True, order=True)
class IndexKey:
    """What an index object's key says: its table, day, writer, log and tree-size range."""

    table: str
    day: str
    writer: str
    log_tag: str
    first: int
    last: int
    key: str


def index_keys(store: ObjectStore, tables: Sequence[str] = TABLES) -> list[str]:
    """The index's object keys, one listing per table (``index/`` also holds the archive's
    own day index, ``index/days/`` and ``index/day-runs/``, which is not listed)."""
    out: list[str] = []
    for t in tables:
        out += [i.key for i in store.list(f"{INDEX_ROOT}{t}/") if parse_index_key(i.key)]
    return out


def log_tag(prefix: str, generation: str, partition: int) -> str:
    return quote(f"{prefix}.{generation}.{partition}", safe="-_")


def index_key(table: str, day: str, writer: str, tag: str, sizes: tuple[int, int]) -> str:
    """``sizes``: the (from, to) tree sizes of ``tag``'s log the object covers."""
    first, last = sizes
    return (
        f"{INDEX_ROOT}{table}/day={day}/{quote(writer, safe='-_.')}~{tag}~"
        f"{first:012d}-{last:012d}.parquet"
    )


def parse_index_key(key: str) -> IndexKey | None:
    """The parts of an index object's key, or None if ``key`` is not one."""
    parts = key.split("/")
    if len(parts) != 4 or parts[0] != "index" or parts[1] not in TABLES:
        return None
    if not parts[2].startswith("day=") or not parts[3].endswith(".parquet"):
        return None
    try:
        writer, tag, rng = parts[3][: -len(".parquet")].split("~")
        first, last = (int(x) for x in rng.split("-"))
    except ValueError:
        return None
    return IndexKey(parts[1], parts[2][4:], unquote(writer), tag, first, last, key)


def day_of(micros: int) -> str:
    """The UTC day a run is filed under. A time no date can hold (a broken or hostile
    clock: the sealed record keeps any int64) is filed under the first or last day there
    is, so one record never stops the index step or a rebuild (docs/index.md)."""
    try:
        return datetime.fromtimestamp(micros / 1_000_000, tz=UTC).date().isoformat()
    except (ValueError, OverflowError, OSError):
        return (date.min if micros < 0 else date.max).isoformat()


def _column(rows: Sequence[dict[str, Any]], name: str, typ: pa.DataType) -> pa.Array:
    values = [r[name] for r in rows]
    if typ == _TS:
        return pa.array(values, type=pa.int64()).cast(_TS)
    return pa.array(values, type=typ)


def table_of(table: str, rows: Sequence[dict[str, Any]]) -> pa.Table:
    schema = SCHEMAS[table]
    return pa.Table.from_arrays([_column(rows, f.name, f.type) for f in schema], schema=schema)


def events_table(runs: Sequence[dict[str, list[Any]]]) -> pa.Table:
    """The events table of runs' event columns (``IndexedRun.events``), in the given order:
    the columns are concatenated as plain lists and handed to Arrow once per object."""
    arrays = []
    for f in EVENT_SCHEMA:
        values = [v for cols in runs for v in cols[f.name]]
        if f.type == _TS:
            arrays.append(pa.array(values, type=pa.int64()).cast(_TS))
        else:
            arrays.append(pa.array(values, type=f.type))
    return pa.Table.from_arrays(arrays, schema=EVENT_SCHEMA)


def status_table(rows: Sequence[StatusRow]) -> pa.Table:
    dicts = [
        {"run_id": r.run_id, "status": r.status, "at": r.at, "reason": r.reason, "source": r.source}
        for r in rows
    ]
    return table_of("status", dicts)


def parquet_bytes(table: pa.Table) -> bytes:
    """The table as one Parquet file, deterministic: zstd, one row group per 128k rows, no
    creation time (Parquet has none) and a fixed ``created_by`` per pyarrow version."""
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="zstd", row_group_size=128 * 1024)
    return sink.getvalue()


def read_parquet(data: bytes, table: str) -> pa.Table:
    """One index object as a table of ``table``'s schema (``pa.ArrowInvalid`` if unreadable
    or of another shape)."""
    got = pq.read_table(io.BytesIO(data))
    want = SCHEMAS[table]
    if not got.schema.equals(want, check_metadata=False):
        raise pa.ArrowInvalid(
            f"its columns are not this version's {table} table's (`tracevault index rebuild` "
            "writes the index again)"
        )
    return got


def parse_day(text: str) -> date:
    return date.fromisoformat(text)
