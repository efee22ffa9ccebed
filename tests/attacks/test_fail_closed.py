"""Verify fails closed (issue 22): attacks that passed as "verified" before, each really made
against a real broker, the real archiver and a file:// archive, and each named.

- an archive rewritten by someone without the log key, verified with no key at all;
- a bundle whose event was changed and every hash recomputed, verified with no key;
- a finished run's tail deleted from the archive with everything after it in the partition;
- a run of another deployment (another topic prefix, the same log key) copied unchanged
  into this deployment's archive;
- an archived event rewritten at seq 2, the archive's hashes recomputed around the genuine
  checkpoints: L2 names seq 2, not seq 0;
- an unfinished run on the topic whose last event is older than the idle-close horizon.
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

from tests.attacks.test_topic_bundle_attacks import _raws, _refund_4800, _rewrite
from tests.conftest import NOW_US
from tests.kafka_harness import free_port
from tests.replayer.conftest import recorded
from tests.replayer.recording import seal, seal_raws
from tests.services.archiver.helpers import SealedLog, running, wait_for
from tests.services.archiver.sealed_factory import sealed_run, sealed_values
from tests.transparency.signed_sealed import SignedSealedWriter, cli_env, fresh_settings
from tracevault.cli import tracevault
from tracevault.config import Settings
from tracevault.schemas import canonical_json, decode_event, encode_event, encode_sealed
from tracevault.services.archiver import Archiver
from tracevault.transparency import Ed25519Signer

# Every key here is named by the test: the session's vkey must not make anything pass.
pytestmark = pytest.mark.usefixtures("only_keys_given_here")


def _fast(settings_factory: Callable[..., Settings], **kw: object) -> Settings:
    return settings_factory(archive_segment_max_age_s=0.2, partitions=1, **kw)


#: The commands that verify: these attacks are on the signed log, and their runs are made by
#: hand, unsigned, so who wrote them is waived knowingly (tests/attacks/test_agent_identity.py
#: attacks provenance).
_VERIFYING = ("verify", "run", "diff")
#: The status of a run that verified with the provenance check waived.
_PASS = "log verified, provenance not checked"


def _cli(settings: Settings, *args: str) -> tuple[int, dict[str, Any], str]:
    """``tracevault replay ... --json`` for ``settings``' deployment, archive and vkeys."""
    env = {**cli_env(settings), "TRACEVAULT_LOG_VKEYS": settings.log_vkeys}
    if args[0] in _VERIFYING:
        args = (*args, "--no-agent-check")
    res = CliRunner().invoke(
        tracevault, ["replay", "--archive-url", settings.archive_url, *args, "--json"], env=env
    )
    return res.exit_code, json.loads(res.stdout), res.output


def _archive_all(settings: Settings, run_id: str, n: int) -> None:
    archiver = Archiver(settings)
    with running(archiver):
        wait_for(lambda: archiver.stats.events_archived >= n, 60, f"{run_id} archived")


def _files(settings: Settings) -> set[Path]:
    root = Path(settings.archive_url.removeprefix("file://"))
    return {p for p in root.rglob("*") if p.is_file()}


def test_a_rewritten_archive_verified_without_a_key_is_unverified(
    settings_factory: Callable[..., Settings],
) -> None:
    """The store's admin rewrites the whole run with the real tools, under a key of their
    own; with no trusted key verify cannot tell, so it must not say "verified"."""
    genuine = SealedLog(_fast(settings_factory))
    genuine.produce({"run-k": sealed_values("run-k", 8)})
    attacker = SealedLog(_fast(settings_factory), Ed25519Signer.generate("test-log"))
    attacker.produce({"run-k": sealed_values("run-k", 8)})
    _archive_all(attacker.settings_trusting(), "run-k", 8)
    forged = attacker.settings.model_copy(update={"log_vkeys": ""})  # the archive, no key
    code, out, _ = _cli(forged, "verify", "run-k")
    assert code == 1 and (out["ok"], out["status"]) == (False, "unverified")
    assert out["error"].startswith("unverified: no trusted log key")
    res = CliRunner().invoke(
        tracevault,
        ["replay", "--archive-url", forged.archive_url, "verify", "run-k", "--no-agent-check"],
        env={**cli_env(forged), "TRACEVAULT_LOG_VKEYS": ""},
    )
    assert res.exit_code == 1 and "run run-k: unverified (archive)" in res.output
    # --no-log-check says what it is: the chain, which holds, and nothing more
    code, out, _ = _cli(forged, "verify", "run-k", "--no-log-check")
    assert code == 0 and out["log_checked"] is False
    assert out["status"] == "chain only, provenance not checked"
    # with the genuine key the rewrite is named
    code, out, _ = _cli(forged, "verify", "run-k", "--trusted-key", genuine.vkey)
    assert code == 1 and out["error"].startswith("L1 signature")


