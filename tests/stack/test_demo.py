"""A small demo, run as a user runs it, and its summary checked against the archive itself."""

from __future__ import annotations

import os
import shlex
import subprocess

from tests.consumer.sequencer.support import assert_signed_log
from tests.stack.conftest import DemoRun
from tracevault.archive import list_runs, open_store
from tracevault.config import Settings
from tracevault.log import load_signer, parse_vkey
from tracevault.replayer._archive import load_from_archive


def test_small_demo_summary_matches_the_archive(demo_run: DemoRun) -> None:
    summary, archive, tmp_path = demo_run.summary, demo_run.archive, demo_run.cwd

    assert summary["runs"] == 12 == len(summary["run_ids"])
    assert summary["failed_runs"] >= 1  # chargeback tickets fail by design
    assert summary["verified"] == {"archive": 3, "topic": 3}
    assert summary["replayed"] == {"archive": 3, "topic": 3}

    store = open_store(archive)
    try:
        listed = {r.run_id for r in list_runs(store)}
        assert listed == set(summary["run_ids"])
        archived_events = 0
        for run_id in summary["run_ids"]:
            run = load_from_archive(store, run_id)  # the tiled log (docs/log.md, "Archive")
            seqs = [r["seq"] for r in run.records.rows]
            assert seqs == list(range(len(seqs))) and run.log_head, run_id  # finished
            archived_events += len(seqs)
    finally:
        store.close()
    assert summary["events"] == summary["events_sealed"] == summary["events_archived"]
    assert summary["events_archived"] == archived_events
    # The services were stopped cleanly: their logs end without a traceback.
    for path in summary["logs"].values():
        assert "Traceback" not in (tmp_path / path).read_text()


def test_the_commands_the_demo_prints_work(demo_run: DemoRun) -> None:
    env = {**os.environ, "TRACEVAULT_BOOTSTRAP_SERVERS": demo_run.bootstrap}
    commands = demo_run.summary["commands"]
    assert len(commands) >= 4
    for command in commands:
        proc = subprocess.run(
            shlex.split(command), cwd=demo_run.cwd, env=env, capture_output=True, text=True,
            timeout=120, check=False,
        )  # fmt: skip
        assert proc.returncode == 0, f"{command}\n{proc.stdout[-1500:]}\n{proc.stderr[-1500:]}"


def test_the_demo_signs_with_its_own_key(demo_run: DemoRun, log_vkey: str) -> None:
    key_file = demo_run.cwd / demo_run.summary["log_key_file"]
    assert key_file.stat().st_mode & 0o777 == 0o600
    vkey = demo_run.summary["log_vkey"]
    assert load_signer(key_file).verifier.vkey == vkey != log_vkey  # not the suite's key
    # its public half is where the printed commands read it: none verifies without a key
    vkey_file = demo_run.summary["log_vkey_file"]
    assert (demo_run.cwd / vkey_file).read_text().strip() == vkey
    verifying = [c for c in demo_run.summary["commands"] if " verify " in c]
    assert len(verifying) >= 2
    assert all(f"--trusted-key @{vkey_file}" in c for c in verifying), verifying
    settings = Settings(bootstrap_servers=demo_run.bootstrap, topic_prefix=demo_run.prefix)
    cps = assert_signed_log(settings, [parse_vkey(vkey)])
    assert sum(len(c) for c in cps.values()) > 0
