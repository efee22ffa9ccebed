"""The index is the same however it is written, whoever reads it: an index caught up flush by
flush equals a rebuilt one; writing again (a restart, a second writer) changes no byte; Dask
reads the same Parquet files and agrees with DuckDB; status rows (erased, contested) win over
the run's own status, latest first."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import dask.dataframe as dd
import pytest

from tests.index.fleet import FLEET, Spec, archive_fleet
from tracevault.archive import Hole, ObjectStore, hole_key, open_store
from tracevault.config import Settings
from tracevault.index import (
    Filters,
    RunHit,
    load_index,
    open_views,
    rebuild,
    run_sql,
    search,
    update,
)
from tracevault.index._build import build_index


def _rows(store: ObjectStore) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
    con = open_views(load_index(store))
    runs = con.execute("SELECT * FROM runs ORDER BY run_id").fetchall()
    events = con.execute("SELECT * FROM events ORDER BY run_id, seq").fetchall()
    return runs, events


@pytest.fixture
def store(tmp_path: Path) -> ObjectStore:
    return open_store(f"file://{tmp_path / 'archive'}", Settings())


def test_updated_flush_by_flush_equals_rebuilt(store: ObjectStore, tmp_path: Path) -> None:
    for spec in FLEET:  # one flush each; the index caught up after each
        archive_fleet(store, (spec,))
        update(store)
    incremental = _rows(store)
    assert len(incremental[0]) == len(FLEET)
    rebuild(store)
    assert _rows(store) == incremental
    keys = [k for t in ("runs", "events") for k in (i.key for i in store.list(f"index/{t}/"))]
    assert all("rebuild~" in k for k in keys)  # the rebuild replaced the updates


def test_writing_again_is_a_no_op_with_the_same_names_and_bytes(store: ObjectStore) -> None:
    archive_fleet(store)
    first = build_index(store, writer="archiver-a")
    snap = {k: store.get(k) for k in first.written}
    again = build_index(store, writer="archiver-a")  # a restart redoing the same work
    assert again.written == first.written
    assert {k: store.get(k) for k in again.written} == snap
    build_index(store, writer="archiver-b")  # a second writer: rows deduplicated by readers
    runs, events = _rows(store)
    assert len(runs) == len(FLEET) and len({r[0] for r in runs}) == len(FLEET)
    assert len(events) == len({(e[0], e[1]) for e in events})


def test_dask_reads_the_same_files_and_agrees_with_duckdb(
    store: ObjectStore, tmp_path: Path
) -> None:
    archive_fleet(store)
    rebuild(store)
    root = tmp_path / "archive"
    runs_dir = next(p for p in root.rglob("runs") if p.is_dir() and p.parent.name == "index")
    events_dir = runs_dir.parent / "events"
    runs = dd.read_parquet(str(runs_dir)).compute()
    events = dd.read_parquet(str(events_dir)).compute()
    assert "day" in runs.columns  # the Hive partition column
    dask_tools = events.dropna(subset=["tool"]).groupby("tool")["run_id"].nunique().to_dict()
    _, rows, _ = run_sql(
        store, "SELECT tool, count(DISTINCT run_id) FROM events WHERE tool IS NOT NULL GROUP BY 1"
    )
    assert dask_tools == dict(rows)
    mailer = set(runs[runs["agent_id"] == "mailer"]["run_id"])
    assert mailer == {h.run_id for h in search(store, Filters(agent="mailer")).hits}
    assert len(events) == run_sql(store, "SELECT count(*) FROM events")[1][0][0]


def test_erasure_and_contested_records_append_a_status_that_wins(store: ObjectStore) -> None:
    archive_fleet(store)
    erasure = Spec("erasure-1", "tracevault-erase", 20,
                   start={"input": {"run": "run-mail-1", "reason": "GDPR art. 17"}})  # fmt: skip
    contested = Spec("tracevault.contested:c1", "tracevault-sequencer", 21,
                     start={"run_id": "run-search", "seq": 2, "reason": "foreign key"})  # fmt: skip
    archive_fleet(store, (erasure, contested))
    rebuild(store)
    assert {h.run_id for h in search(store, Filters(status="erased")).hits} == {"run-mail-1"}
    (hit,) = search(store, Filters(status="contested")).hits
    assert hit.run_id == "run-search" and "foreign key" in (hit.status_reason or "")
    # the run's own rows are untouched: still its events, tools and log position
    assert hit.tools == ("search",) and hit.checkpoint_size


def test_an_erasure_on_a_later_day_still_wins_in_a_day_range_search(store: ObjectStore) -> None:
    archive_fleet(store)
    later = Spec("erasure-2", "tracevault-erase", 40,
                 start={"input": {"run": "run-search", "reason": "subject request"}})  # fmt: skip
    archive_fleet(store, (later,))
    rebuild(store)
    since, until = datetime(2026, 1, 2, tzinfo=UTC), datetime(2026, 1, 3, tzinfo=UTC)
    (hit,) = search(store, Filters(since=since, until=until)).hits  # reads 2 days of runs
    assert (hit.run_id, hit.status) == ("run-search", "erased")


def test_a_hole_record_appends_a_hole_status_for_the_runs_it_names(store: ObjectStore) -> None:
    archive_fleet(store)
    (hit,) = [h for h in _hits_after_rebuild(store) if h.run_id == "run-open"]
    log = f"log/{Settings().topic_prefix}/0/"
    hole = Hole(kind="quarantined", origin=hit.origin or "", partition=0, first=3, end=4,
                detected_at="2026-01-20T00:00:00Z", why="record not archivable",
                runs={"run-open": 1}, reason="bad run id")  # fmt: skip
    key = hole_key(log, 3, 4, "quarantined")
    store.put(key, hole.to_json(), retain_until=datetime.now(UTC) + timedelta(days=1))
    rebuild(store)
    (got,) = search(store, Filters(status="hole")).hits
    assert got.run_id == "run-open" and "quarantined leaves 3..3" in (got.status_reason or "")
    _, rows, _ = run_sql(store, "SELECT source FROM status WHERE status = 'hole'")
    assert rows == [(key,)]


def _hits_after_rebuild(store: ObjectStore) -> list[RunHit]:
    rebuild(store)
    return search(store, Filters()).hits
