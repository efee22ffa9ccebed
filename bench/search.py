"""The investigator's index at a fleet's scale: a filtered run list over six months.

An index of ``--runs`` runs (default 1,000,000) and ``--events-per-run`` events each (20:
20,000,000 events) over ``--days`` days is written in the index's own format, by its own
writer pieces (the same Arrow schemas, ``parquet_bytes``, ``index_key`` names, ``store.put``
into a ``file://`` archive store): 10k runs a day is what a fleet's six months look like.
Runs are generated as columns (numpy), not decoded from an archive: generating 20M archived
events through the sealing path would take hours on this machine; the rows' shape and the
objects are the same. Then a filtered run list, agent + tool + one week, the query an
investigator types, is timed ``--queries`` times through ``tracevault.index.search`` (load the
week's objects, DuckDB views, the filter), each query another agent/tool/week, p50 and p99.

Same-run baseline: the same filter as a ``pyarrow.dataset`` scan of the same week's files
(Hive partitions pruned, the filter pushed down), i.e. the plain Parquet floor any reader of
these files pays; the ratio says what the views, dedup and typed rows cost over it.

Usage::

    .venv/bin/python bench/search.py [--runs 1000000] [--dir /dev/shm/idx]

The last output line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from tracevault.archive import open_store, utc_now
from tracevault.config import Settings
from tracevault.index import EVENT_SCHEMA, RUN_SCHEMA, Filters, search
from tracevault.index._tables import index_key, log_tag, parquet_bytes

T0 = datetime(2026, 1, 1, tzinfo=UTC)
TOOLS = [f"tool_{i:02d}" for i in range(40)]
AGENTS = [f"agent-{i:03d}" for i in range(200)]
MODELS = ["gpt-4o", "claude-3", "llama-3"]
STATUSES = ["finished", "errored", "unfinished"]
KIND_COLS = [f.name for f in RUN_SCHEMA if f.name.startswith("n_")]


def _strings(pool: list[str], idx: np.ndarray) -> pa.Array:
    return pa.DictionaryArray.from_arrays(pa.array(idx, pa.int32()), pa.array(pool)).cast(
        pa.string()
    )


def _lists(pool: list[str], picks: np.ndarray, per: int) -> pa.Array:
    offsets = pa.array(np.arange(0, len(picks) * per + 1, per, dtype=np.int32))
    return pa.ListArray.from_arrays(offsets, _strings(pool, picks.reshape(-1)))


def day_tables(
    day: int, n: int, per: int, first: int, rng: np.random.Generator
) -> tuple[pa.Table, pa.Table]:
    """One day's runs and events tables: ``n`` runs of ``per`` events, leaves from ``first``."""
    ids = [f"run-{first + i:09d}" for i in range(n)]
    start = (T0 + timedelta(days=day)).timestamp() * 1e6
    started = (start + rng.integers(0, 86_400_000_000, n)).astype(np.int64)
    agent = rng.integers(0, len(AGENTS), n)
    tools = rng.integers(0, len(TOOLS), (n, 2))
    ts = pa.timestamp("us", tz="UTC")
    cols: dict[str, pa.Array] = {
        "run_id": pa.array(ids),
        "tenant": _strings(["acme", "globex", "initech"], agent % 3),
        "agent_id": _strings(AGENTS, agent),
        "agent_key": pa.nulls(n, pa.string()),
        "agent_version": pa.array(["1.0.0"] * n),
        "started": pa.array(started).cast(ts),
        "ended": pa.array(started + per * 1000).cast(ts),
        "status": _strings(STATUSES, rng.choice(3, n, p=[0.9, 0.08, 0.02])),
        "events": pa.array(np.full(n, per, np.int64)),
        "tools": _lists(TOOLS, tools, 2),
        "models": _lists(MODELS, rng.integers(0, len(MODELS), (n, 1)), 1),
        "error_types": pa.ListArray.from_arrays(
            pa.array(np.zeros(n + 1, np.int32)), pa.array([], pa.string())
        ),
        "partition": pa.array((np.arange(n) % 12).astype(np.int32)),
        "generation": pa.array([""] * n),
        "origin": pa.array(["tracevault/agent-traces/0"] * n),
        "log": pa.array(["log/agent-traces/0/"] * n),
        "first_leaf": pa.array(np.arange(first, first + n, dtype=np.int64) * per),
        "last_leaf": pa.array(np.arange(first, first + n, dtype=np.int64) * per + per - 1),
        "checkpoint_size": pa.array(np.full(n, (first + n) * per, np.int64)),
        "head": pa.array(["00" * 32] * n),
    }
    for k in KIND_COLS:
        cols[k] = pa.array(np.zeros(n, np.int64))
    cols["n_tool_call"] = pa.array(np.full(n, 2, np.int64))
    cols["n_model_call"] = pa.array(np.full(n, per - 4, np.int64))
    runs_t = pa.Table.from_arrays([cols[f.name] for f in RUN_SCHEMA], schema=RUN_SCHEMA)
    m = n * per
    seq = np.tile(np.arange(per, dtype=np.int64), n)
    at = np.repeat(started, per) + seq * 1000
    kind_pool = ["RUN_STARTED", "MODEL_CALL", "TOOL_CALL", "RUN_FINISHED"]
    kind = np.where(seq == 0, 0, np.where(seq == per - 1, 3, np.where(seq <= 2, 2, 1)))
    tool_idx = np.where(kind == 2, tools[np.repeat(np.arange(n), per), np.clip(seq - 1, 0, 1)], -1)
    ev: dict[str, pa.Array] = {
        "run_id": pa.array(np.repeat(np.array(ids, dtype=object), per)),
        "seq": pa.array(seq),
        "kind": _strings(kind_pool, kind),
        "at": pa.array(at).cast(ts),
        "tool": pc.if_else(pa.array(tool_idx >= 0), _strings(TOOLS, np.maximum(tool_idx, 0)), None),
        "model": pc.if_else(pa.array(kind == 1), pa.array(["gpt-4o"] * m), None),
        "duration_us": pa.array(rng.integers(100, 100_000, m)),
        "error_type": pa.nulls(m, pa.string()),
        "request_bytes": pa.array(rng.integers(50, 5000, m)),
        "response_bytes": pa.array(rng.integers(50, 5000, m)),
        "error_bytes": pa.nulls(m, pa.int64()),
        "hash": pa.array(["ab" * 32] * m),
        "leaf": pa.array(np.arange(first * per, first * per + m, dtype=np.int64)),
    }
    events_t = pa.Table.from_arrays([ev[f.name] for f in EVENT_SCHEMA], schema=EVENT_SCHEMA)
    return runs_t, events_t


