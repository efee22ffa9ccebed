"""Replaying, comparing and exporting a rewritten archive (issue 22's spirit): each takes the
run as the record, so each must check it as ``replay verify`` does, not the chain alone.

The store's admin changes seq 2 of an archived run (a model's answer), re-seals the whole run
so its chain is consistent again, rebuilds every object of the run's log with the real
archiver under a key of their own, then puts the genuine signed checkpoints back. The chain
holds (``verify --no-log-check`` exits 0); ``replay run``, ``diff`` and ``export --otel``
checked only that before, and re-ran, compared and exported the forgery as the record.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tests.attacks.test_fail_closed import _cli, _fast, _two_flushes
from tests.replayer.conftest import recorded
from tests.replayer.recording import seal, seal_raws
from tests.services.archiver.helpers import SealedLog
from tests.transparency.signed_sealed import cli_env
from tracevault.cli import tracevault
from tracevault.config import Settings
from tracevault.schemas import canonical_json, decode_event, encode_event, encode_sealed
from tracevault.transparency import Ed25519Signer

pytestmark = pytest.mark.usefixtures("only_keys_given_here")

AGENT = "tests.replayer.agents:research_agent"


def _forged_archive(settings_factory: Callable[..., Settings], tmp_path: Path) -> Settings:
    """The rewritten archive, as settings that trust the genuine log key."""
    base = _fast(settings_factory)
    genuine = SealedLog(base)
    mine = genuine.settings_trusting()
    sealed = seal(recorded("run-r"))
    _two_flushes(genuine, mine, "run-r", [encode_sealed(e) for e in sealed])
    code, out, text = _cli(mine, "run", "run-r", "--agent", AGENT)
    assert code == 0 and out["matched"], text  # the genuine record re-runs
    raws = [e.raw for e in sealed]
    ev = decode_event(raws[2])
    raws[2] = encode_event(dataclasses.replace(ev, response=canonical_json({"refund": 4800})))
    attacker = SealedLog(base, Ed25519Signer.generate("test-log"))
    forged = attacker.settings_trusting().model_copy(
        update={"archive_url": f"file://{tmp_path / 'forged'}", "archive_group_id": "mallory"}
    )
    _two_flushes(attacker, forged, "run-r", [encode_sealed(e) for e in seal_raws(raws, "run-r")])
    src = Path(mine.archive_url.removeprefix("file://"))
    copied = 0
    for p in src.rglob("*"):
        if p.is_file() and "/checkpoint/" in p.as_posix():
            target = tmp_path / "forged" / p.relative_to(src)
            target.chmod(0o600)
            target.unlink()
            shutil.copy2(p, target)
            copied += 1
    assert copied == 2  # the genuine checkpoints of both flushes
    return forged.model_copy(update={"log_vkeys": genuine.vkey})


def test_a_rewritten_rechained_archive_is_not_replayed_diffed_or_exported(
    settings_factory: Callable[..., Settings], tmp_path: Path
) -> None:
    victim = _forged_archive(settings_factory, tmp_path)
    # the chain alone is consistent: that is all run, diff and export --otel checked
    code, out, text = _cli(victim, "verify", "run-r", "--no-log-check")
    assert code == 0 and out["status"] == "chain only, provenance not checked", text
    code, out, _ = _cli(victim, "verify", "run-r")
    assert code == 1 and out["error"].startswith("L2 inclusion: run run-r seq 2"), out
    # re-run: refused, naming the failed check and seq, before the agent runs
    code, out, text = _cli(victim, "run", "run-r", "--agent", AGENT)
    assert code == 1 and out["ok"] is False and out["seq"] == 2, text
    assert out["error"].startswith("L2 inclusion: run run-r seq 2"), out
    assert "matched" not in out and "divergence" not in out
    code, out, text = _cli(victim, "run", "run-r", "--agent", AGENT, "--keep-going")
    assert code == 1 and out["error"].startswith("L2 inclusion"), text
    # compared with itself (the same bytes twice): refused, not "the same"
    code, out, text = _cli(victim, "diff", "run-r", "run-r")
    assert code == 1 and out["error"].startswith("L2 inclusion"), text
    # exported as spans: refused, and nothing written
    spans = tmp_path / "spans.json"
    code, out, text = _cli(victim, "export", "run-r", "--otel", "-o", str(spans))
    assert code == 1 and out["error"].startswith("L2 inclusion"), text
    assert not spans.exists()
    # without the genuine key the forgery is not "the record" either: unverified
    keyless = victim.model_copy(update={"log_vkeys": ""})
    code, out, _ = _cli(keyless, "run", "run-r", "--agent", AGENT)
    assert code == 1 and out["status"] == "unverified", out
    # under the attacker's own key L1 names the signature
    rogue = victim.model_copy(
        update={"log_vkeys": Ed25519Signer.generate("test-log").verifier.vkey}
    )
    code, out, _ = _cli(rogue, "run", "run-r", "--agent", AGENT)
    assert code == 1 and out["error"].startswith("L1 signature"), out


def _show(settings: Settings, *args: str) -> Any:
    """``tracevault replay show ...`` with the settings' archive and trusted log key."""
    env = {**cli_env(settings), "TRACEVAULT_LOG_VKEYS": settings.log_vkeys, "COLUMNS": "200"}
    return CliRunner().invoke(
        tracevault, ["replay", "--archive-url", settings.archive_url, "show", *args], env=env
    )


def test_show_of_a_rewritten_archive_fails_closed(
    settings_factory: Callable[..., Settings], tmp_path: Path
) -> None:
    """``show`` printed the forged answer at seq 2 with exit 0 and no word that nothing was
    checked; it verifies as ``verify`` does now, or says UNVERIFIED with --no-verify."""
    victim = _forged_archive(settings_factory, tmp_path)
    res = _show(victim, "run-r", "--json")
    assert res.exit_code == 1, res.output
    assert "4800" not in res.stdout  # the forged content is never printed as the record
    # the runs here are hand-made, unsigned: who wrote them is waived knowingly, and the
    # signed log names the rewrite
    res = _show(victim, "run-r", "--json", "--no-agent-check")
    assert res.exit_code == 1, res.output
    out = json.loads(res.stdout)
    assert out["ok"] is False and out["error"].startswith("L2 inclusion: run run-r seq 2"), out
    assert "4800" not in res.stdout
    res = _show(victim, "run-r", "--no-agent-check")  # the table: the failure, no timeline
    assert res.exit_code == 1 and "L2 inclusion" in res.output and "4800" not in res.output
    res = _show(victim, "run-r", "--tree", "--json", "--no-agent-check")
    assert res.exit_code == 1 and "L2 inclusion" in res.output, res.output
    # no trusted key: not shown as the record either, unverified
    keyless = victim.model_copy(update={"log_vkeys": ""})
    res = _show(keyless, "run-r", "--json", "--no-agent-check")
    assert res.exit_code == 1 and json.loads(res.stdout)["status"] == "unverified", res.output
    # --no-verify shows it, knowingly: UNVERIFIED heads it and stderr says nothing was checked
    res = _show(victim, "run-r", "--no-verify")
    assert res.exit_code == 0, res.output
    assert "UNVERIFIED (--no-verify)" in res.stdout, res.stdout
    assert "run run-r was NOT verified" in " ".join(res.stderr.split()), res.stderr