def test_a_tampered_bundle_verified_without_a_key_fails_naming_the_seq(
    settings_factory: Callable[..., Settings], tmp_path: Path
) -> None:
    settings = _fast(settings_factory)
    sl = SealedLog(settings)
    sl.produce({"run-tb": sealed_values("run-tb", 8)})
    trusting = sl.settings_trusting()
    _archive_all(trusting, "run-tb", 8)
    root = tmp_path / "bundle"
    code, out, text = _cli(trusting, "export", "run-tb", "-o", str(root))
    assert code == 0, text
    raws = _raws(root)
    raws[3] = _refund_4800(raws[3])
    _rewrite(root, raws)  # every file, hash and manifest entry recomputed; proofs left
    code, out, _ = _cli(settings, "verify", "--bundle", str(root))
    assert code == 1 and out["ok"] is False
    assert (out["seq"], out["object"]) == (3, "log/000000000003.tlog-proof")
    assert "check B4 proofs at seq 3" in out["error"]
    code, out, _ = _cli(settings, "verify", "--bundle", str(root), "--trusted-key", sl.vkey)
    assert code == 1 and out["seq"] == 3 and out["error"].startswith("L2 inclusion")


def test_a_deleted_tail_fails_by_default_naming_the_missing_end(
    settings_factory: Callable[..., Settings],
) -> None:
    """Seqs 6..9 (RUN_FINISHED at 9) and everything the archive wrote after seq 5 are
    deleted: the archive is consistent again, as it was before the last flush."""
    sl = SealedLog(_fast(settings_factory))
    values = sealed_values("run-cut", 10)
    sl.transaction([("run-cut", v) for v in values[:6]])
    settings = sl.settings_trusting()
    archiver = Archiver(settings)
    with running(archiver):
        wait_for(lambda: archiver.stats.events_archived == 6, 60, "first flush")
        before = _files(settings)
        sl.transaction([("run-cut", v) for v in values[6:]])
        wait_for(lambda: archiver.stats.events_archived == 10, 60, "second flush")
    code, out, text = _cli(settings, "verify", "run-cut")
    assert code == 0 and out["finished"], text  # the genuine archive verifies
    later = _files(settings) - before
    assert later and any("run-cut" in p.name for p in later)  # its newer index object too
    for p in later:
        p.unlink()
    # with the sealed topic reachable, its archived checkpoint shows the archive shrank (L5)
    code, out, _ = _cli(settings, "verify", "run-cut")
    assert code == 1 and out["ok"] is False and "rolled back" in out["error"], out
    # with no fresher evidence at hand (Kafka down, no witness), the run's missing end does
    settings = settings.model_copy(update={"bootstrap_servers": f"127.0.0.1:{free_port()}"})
    code, out, _ = _cli(settings, "verify", "run-cut")
    assert code == 1 and out["ok"] is False and out["seq"] == 5, out
    assert out["error"].startswith("L3 end: run run-cut has no RUN_FINISHED")
    assert "its end, after seq 5, is missing" in out["error"]
    # a run really in progress is the user's to accept, said out loud; with Kafka down nothing
    # proves the archive current either (the rollback above would pass), so that is said too
    code, out, _ = _cli(settings, "verify", "run-cut", "--allow-unfinished")
    assert code == 1 and out["status"] == "unverified freshness", out
    code, out, _ = _cli(settings, "verify", "run-cut", "--allow-unfinished", "--offline")
    assert code == 0 and out["status"] == f"{_PASS}, freshness not checked (offline), unfinished"
    code, out, _ = _cli(settings, "verify", "run-cut", "--require-finished")
    assert code == 1 and out["error"].startswith("L3 end")


def test_a_run_of_another_deployment_copied_in_fails_l1_naming_both_origins(
    settings_factory: Callable[..., Settings], tmp_path: Path
) -> None:
    """Deployment B (another topic prefix) signs with the same log key as this one; its run,
    archived by B's archiver, is copied byte for byte into this deployment's archive."""
    here = SealedLog(_fast(settings_factory))
    here.produce({"run-here": sealed_values("run-here", 4)})
    mine = here.settings_trusting()
    _archive_all(mine, "run-here", 4)
    there = SealedLog(_fast(settings_factory), here.signer)  # the same key, another prefix
    there.produce({"run-there": sealed_values("run-there", 6)})
    theirs = there.settings_trusting()
    _archive_all(theirs, "run-there", 6)
    code, out, text = _cli(theirs, "verify", "run-there")
    assert code == 0 and out["status"] == _PASS, text  # genuine where it belongs
    src = Path(theirs.archive_url.removeprefix("file://"))
    dst = Path(mine.archive_url.removeprefix("file://"))
    for p in sorted(src.rglob("*")):
        if p.is_file():
            target = dst / p.relative_to(src)
            if target.exists():  # the store's own marker, the same in every file:// archive
                assert target.read_bytes() == p.read_bytes(), target
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(p, target)
    code, out, text = _cli(mine, "verify", "run-here")
    assert code == 0, text  # this deployment's own run still verifies
    code, out, _ = _cli(mine, "verify", "run-there")
    assert code == 1 and out["ok"] is False and out["error"].startswith("L1 origin")
    assert f"'tracevault/{theirs.topic_prefix}/0'" in out["error"]
    assert f"'tracevault/{mine.topic_prefix}/0'" in out["error"]
    # the same run as a bundle, handed over as this deployment's
    code, out, text = _cli(theirs, "export", "run-there", "-o", str(tmp_path / "b"))
    assert code == 0, text
    code, out, _ = _cli(mine, "verify", "--bundle", str(tmp_path / "b"))
    assert code == 1 and out["error"].startswith("L1 origin: log/checkpoint is for log")
    assert f"'tracevault/{mine.topic_prefix}/0'" in out["error"]
    code, out, text = _cli(theirs, "verify", "--bundle", str(tmp_path / "b"))
    assert code == 0 and out["status"] == _PASS, text  # for its own deployment


