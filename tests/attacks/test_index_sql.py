"""``tracevault search --sql`` is read-only over the index's views: it cannot write, attach,
copy, install or load extensions, change settings, or read any file or URL, whatever the
SQL tries (real DuckDB, real index over a real archive)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.index.fleet import archive_fleet
from tracevault.archive import ObjectStore, open_store
from tracevault.config import Settings
from tracevault.errors import ConfigError
from tracevault.index import rebuild, run_sql

ATTACKS = [
    "CREATE TABLE t AS SELECT 1",
    "INSERT INTO runs SELECT * FROM runs",
    "DROP VIEW runs",
    "ATTACH '{tmp}/x.db' AS x",
    "COPY runs TO '{tmp}/out.csv'",
    "COPY (SELECT * FROM events) TO '{tmp}/out.parquet' (FORMAT parquet)",
    "INSTALL httpfs",
    "LOAD httpfs",
    "SET enable_external_access = true",
    "PRAGMA enable_profiling",
    "SELECT 1; COPY runs TO '{tmp}/out.csv'",
    "SELECT * FROM read_csv('{tmp}/secret.txt')",
    "SELECT * FROM read_text('{tmp}/secret.txt')",
    "SELECT * FROM read_parquet('{tmp}/archive/**/*.parquet')",
    "WITH x AS (SELECT * FROM read_blob('{tmp}/secret.txt')) SELECT * FROM x",
    "SELECT * FROM read_csv('http://127.0.0.1:9/x.csv')",
    "SELECT * FROM glob('{tmp}/*')",
]


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, ObjectStore]:
    """One indexed archive for every attack (each attack leaves it as it was: checked)."""
    tmp_path = tmp_path_factory.mktemp("sql")
    store = open_store(f"file://{tmp_path / 'archive'}", Settings())
    archive_fleet(store)
    rebuild(store)
    (tmp_path / "secret.txt").write_text("the investigator's password\n")
    return tmp_path, store


@pytest.mark.parametrize("attack", ATTACKS)
def test_sql_that_writes_or_reads_files_is_refused(
    indexed: tuple[Path, ObjectStore], attack: str
) -> None:
    tmp_path, store = indexed
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(ConfigError) as err:
        run_sql(store, attack.format(tmp=tmp_path))
    assert "password" not in str(err.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written
    cols, rows, _ = run_sql(store, "SELECT count(*) AS n FROM runs")  # still whole
    assert cols == ["n"] and rows[0][0] > 0
