"""``tracevault index`` and ``tracevault search`` through the real CLI, over a real archive:
a missing index says how to build it, a stale one by how much, a corrupt object is named and
skipped, --verify fails closed, the table keeps whole run ids at 80 columns."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.index.fleet import FLEET, Spec, archive_fleet, scan
from tests.test_narrow_terminal import assert_fits, cli
from tracevault.archive import ObjectStore, open_store
from tracevault.cli import tracevault
from tracevault.config import Settings
from tracevault.index import parse_index_key, rebuild


@pytest.fixture
def archive(tmp_path: Path) -> tuple[str, ObjectStore]:
    url = f"file://{tmp_path / 'archive'}"
    store = open_store(url, Settings())
    archive_fleet(store)
    return url, store


def _run(*args: str) -> tuple[int, str, str]:
    res = CliRunner().invoke(tracevault, list(args))
    return res.exit_code, res.stdout, res.stderr


def test_a_missing_index_says_how_to_build_it(archive: tuple[str, ObjectStore]) -> None:
    url, _ = archive
    code, _, err = _run("search", "--archive", url, "--tool", "send_email")
    assert code == 3
    assert "tracevault index rebuild" in err


def test_search_json_and_a_stale_index_says_by_how_much(
    archive: tuple[str, ObjectStore],
) -> None:
    url, store = archive
    assert _run("index", "rebuild", "--archive", url)[0] == 0
    code, out, err = _run("search", "--archive", url, "--tool", "send_email", "--json")
    assert code == 0 and err == ""
    got = json.loads(out)
    assert {h["run_id"] for h in got} == {r for r, s in scan(store).items()
                                          if "send_email" in s["tools"]}  # fmt: skip
    assert all(h["checkpoint_size"] and h["origin"] for h in got)
    archive_fleet(store, (Spec("run-late", "mailer", 12, ("send_email",)),))
    code, out, err = _run("search", "--archive", url, "--tool", "send_email", "--json")
    assert code == 0
    assert "run-late" not in {h["run_id"] for h in json.loads(out)}
    assert "behind the archive" in err and "1 archived flushes" in err
    assert _run("index", "update", "--archive", url)[0] == 0
    code, out, err = _run("search", "--archive", url, "--tool", "send_email", "--json")
    assert "run-late" in {h["run_id"] for h in json.loads(out)} and err == ""


def test_a_corrupt_index_object_is_named_and_skipped(archive: tuple[str, ObjectStore]) -> None:
    url, store = archive
    report = rebuild(store)
    victim = next(k for k in report.written if parse_index_key(k).table == "runs")  # type: ignore[union-attr]
    path = Path(url[len("file://") :]) / "objects" / victim
    if not path.exists():  # the file store's own layout: find the object by name
        path = next(Path(url[len("file://") :]).rglob(victim.rsplit("/", 1)[-1]))
    path.write_bytes(path.read_bytes()[:100])  # truncated: a partial write
    code, out, err = _run("search", "--archive", url, "--json")
    assert code == 0, err
    assert "1 index object(s) skipped" in err and victim in err
    assert "Traceback" not in err
    assert len(json.loads(out)) == len(FLEET) - 1


def test_verify_fails_closed_and_passes_with_the_key(
    archive: tuple[str, ObjectStore], log_vkey: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, store = archive
    rebuild(store)
    monkeypatch.delenv("TRACEVAULT_LOG_VKEYS", raising=False)
    code, out, _ = _run("search", "--archive", url, "--agent", "researcher", "--verify", "--json")
    assert code == 1
    assert {h["verified"] for h in json.loads(out)} == {"unverified"}
    # a hand-written archive: no sealed topic proves it current, so not a pass by itself
    code, out, _ = _run("search", "--archive", url, "--agent", "researcher", "--verify",
                        "--trusted-key", log_vkey, "--json")  # fmt: skip
    assert code == 1 and {h["verified"] for h in json.loads(out)} == {"unverified"}
    code, out, _ = _run("search", "--archive", url, "--agent", "researcher", "--verify",
                        "--trusted-key", log_vkey, "--offline", "--json")  # fmt: skip
    assert code == 0
    assert {h["run_id"]: h["verified"] for h in json.loads(out)} == {
        "run-search": "ok", "run-err": "ok"}  # fmt: skip


def test_unknown_filter_or_status_is_refused_naming_the_valid_ones(
    archive: tuple[str, ObjectStore],
) -> None:
    url, store = archive
    rebuild(store)
    code, _, err = _run("search", "--archive", url, "--status", "lost")
    assert code == 2 and "finished" in err and "erased" in err
    code, _, err = _run("search", "--archive", url, "--sql", "SELECT colour FROM runs")
    assert code == 2 and "colour" in err and "valid: runs(run_id, tenant" in err


def test_search_at_80_columns_keeps_run_ids_whole(archive: tuple[str, ObjectStore]) -> None:
    url, store = archive
    long_id = "run-" + "x" * 40
    archive_fleet(store, (Spec(long_id, "mailer", 4, ("send_email",)),))
    rebuild(store)
    code, out = cli("search", "--archive", url)
    assert code == 0
    assert_fits(out)
    for spec in (*FLEET, Spec(long_id, "m", 0)):
        assert spec.run_id in out


def test_doctor_reports_the_index_lag(
    archive: tuple[str, ObjectStore], kafka_bootstrap: str
) -> None:
    url, store = archive

    def index_check() -> dict[str, str]:
        args = ["--bootstrap-servers", kafka_bootstrap, "doctor", "--json"]
        res = CliRunner().invoke(tracevault, args, env={"TRACEVAULT_ARCHIVE_URL": url})
        return next(c for c in json.loads(res.output) if c["check"] == "index")

    assert index_check()["status"] == "ok"  # no index: optional
    rebuild(store)
    archive_fleet(store, (Spec("run-later", "mailer", 12, ("send_email",)),))
    check = index_check()
    assert check["status"] == "warn" and "behind the archive" in check["detail"]
    assert "tracevault index update" in check["fix"]


def test_archive_ls_shows_the_index_columns_or_how_to_get_them(
    archive: tuple[str, ObjectStore],
) -> None:
    url, store = archive
    code, out, err = _run("archive", "ls", "--archive", url, "--json")
    assert code == 0 and err == ""  # --json as it always was, for scripts
    assert all("agent" not in r for r in json.loads(out))  # the archive's own columns
    code, out, err = _run("archive", "ls", "--archive", url)
    assert code == 0 and "tracevault index rebuild" in err
    rebuild(store)
    code, out, err = _run("archive", "ls", "--archive", url, "--json")
    rows = {r["run_id"]: r for r in json.loads(out)}
    assert code == 0 and err == "" and len(rows) == len(FLEET)
    truth = scan(store)
    for rid, r in rows.items():
        assert r["agent"] == truth[rid]["agent"] and set(r["tools"]) == truth[rid]["tools"]
        assert r["status"] == truth[rid]["status"] and "segments" in r  # old keys kept
    code, out = cli("archive", "ls", "--archive", url)
    assert code == 0 and "run-toolerr" in out and "unfinished" in out
    assert_fits(out)
