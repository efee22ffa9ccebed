"""``replay run``, ``diff``, ``batch`` and ``export --otel`` take a run as the record, so they
verify it as ``replay verify`` does: without a trusted log key it is ``unverified``, exit 1,
and the message says how to proceed (the key, or ``--no-verify``, which stderr then names).

The archive is written as the archiver writes it now (a static log signed by the session's
log key); no key is trusted unless a test gives it, as a flag or as TRACEVAULT_LOG_VKEYS.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from tests.replayer.conftest import write_three_runs
from tests.replayer.recording import T0
from tracevault.cli import tracevault
from tracevault.schemas import micros_to_datetime

pytestmark = pytest.mark.usefixtures("only_keys_given_here")

AGENT = "tests.replayer.agents:research_agent"
NO_KEY = "unverified: run run-a was not checked against the signed log"


@pytest.fixture
def archive(tmp_path: Path) -> str:
    return write_three_runs(f"file://{tmp_path / 'archive'}", same=("run-a",))


def _cli(url: str, *args: str, vkeys: str = "") -> Result:
    """``replay`` over a hand-written archive: no sealed topic proves it current, which
    ``--offline`` accepts knowingly (the signed log is what these tests hold it to)."""
    env = {"TRACEVAULT_LOG_VKEYS": vkeys}
    return CliRunner().invoke(
        tracevault, ["replay", "--archive-url", url, *args, "--offline"], env=env
    )


def test_run_without_a_trusted_key_is_unverified_and_says_how_to_proceed(
    archive: str, log_vkey: str
) -> None:
    res = _cli(archive, "run", "run-a", "--agent", AGENT)
    assert res.exit_code == 1, res.output
    assert NO_KEY in res.output and "matched" not in res.output
    assert "--trusted-key" in res.output and "--no-verify re-runs it unverified" in res.output
    res = _cli(archive, "run", "run-a", "--agent", AGENT, "--json")
    out = json.loads(res.stdout)
    assert res.exit_code == 1 and (out["ok"], out["status"]) == (False, "unverified")
    assert out["error"].startswith(NO_KEY)
    # knowingly: it runs, and stderr says nothing was checked
    res = _cli(archive, "run", "run-a", "--agent", AGENT, "--no-verify", "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["matched"] is True
    assert "--no-verify: run run-a was NOT verified" in res.stderr
    # with the deployment's key, as a flag or as the setting, it verifies and runs
    res = _cli(archive, "run", "run-a", "--agent", AGENT, "--trusted-key", log_vkey)
    assert res.exit_code == 0 and "matched the record" in res.output, res.output
    res = _cli(archive, "run", "run-a", "--agent", AGENT, "--until", "4", vkeys=log_vkey)
    assert res.exit_code == 0 and "stopped after seq 4" in res.output, res.output
    assert "NOT verified" not in res.output


def test_run_with_another_key_fails_the_signed_log(archive: str) -> None:
    from tracevault.transparency import Ed25519Signer

    other = Ed25519Signer.generate("tracevault-test").verifier.vkey
    res = _cli(archive, "run", "run-a", "--agent", AGENT, "--json", vkeys=other)
    out = json.loads(res.stdout)
    assert res.exit_code == 1 and out["ok"] is False
    assert out["error"].startswith("L1 signature"), out


def test_diff_without_a_trusted_key_is_unverified(archive: str, log_vkey: str) -> None:
    res = _cli(archive, "diff", "run-a", "run-c")
    assert res.exit_code == 1 and NO_KEY in res.output
    assert "--no-verify compares it unverified" in res.output
    assert "difference" not in res.output
    res = _cli(archive, "diff", "run-a", "run-c", "--no-verify", "--json")
    assert res.exit_code == 1  # the runs differ: compared
    assert json.loads(res.stdout)["divergence"]["seq"] == 3
    assert "run run-a was NOT verified" in res.stderr and "run run-c" in res.stderr
    res = _cli(archive, "diff", "run-a", "run-c", "--json", vkeys=log_vkey)
    assert res.exit_code == 1 and json.loads(res.stdout)["divergence"]["seq"] == 3


def test_batch_without_a_trusted_key_is_refused(archive: str, log_vkey: str) -> None:
    day = micros_to_datetime(T0).date().isoformat()
    args = ["batch", "--agent", AGENT, "--since", day, "--until", day, "--json"]
    res = _cli(archive, *args)
    out = json.loads(res.stdout)
    assert res.exit_code == 1 and (out["ok"], out["status"]) == (False, "unverified")
    assert out["error"].startswith("unverified: the runs were not checked")
    res = _cli(archive, *args, "--no-verify")
    totals = json.loads(res.stdout)["totals"]
    assert (totals["ok"], totals["diverged"]) == (1, 1), res.output
    res = _cli(archive, *args, vkeys=log_vkey)
    totals = json.loads(res.stdout)["totals"]
    assert (totals["ok"], totals["diverged"], totals["verify_failed"]) == (1, 1, 0), res.output


def test_export_otel_without_a_trusted_key_is_unverified(
    archive: str, log_vkey: str, tmp_path: Path
) -> None:
    out_file = tmp_path / "spans.json"
    args = ["export", "run-a", "--otel", "-o", str(out_file), "--json"]
    res = _cli(archive, *args)
    assert res.exit_code == 1 and json.loads(res.stdout)["status"] == "unverified"
    assert not out_file.exists()
    res = _cli(archive, *args, vkeys=log_vkey)
    assert res.exit_code == 0, res.output
    spans = json.loads(out_file.read_text())
    assert '"verified, freshness not checked (offline)"' in json.dumps(spans)
    res = _cli(archive, *args, "--no-verify")
    assert res.exit_code == 0 and "NOT verified" in res.stderr
    assert "not verified (--no-verify)" in out_file.read_text()
