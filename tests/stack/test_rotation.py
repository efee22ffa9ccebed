"""Log-key rotation is an operation, not an attack (docs/operations.md, "Key rotation").

A demo archives under key A; ``tracevault keys rotate`` makes key B and lists both vkeys in
the demo's ``log.vkey``; a second demo in the same folder (same prefix, same broker, same
archive) restarts the sequencer with B: it resumes the log A signed, the archiver trusts
both and keeps going, and verify passes for runs signed under each key. Before rotation was
an operation, the restarted sequencer took A's checkpoints for another log's ("is not our
checkpoint"), and the demo failed.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.conftest import unique_name
from tests.stack.live_stack import Service, Stack, wait_for
from tracevault.archive import open_store
from tracevault.config import Settings
from tracevault.demo.run import demo_log_key, demo_trusted
from tracevault.transparency import Ed25519Signer


def _cli(cwd: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tracevault", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip


def _demo(cwd: Path, env: dict[str, str], prefix: str, archive: str) -> dict[str, Any]:
    proc = _cli(
        cwd, env, "--prefix", prefix, "demo", "--agents", "2", "--runs", "3", "--sample", "2",
        "--archive", archive, "--json",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    summary: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return summary


def test_the_demo_goes_on_after_a_log_key_rotation(kafka_bootstrap: str, tmp_path: Path) -> None:
    prefix, archive = unique_name("rot"), f"file://{tmp_path / 'archive'}"
    env = {**os.environ, "TRACEVAULT_BOOTSTRAP_SERVERS": kafka_bootstrap}
    first = _demo(tmp_path, env, prefix, archive)
    key_a = first["log_vkey"]

    state = tmp_path / ".tracevault"
    rotated = _cli(
        tmp_path, env, "keys", "rotate", str(state / "log.key"), "--vkeys",
        str(state / "log.vkey"), "--json",
    )  # fmt: skip
    assert rotated.returncode == 0, rotated.stderr
    out = json.loads(rotated.stdout)
    key_b = out["new"]["vkey"]
    assert out["old"]["vkey"] == key_a != key_b
    assert (state / "log.vkey").read_text().split() == [key_b, key_a]
    retired = Path(out["retired_file"])
    assert retired.read_text().strip().startswith("PRIVATE+KEY+")
    assert (
        stat.S_IMODE(retired.stat().st_mode)
        == stat.S_IMODE((state / "log.key").stat().st_mode)
        == 0o600
    )

    second = _demo(tmp_path, env, prefix, archive)  # the same folder, prefix and archive
    assert second["log_vkey"] == key_b
    assert second["verified"] == {"archive": 2, "topic": 2}
    # the restarted sequencer resumed A's log as its own, no warning per checkpoint
    assert "not our checkpoint" not in (tmp_path / second["logs"]["sequencer"]).read_text()

    # the demo's agents sign with its own agent key: verify trusts the demo's agent vkeys
    agents = {**env, "TRACEVAULT_AGENT_VKEYS": f"@{state / 'agent_vkeys.json'}"}

    def verify(run_id: str, key: str) -> subprocess.CompletedProcess[str]:
        return _cli(
            tmp_path, agents, "--prefix", prefix, "replay", "--archive-url", archive, "verify",
            run_id, "--from", "archive", "--trusted-key", key,
        )  # fmt: skip

    trusted = f"@{state / 'log.vkey'}"
    for run_id in (first["run_ids"][0], second["run_ids"][0]):
        proc = verify(run_id, trusted)
        assert proc.returncode == 0, f"{run_id}: {proc.stdout[-2000:]}{proc.stderr[-2000:]}"
    # the second demo's runs really are signed with the new key: the old alone does not do
    old_only = verify(second["run_ids"][0], key_a)
    assert old_only.returncode == 1 and "L1" in old_only.stdout + old_only.stderr, old_only
    store = open_store(archive)
    try:
        assert not store.list("quarantine/"), "nothing was refused as another log's"
        assert not store.list("holes/"), "nothing was lost"
    finally:
        store.close()


def test_the_demo_trusts_the_vkeys_the_user_trusts(tmp_path: Path) -> None:
    """TRACEVAULT_LOG_VKEYS (a key of the README's own sequencer, say) is trusted by the
    demo's archiver and verify beside the demo's key, which its log.vkey keeps."""
    _path, own = demo_log_key(tmp_path)
    other = Ed25519Signer.generate("tv.example/log").verifier.vkey
    settings = Settings(log_vkeys=other)
    assert demo_trusted(settings, tmp_path).split(",") == [own, other]
    assert demo_log_key(tmp_path)[1] == own  # the same key the second time


def test_a_sequencer_under_another_key_then_the_demo_trusting_both(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """The README's way (issue 33, item 3): after a demo, a sequencer signs the demo's topics
    with a key of its own, TRACEVAULT_LOG_VKEYS naming it and the demo's; the next demo, with
    that setting, resumes and archives that log and passes (it exited 3 before: its archiver
    trusted only the demo's key and exited 4)."""
    prefix, archive = unique_name("rot"), f"file://{tmp_path / 'archive'}"
    env = {**os.environ, "TRACEVAULT_BOOTSTRAP_SERVERS": kafka_bootstrap}
    _demo(tmp_path, env, prefix, archive)
    state = tmp_path / ".tracevault"
    made = _cli(tmp_path, env, "keys", "generate", "--name", "tv.example/log", "--out", "log.key")
    assert made.returncode == 0, made.stderr
    other = made.stdout.strip()
    trusted = {"TRACEVAULT_LOG_VKEYS": f"{other},@{state / 'log.vkey'}"}
    base = {k: v for k, v in env.items() if not k.startswith("TRACEVAULT_LOG_")}
    own = {**base, **trusted, "TRACEVAULT_LOG_KEY_FILE": str(tmp_path / "log.key")}
    seq = Service(
        "sequencer",
        ["--bootstrap-servers", kafka_bootstrap, "--prefix", prefix, "sequencer",
         "--instance-id", "readme-seq"],
        own, tmp_path / "readme-sequencer.log",
    )  # fmt: skip
    try:
        settings = Settings(bootstrap_servers=kafka_bootstrap, topic_prefix=prefix)
        stack = Stack(settings, own, tmp_path, {"sequencer": seq})
        n = stack.record(runs=2, events=4)
        wait_for(
            lambda: seq.sample("tracevault_sequencer_sealed_total") == n,
            120,
            f"{n} events sealed under the other key",
            seq.tail,
        )
    finally:
        seq.stop()
    assert "not our checkpoint" not in seq.log.read_text()
    second = _demo(tmp_path, {**base, **trusted}, prefix, archive)
    assert second["verified"] == {"archive": 2, "topic": 2}
    assert "not our checkpoint" not in (tmp_path / second["logs"]["sequencer"]).read_text()
    store = open_store(archive)
    try:
        assert not store.list("quarantine/"), "nothing was refused as another log's"
    finally:
        store.close()
