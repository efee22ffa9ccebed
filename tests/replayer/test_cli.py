"""``tracevault replay`` end to end against a file:// archive: output, --json and exit codes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import boto3
import pytest
from click.testing import CliRunner

from tests.replayer.archiving import write_run
from tests.replayer.conftest import recorded, write_three_runs
from tests.replayer.recording import T0, seal
from tracevault.archive import open_store
from tracevault.archive._filestore import FileStore
from tracevault.archive.layout import final_key, segment_key
from tracevault.cli import tracevault
from tracevault.config import Settings
from tracevault.schemas import micros_to_datetime


def _file(archive: str, key: str) -> Path:
    """The file of ``key`` in the file:// archive (runs share shard directories)."""
    return FileStore(Path(archive.removeprefix("file://"))).path_of(key)


# These tests name their trusted keys themselves (the session's vkey is not one).
pytestmark = pytest.mark.usefixtures("only_keys_given_here")


AGENT = "tests.replayer.agents:research_agent"


@pytest.fixture
def archive(tmp_path: Path) -> str:
    return write_three_runs(f"file://{tmp_path / 'archive'}", write=write_run)


@pytest.fixture
def signed(tmp_path: Path, log_vkey: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The same runs archived as the archiver does now (a static log signed by the session's
    log key), and its vkey trusted, as a deployment's TRACEVAULT_LOG_VKEYS: what ``replay
    run``/``diff``/``batch`` verify before they take a run as the record."""
    url = write_three_runs(f"file://{tmp_path / 'signed'}")
    monkeypatch.setenv("TRACEVAULT_LOG_VKEYS", log_vkey)
    return url


def _corrupt_entries(url: str, run_id: str) -> None:
    """Change a recorded tool argument of ``run_id`` in every entry bundle of the log that
    holds it (a partial tile's bundle is rewritten whole at each flush), as a careless editor
    of the store would: no hash recomputed."""
    root = Path(url.removeprefix("file://")) / "objects" / "log"
    changed = 0
    for p in root.glob("*/0/data/**/*"):
        data = p.read_bytes() if p.is_file() else b""
        at = data.find(b"2000 m", max(data.find(run_id.encode()), 0))
        if run_id.encode() in data and at >= 0:
            p.chmod(0o644)
            p.write_bytes(data[:at] + b"3000 m" + data[at + 6 :])
            changed += 1
    assert changed


def _run(url: str, *args: str):
    """``replay`` over a hand-written archive: no sealed topic proves it current, which
    ``--offline`` accepts knowingly (what these tests hold it to is the log and the chain); a
    bundle's export takes no --offline (the bundle is checked with its own proofs)."""
    offline = [] if args[0] == "export" else ["--offline"]
    return CliRunner().invoke(tracevault, ["replay", "--archive-url", url, *args, *offline])


def test_show_prints_the_timeline_and_json_lines(archive) -> None:
    # a legacy archive (no signed log): shown as the store holds it, knowingly
    res = _run(archive, "show", "run-a", "--no-verify")
    assert res.exit_code == 0, res.output
    assert "MODEL_CALL" in res.output and "gpt-4o" in res.output
    res = _run(archive, "show", "run-a", "--json", "--no-verify")
    lines = [json.loads(x) for x in res.stdout.splitlines()]
    assert [x["seq"] for x in lines] == list(range(11))
    assert lines[4]["request"] == {"args": {"q": "boiling point altitude 2000 m"}, "tool": "search"}


def test_verify_ok_and_json(archive) -> None:
    # these archives carry no signed log: only the chain can be checked, and only when asked
    res = _run(archive, "verify", "run-a", "--no-log-check")
    assert res.exit_code == 0, res.output
    assert "chain only" in res.output and "A2 receipts" in res.output
    res = _run(archive, "verify", "run-a", "--json", "--no-log-check")
    out = json.loads(res.output)
    assert out["ok"] and out["finished"] and out["count"] == 11
    assert (out["status"], out["chain_only"], out["log_checked"]) == ("chain only", True, False)


def test_verify_failure_exits_1_naming_seq_and_object(archive) -> None:
    p = _file(archive, segment_key("run-a", 4, 7))
    p.chmod(0o644)
    p.write_bytes(p.read_bytes()[:-25])
    res = _run(archive, "verify", "run-a", "--json")
    assert res.exit_code == 1
    out = json.loads(res.output)
    assert out["ok"] is False and out["object"] == segment_key("run-a", 4, 7)
    res = _run(archive, "verify", "run-a")
    assert res.exit_code == 1 and segment_key("run-a", 4, 7) in res.output


@pytest.mark.parametrize("extra", [[], ["--require-finished"]])
def test_a_finished_run_whose_final_receipt_was_deleted_exits_1(archive, extra) -> None:
    os.remove(_file(archive, final_key("run-a")))
    res = _run(archive, "verify", "run-a", "--json", *extra)
    assert res.exit_code == 1, res.output
    out = json.loads(res.output)
    assert out["ok"] is False and out["object"] == final_key("run-a")


def test_unknown_run_exits_3(archive) -> None:
    res = _run(archive, "verify", "run-zzz")
    assert res.exit_code == 3 and "run-zzz" in res.output


def test_usage_errors_exit_2(archive) -> None:
    assert _run(archive, "verify").exit_code == 2
    assert _run(archive, "run", "run-a", "--agent", "no_colon").exit_code == 2
    assert _run(archive, "run", "run-a", "--agent", "tests.replayer.agents:nope").exit_code == 2


def test_run_matches_and_until(signed) -> None:
    res = _run(signed, "run", "run-a", "--agent", AGENT)
    assert res.exit_code == 0, res.output
    assert "matched the record" in res.output
    res = _run(signed, "run", "run-a", "--agent", AGENT, "--until", "4", "--json")
    out = json.loads(res.output)
    assert out["matched"] and out["stopped"] and out["steps"] == 5


def test_run_divergence_exits_1_with_the_report(signed) -> None:
    res = _run(signed, "run", "run-c", "--agent", AGENT)
    assert res.exit_code == 1
    assert "diverged at seq 3" in res.output and "what the record says came next" in res.output
    out = json.loads(_run(signed, "run", "run-c", "--agent", AGENT, "--json").output)
    assert out["divergence"]["seq"] == 3
    assert out["divergence"]["diff"][0].startswith("$.request.messages[0].content")


def test_run_refuses_a_run_that_does_not_verify(signed) -> None:
    _corrupt_entries(signed, "run-a")
    res = _run(signed, "run", "run-a", "--agent", AGENT)
    assert res.exit_code == 1 and "matched" not in res.output, res.output
    assert "check 4 hash at seq 0" in res.output, res.output


def test_diff_of_two_runs(signed) -> None:
    res = _run(signed, "diff", "run-a", "run-c", "--json")
    assert res.exit_code == 1
    out = json.loads(res.output)
    assert out["divergence"]["seq"] == 3  # run-c was recorded with a changed prompt
    assert out["divergence"]["diff"][0].startswith("$.request.messages[0].content: expected")
    # run-c's model answered the changed prompt differently and the agent crashed
    assert (out["a"]["count"], out["b"]["count"]) == (11, 6)
    assert out["b"]["error"].startswith("KeyError")


def test_export_and_verify_bundle(archive, tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    res = _run(archive, "export", "run-a", "-o", str(out))
    assert res.exit_code == 0, res.output
    assert (out / "README.md").is_file() and len(list((out / "raw").iterdir())) == 11
    args = ["replay", "verify", "--bundle", str(out), "--json"]
    res = CliRunner().invoke(tracevault, [*args, "--no-log-check"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["checks"][0].startswith("B1")
    res = CliRunner().invoke(tracevault, args)  # no key: fail closed
    assert res.exit_code == 1 and json.loads(res.output)["status"] == "unverified"


def test_batch_over_a_day_reports_each_run(signed) -> None:
    day = micros_to_datetime(T0).date().isoformat()  # the runs were sealed that day
    res = _run(
        signed,
        "batch",
        "--agent",
        AGENT,
        "--since",
        day,
        "--until",
        day,
        "--workers",
        "2",
        "--json",
    )
    assert res.exit_code == 1, res.output
    out = json.loads(res.output)
    by_run = {r["run_id"]: r for r in out["runs"]}
    assert by_run["run-a"]["status"] == by_run["run-b"]["status"] == "ok"
    assert by_run["run-c"]["status"] == "diverged" and by_run["run-c"]["seq"] == 3
    assert out["totals"] == {"runs": 3, "ok": 2, "diverged": 1, "verify_failed": 0, "error": 0}


def test_batch_reports_a_run_that_does_not_verify(signed) -> None:
    _corrupt_entries(signed, "run-b")
    day = micros_to_datetime(T0).date().isoformat()
    res = _run(signed, "batch", "--agent", AGENT, "--since", day, "--until", day)
    assert res.exit_code == 1
    assert "verify_failed" in res.output and "ok=1" in res.output and "diverged=1" in res.output


def test_batch_over_an_empty_window_is_ok(signed) -> None:
    res = _run(signed, "batch", "--agent", AGENT, "--since", "2020-01-01", "--until", "2020-01-02")
    assert res.exit_code == 0 and "runs=0" in res.output


def test_replay_reaches_s3_through_the_endpoint_flag(s3_endpoint: str) -> None:
    # The endpoint comes from the flag alone: the variable is unset for this invocation.
    bucket = f"tv-cli-{os.urandom(6).hex()}"
    boto3.client("s3", endpoint_url=s3_endpoint).create_bucket(
        Bucket=bucket, ObjectLockEnabledForBucket=True
    )
    url = f"s3://{bucket}/archive"
    store = open_store(url, Settings(s3_endpoint_url=s3_endpoint))
    write_run(store, seal(recorded("on-s3")), per_segment=4)
    store.close()
    flags = ["replay", "--archive-url", url, "--s3-endpoint-url", s3_endpoint]
    env: dict[str, str | None] = {"TRACEVAULT_S3_ENDPOINT_URL": None}
    args = [*flags, "verify", "on-s3", "--json", "--no-log-check"]
    res = CliRunner().invoke(tracevault, args, env=env)
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["count"] == 11
    args = [*flags, "show", "on-s3", "--json", "--no-verify"]  # no signed log: as stored
    res = CliRunner().invoke(tracevault, args, env=env)
    assert res.exit_code == 0 and len(res.stdout.splitlines()) == 11


def test_verify_archive_without_a_key_is_unverified_and_with_one_fails_l1(archive) -> None:
    """Legacy archives (no log evidence): without a key verify fails closed (unverified,
    exit 1), --no-log-check checks their chain and says what that does not prove; a trusted
    key asks for the signed log, which they do not carry (docs/log.md)."""
    from tracevault.transparency import Ed25519Signer

    res = _run(archive, "verify", "run-a")
    text = " ".join(res.output.split())
    assert res.exit_code == 1 and "unverified: no trusted log key" in text, res.output
    out = json.loads(_run(archive, "verify", "run-a", "--json").output)
    assert (out["ok"], out["status"], out["log_checked"]) == (False, "unverified", False)
    assert out["error"].startswith("unverified: no trusted log key")
    res = _run(archive, "verify", "run-a", "--no-log-check")
    text = " ".join(res.output.split())
    assert res.exit_code == 0 and "the signed log was NOT checked" in text
    assert "proves nothing against whoever can write the store" in text
    vkey = Ed25519Signer.generate("tv.test-log").verifier.vkey
    res = _run(archive, "verify", "run-a", "--json", "--trusted-key", vkey)
    out = json.loads(res.output)
    assert res.exit_code == 1 and out["ok"] is False
    assert out["error"].startswith("L1 signature: run run-a from the archive")
    res = _run(archive, "verify", "run-a", "--witness-key", vkey)
    assert res.exit_code == 2 and "give --trusted-key" in res.output