def test_an_unfinished_topic_run_past_the_idle_horizon_fails_l3_by_default(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """The sequencer's head says the run is open, but its last event is months old: the
    sequencer would have closed it after sequencer_idle_close_s, so it was cut off."""
    settings = fresh_settings(kafka_bootstrap, tmp_path)
    writer = SignedSealedWriter(settings)
    writer.publish(seal(recorded("run-stale"))[:5])  # recorded at T0, long ago
    args = ["verify", "run-stale", "--from", "topic", "--trusted-key", writer.vkey]
    code, out, _ = _cli(settings, *args)
    assert code == 1 and out["seq"] == 4 and out["error"].startswith("L3 end")
    assert "past the idle-close horizon" in out["error"]
    code, out, text = _cli(settings, *args, "--allow-unfinished")
    assert code == 0 and out["status"] == f"{_PASS}, unfinished", text
    # a run recorded just now, its head open: it can be live, so it passes with a warning
    now = [dataclasses.replace(e, at=NOW_US + e.seq) for e in recorded("run-live")]
    writer.publish(seal(now)[:5])
    live = ["verify", "run-live", "--from", "topic", "--trusted-key", writer.vkey]
    code, out, text = _cli(settings, *live)
    assert code == 0 and out["status"] == f"{_PASS}, unfinished", text
    assert any("no RUN_FINISHED in the signed log yet" in w for w in out["warnings"])
    code, out, _ = _cli(settings, *live, "--require-finished")  # even a live one
    assert code == 1 and out["error"].startswith("L3 end")


def _two_flushes(sl: SealedLog, settings: Settings, run_id: str, values: list[bytes]) -> None:
    """Seqs 0..1 in one transaction and flush (a checkpoint of size 2), then the rest."""
    archiver = Archiver(settings)
    with running(archiver):
        sl.transaction([(run_id, v) for v in values[:2]])
        wait_for(lambda: archiver.stats.events_archived == 2, 60, "first flush")
        sl.transaction([(run_id, v) for v in values[2:]])
        wait_for(lambda: archiver.stats.events_archived == len(values), 60, "second flush")


def test_an_archive_rewritten_at_seq_2_is_named_at_seq_2(
    settings_factory: Callable[..., Settings], tmp_path: Path
) -> None:
    """The store's admin changes seq 2's event and rebuilds every object of the run's log
    (entry bundles, tiles, run index) with the real archiver, then puts the genuine signed
    checkpoints back: every leaf's proof now comes from rewritten hashes."""
    base = _fast(settings_factory)
    genuine = SealedLog(base)
    events = sealed_run("run-w", 8)
    mine = genuine.settings_trusting()
    _two_flushes(genuine, mine, "run-w", [encode_sealed(e) for e in events])
    code, out, text = _cli(mine, "verify", "run-w")
    assert code == 0 and out["status"] == _PASS, text
    raws = [e.raw for e in events]
    ev = decode_event(raws[2])
    raws[2] = encode_event(dataclasses.replace(ev, response=canonical_json({"refund": 4800})))
    attacker = SealedLog(base, Ed25519Signer.generate("test-log"))
    forged = attacker.settings_trusting().model_copy(
        update={"archive_url": f"file://{tmp_path / 'forged'}", "archive_group_id": "mallory"}
    )
    _two_flushes(attacker, forged, "run-w", [encode_sealed(e) for e in seal_raws(raws, "run-w")])
    src = Path(mine.archive_url.removeprefix("file://"))
    dst = tmp_path / "forged"
    copied = 0
    for p in src.rglob("*"):
        if p.is_file() and "/checkpoint/" in p.as_posix():
            target = dst / p.relative_to(src)
            target.chmod(0o600)
            target.unlink()
            shutil.copy2(p, target)
            copied += 1
    assert copied == 2  # the genuine checkpoints of sizes 2 and 8
    victim = forged.model_copy(update={"log_vkeys": genuine.vkey})
    code, out, _ = _cli(victim, "verify", "run-w")
    assert code == 1 and out["seq"] == 2, out
    assert out["error"].startswith("L2 inclusion: run run-w seq 2")
    assert "seqs 0..1 before it are leaves of the older signed checkpoint" in out["error"]