def build(
    root: Path, runs: int, per: int, days: int, tables: tuple[str, ...] = ("runs", "events")
) -> dict[str, float]:
    """The index of ``runs`` runs of ``per`` events over ``days`` days into ``root``'s store
    (``tables``: which of its tables to write; a run list reads only ``runs``)."""
    store = open_store(f"file://{root}", Settings())
    rng = np.random.default_rng(7)
    tag = log_tag("agent-traces", "", 0)
    per_day = runs // days
    t0 = time.perf_counter()
    nbytes = 0
    for d in range(days):
        n = per_day if d < days - 1 else runs - per_day * (days - 1)
        first = d * per_day
        r, e = day_tables(d, n, per, first, rng)
        day = (T0 + timedelta(days=d)).date().isoformat()
        for table, t in (("runs", r), ("events", e)):
            if table not in tables:
                continue
            data = parquet_bytes(t)
            nbytes += len(data)
            store.put(index_key(table, day, "bench", tag, (first * per, (first + n) * per)),
                      data, retain_until=utc_now())  # fmt: skip
    return {"build_s": round(time.perf_counter() - t0, 1), "index_mb": round(nbytes / 1e6, 1)}


def baseline(root: Path, f: Filters) -> int:
    assert f.since is not None and f.until is not None
    days = f.days() or []
    files = [str(p) for d in days for p in root.rglob(f"index/runs/day={d}/*.parquet")]
    dset = ds.dataset(files, format="parquet")
    expr = (
        (pc.field("agent_id") == f.agent)
        & pc.list_value_length(pc.field("tools")).cast(pa.int64()).is_valid()
        & (pc.field("started") >= pa.scalar(f.since, pa.timestamp("us", tz="UTC")))
        & (pc.field("started") < pa.scalar(f.until, pa.timestamp("us", tz="UTC")))
    )
    t = dset.to_table(filter=expr, columns=["run_id", "tools", "started"])
    keep = [f.tool in (x or []) for x in t.column("tools").to_pylist()]
    return sum(keep)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=1_000_000)
    ap.add_argument("--events-per-run", type=int, default=20)
    ap.add_argument("--days", type=int, default=183)
    ap.add_argument("--queries", type=int, default=40)
    ap.add_argument("--dir", type=Path, default=None)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(dir=args.dir)) / "archive"
    try:
        built = build(root, args.runs, args.events_per_run, args.days)
        store = open_store(f"file://{root}", Settings())
        rnd = random.Random(11)
        ours: list[float] = []
        base: list[float] = []
        hits: list[int] = []
        for i in range(args.queries):
            d = rnd.randrange(0, args.days - 7)
            since = T0 + timedelta(days=d)
            f = Filters(agent=rnd.choice(AGENTS), tool=rnd.choice(TOOLS), since=since,
                        until=since + timedelta(days=7))  # fmt: skip
            order = (0, 1) if i % 2 == 0 else (1, 0)  # alternate which goes first
            for which in order:
                t0 = time.perf_counter()
                if which == 0:
                    n = len(search(store, f).hits)
                    ours.append(time.perf_counter() - t0)
                    hits.append(n)
                else:
                    nb = baseline(root, f)
                    base.append(time.perf_counter() - t0)
            assert n == nb, (f, n, nb)

        def q(xs: list[float], p: float) -> float:
            xs = sorted(xs)
            return round(xs[min(len(xs) - 1, int(p * len(xs)))], 3)

        out = {
            "bench": "search",
            "runs": args.runs,
            "events": args.runs * args.events_per_run,
            "days": args.days,
            **built,
            "queries": args.queries,
            "hits_median": statistics.median(hits),
            "search_p50_s": q(ours, 0.5),
            "search_p99_s": q(ours, 0.99),
            "baseline_p50_s": q(base, 0.5),
            "baseline_p99_s": q(base, 0.99),
            "ratio_p50": round(q(ours, 0.5) / max(q(base, 0.5), 1e-6), 2),
            "targets": {"p50_s": 1.0, "p99_s": 3.0},
        }
        print(json.dumps(out))
    finally:
        shutil.rmtree(root.parent, ignore_errors=True)


if __name__ == "__main__":
    main()
