"""``tracevault archive …`` and ``tracevault archiver``: JSON for scripts, exit codes."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.services.archiver.helpers import SealedLog
from tests.services.archiver.sealed_factory import (
    LogWriter,
    sealed_run,
    sealed_values,
    write_log_run,
)
from tracevault.archive import open_store
from tracevault.cli import tracevault
from tracevault.config import Settings
from tracevault.replayer.load.archive import load_from_archive
from tracevault.replayer.load.verify import verify
from tracevault.services.archiver import ArchiveWriter
from tracevault.services.archiver._sealed import parse_sealed
from tracevault.transparency import Ed25519Signer


def _archive(url: str, run_id: str, n: int = 8) -> None:
    store = open_store(url, Settings())
    writer = ArchiveWriter(store)
    writer.write_segment(writer.cursor(run_id), [parse_sealed(v) for v in sealed_values(run_id, n)])


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(tracevault, list(args))
    return result.exit_code, result.output


def _run_json(*args: str) -> tuple[int, str]:
    """``_run`` for ``--json``: stdout alone (stderr says what --no-agent-check waived)."""
    result = CliRunner().invoke(tracevault, list(args))
    return result.exit_code, result.stdout


def test_ls_hold_release_and_report_as_json(tmp_path: Path) -> None:
    url = f"file://{tmp_path}"
    _archive(url, "run-a")
    _archive(url, "run-b", 3)
    code, out = _run("archive", "ls", "--archive", url, "--json")
    assert code == 0
    assert json.loads(out) == [
        {"run_id": "run-a", "segments": 1, "events": 8, "complete": True},
        {"run_id": "run-b", "segments": 1, "events": 3, "complete": True},
    ]
    code, out = _run("archive", "ls", "--archive", url, "--day", "2026-01-01", "--json")
    assert [r["run_id"] for r in json.loads(out)] == ["run-a", "run-b"]
    code, out = _run("archive", "ls", "run-a", "--archive", url, "--json")
    assert [r["run_id"] for r in json.loads(out)] == ["run-a"]

    code, out = _run("archive", "hold", "run-a", "--archive", url, "--json")
    held = json.loads(out)
    assert code == 0 and held.pop("record").startswith("legal-holds/run-a/")
    assert held == {
        "run_id": "run-a", "legal_hold": True, "objects": 3, "kept": 0, "kept_for": [],
        "missing": [],
    }  # fmt: skip
    code, out = _run("archive", "retention-report", "--archive", url, "--json")
    assert code == 0
    report = {r["run_id"]: r for r in json.loads(out)}
    assert report["run-a"]["held"] and report["run-a"]["ok"]
    assert {o["lock_mode"] for o in report["run-b"]["objects"]} == {"COMPLIANCE"}
    code, _ = _run("archive", "release", "run-a", "--archive", url)
    assert code == 0
    assert not open_store(url, Settings()).head("runs/run-a/final.receipt.json").legal_hold


def test_unknown_run_exits_3_and_flagged_report_exits_1(tmp_path: Path) -> None:
    url = f"file://{tmp_path}"
    open_store(url, Settings()).close()  # an archive (reads never make one)
    code, out = _run("archive", "ls", "nope", "--archive", url)
    assert code == 3 and "run 'nope' is not in the archive" in out
    code, _ = _run("archive", "hold", "nope", "--archive", url)
    assert code == 3
    store = open_store(url, Settings())
    store.put("runs/x/final.receipt.json", b"{}", retain_until=datetime.now(UTC) + timedelta(1))
    code, out = _run("archive", "retention-report", "--archive", url)
    assert code == 1 and "under 183" in out


def test_purge_dry_run_deletes_nothing(tmp_path: Path) -> None:
    url = f"file://{tmp_path}"
    _archive(url, "young")
    code, out = _run("archive", "purge", "--dry-run", "--archive", url, "--json")
    assert code == 0
    report = json.loads(out)
    assert report["deleted"] == {} and "retained until" in report["kept"]["young"]
    code, out = _run("archive", "purge", "--archive", url)
    assert code == 0 and "kept" in out


def test_retention_under_183_days_is_a_usage_error(tmp_path: Path) -> None:
    code, out = _run("archiver", "--archive", f"file://{tmp_path}", "--retention-days", "90")
    assert code == 2 and "Art. 19" in out


def test_archiver_command_archives_until_idle(
    settings_factory: Callable[..., Settings], tmp_path: Path
) -> None:
    sl = SealedLog(settings_factory())
    sl.produce({"cli-run": sealed_values("cli-run", 20)})
    settings = sl.settings
    url = f"file://{tmp_path / 'a'}"
    vkey = tmp_path / "log.vkey"
    vkey.write_text(sl.vkey + "\n")
    code, out = _run(
        "--bootstrap-servers", settings.bootstrap_servers, "--prefix", settings.topic_prefix,
        "archiver", "--archive", url, "--until-idle", "2", "--trusted-key", f"@{vkey}",
    )  # fmt: skip
    assert code == 0, out
    run = load_from_archive(open_store(url, Settings()), "cli-run")
    assert verify(run, keys=[sl.signer.verifier]).count == 20


def test_archive_commands_reach_s3_through_the_endpoint_flag(
    s3_bucket_factory: Callable[..., str], s3_endpoint: str
) -> None:
    url = f"s3://{s3_bucket_factory()}/cli"
    store = open_store(url, Settings(s3_endpoint_url=s3_endpoint))
    writer = ArchiveWriter(store)
    writer.write_segment(
        writer.cursor("on-s3"), [parse_sealed(v) for v in sealed_values("on-s3", 5)]
    )
    code, out = _run("archive", "ls", "--archive", url, "--s3-endpoint-url", s3_endpoint, "--json")
    assert code == 0, out
    assert json.loads(out) == [{"run_id": "on-s3", "segments": 1, "events": 5, "complete": True}]
    code, out = _run(
        "archive", "retention-report", "--archive", url, "--s3-endpoint-url", s3_endpoint, "--json"
    )
    assert code == 0, out
    assert {o["lock_mode"] for o in json.loads(out)[0]["objects"]} == {"COMPLIANCE"}


def test_replay_verify_from_the_archive_checks_the_log_with_trusted_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TRACEVAULT_LOG_VKEYS", raising=False)  # only the keys given here
    url = f"file://{tmp_path / 'a'}"
    signer, other = Ed25519Signer.generate("test-log"), Ed25519Signer.generate("test-log")
    write_log_run(open_store(url, Settings()), "tiled", 6, signer)
    _archive(url, "legacy", 4)
    keyfile = tmp_path / "vkeys"
    keyfile.write_text(f"# trusted\n{signer.verifier.vkey}\n")
    # the log's deployment; the runs are made by hand, unsigned: provenance waived knowingly,
    # and no sealed topic proves the hand-written archive current (--offline, knowingly)
    base = ("--prefix", "pfx", "replay", "--archive-url", url, "verify", "--no-agent-check",
            "--offline")  # fmt: skip
    code, out = _run_json(*base, "tiled", "--trusted-key", f"@{keyfile}", "--json")
    assert code == 0, out
    assert json.loads(out)["checks"][0].startswith("L1 signature")
    # another key: L1 names the checkpoint object
    code, out = _run_json(*base, "tiled", "--trusted-key", other.verifier.vkey, "--json")
    doc = json.loads(out)
    assert code == 1 and not doc["ok"] and "L1 signature" in doc["error"]
    assert doc["object"].startswith("log/pfx/0/checkpoint/")
    # another deployment's prefix: the same key, but not this deployment's origin
    other_base = ("--prefix", "other", *base[2:])
    code, out = _run_json(*other_base, "tiled", "--trusted-key", signer.verifier.vkey, "--json")
    assert code == 1 and json.loads(out)["error"].startswith("L1 origin")
    # a legacy archive has no log evidence: with a key it fails L1, without one it is
    # unverified; --no-log-check checks its chain alone
    code, out = _run_json(*base, "legacy", "--trusted-key", signer.verifier.vkey, "--json")
    assert code == 1 and "no signed-log evidence" in json.loads(out)["error"]
    code, out = _run_json(*base, "legacy", "--json")
    assert code == 1 and json.loads(out)["status"] == "unverified"
    code, out = _run_json(*base, "legacy", "--json", "--no-log-check")
    assert code == 0 and json.loads(out)["status"] == "chain only, provenance not checked", out
    # without a key the log run is unverified, fail closed (exit 1)
    code, out = _run_json(*base, "tiled", "--json")
    assert code == 1 and json.loads(out)["log_checked"] is False


def test_release_names_the_held_runs_that_keep_shared_log_objects(tmp_path: Path) -> None:
    url = f"file://{tmp_path}"
    w = LogWriter(open_store(url, Settings()), Ed25519Signer.generate("test-log"))
    w.add(sealed_run("run-a", 3))
    w.add(sealed_run("run-b", 3))
    w.flush()
    for run_id in ("run-a", "run-b"):
        code, _ = _run("archive", "hold", run_id, "--archive", url)
        assert code == 0
    code, out = _run("archive", "release", "run-a", "--archive", url, "--json")
    got = json.loads(out)
    assert code == 0 and got["kept"] > 0 and got["kept_for"] == ["run-b"]
    code, out = _run("archive", "release", "run-b", "--archive", url)
    assert code == 0 and "stay held" not in out
