"""The sequencer's signed log: a checkpoint per partition per transaction, a key to start.

Read back from the real broker with an independent reader (``assert_signed_log``): after
every committed transaction each sealed partition holds a checkpoint record that verifies with
the session's vkey and lists exactly the leaf hashes of the event records since the previous
one (GAP markers included), in offset order; successive checkpoints are consistent, across a
restart that restores the tree from the heads topic.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.services.sequencer.support import (
    assert_signed_log,
    interleaved_runs,
    produce_raw,
    raw_event,
    running,
    sealed_by_run,
    sealed_count,
    wait_until,
)
from tracevault.config import Settings
from tracevault.errors import ConfigError
from tracevault.heads import find_head, locate_run, read_state
from tracevault.schemas import EventKind, decode_event
from tracevault.services.sequencer import Sequencer
from tracevault.transparency import Ed25519Signer, parse_vkey, write_private_key


def test_each_transaction_signs_its_partitions_and_a_restart_continues_the_log(
    seq_settings: Callable[..., Settings], log_vkey: str
) -> None:
    settings = seq_settings(partitions=3, sequencer_batch_size=40, sequencer_gap_timeout_s=1.0)
    first = interleaved_runs(12, 20, seed=5, stem="log-a")
    # a run with seq 1 missing: sealed as a GAP marker after the timeout, a leaf like any other
    gappy = [("gappy", raw_event("gappy", s, last=3)) for s in (0, 2, 3)]
    produce_raw(settings, [*first, *gappy])
    with running(settings, "log") as (_, errors):
        want = len(first) + 4
        wait_until(lambda: sealed_count(settings) >= want, timeout=60, what="first part sealed")
        assert not errors
    before = assert_signed_log(settings, [parse_vkey(log_vkey)])
    second = interleaved_runs(6, 20, seed=6, stem="log-b")
    produce_raw(settings, second)
    with running(settings, "log") as (_, errors):  # a new process: trees from heads
        want += len(second)
        wait_until(lambda: sealed_count(settings) >= want, timeout=60, what="second part sealed")
        assert not errors
    after = assert_signed_log(settings, [parse_vkey(log_vkey)])
    assert sealed_count(settings) == want
    # the heads readers skip the tree records: only runs (finished ones in chunks,
    # docs/fleet.md), and a run is still found
    state = read_state(settings, range(3))
    assert set(state.trees) == {0, 1, 2} and not state.heads, "every run here finished"
    runs = {r for r, _ in [*first, *second, *gappy]}
    assert all(find_head(settings, r) is not None for r in sorted(runs)[:3])
    where = locate_run(settings, "gappy")
    assert where is not None and where.finished and where.last_seq == 3

    gap = [ev for _, ev in sealed_by_run(settings)["gappy"] if ev.seq == 1]
    assert decode_event(gap[0].raw, check_json=False).kind is EventKind.GAP
    for part, cps in after.items():
        old = before.get(part, [])
        assert cps[: len(old)] == old, "the first life's checkpoints are still there"
        assert cps, f"partition {part} has events but no checkpoint"
    # a transaction holds at most 40 events and signs a checkpoint for each partition it
    # touched, so each life signed at least ceil(events / 40); how the consumer happens to
    # spread its fetches over partitions decides the rest
    signed_first = sum(map(len, before.values()))
    signed_second = sum(map(len, after.values())) - signed_first
    assert signed_first >= -(-(len(first) + 4) // 40), before
    assert signed_second >= -(-len(second) // 40), after
    grown = [p for p in after if len(after[p]) > len(before.get(p, []))]
    assert grown, "the second life appended to some partition's log"
    for p in grown:
        if before.get(p):
            # the second life's first checkpoint starts at the end of the first life's last
            assert after[p][len(before[p])].start == before[p][-1].checkpoint.size


def test_no_log_key_no_start(
    seq_settings: Callable[..., Settings], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TRACEVAULT_LOG_KEY", raising=False)
    settings = seq_settings(partitions=1, log_key=None)
    with pytest.raises(ConfigError) as info:
        Sequencer(settings)
    msg = str(info.value)
    assert "log_key_file" in msg and "TRACEVAULT_LOG_KEY" in msg
    assert "tracevault keys generate" in msg


def test_a_key_file_others_can_read_is_refused_and_a_0600_one_signs(
    seq_settings: Callable[..., Settings], tmp_path: Path
) -> None:
    signer = Ed25519Signer.generate("seq-file-key")
    path = tmp_path / "log.key"
    write_private_key(path, signer)
    settings = seq_settings(partitions=1, create=False, log_key=None, log_key_file=str(path))
    assert Sequencer(settings).logs.signer.key_id == signer.key_id
    path.chmod(0o644)
    with pytest.raises(ConfigError, match="chmod 600"):
        Sequencer(settings)


def test_cli_without_a_key_exits_2_naming_the_fix(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRACEVAULT_")}
    proc = subprocess.run(
        [sys.executable, "-m", "tracevault", "--bootstrap-servers", "127.0.0.1:1",
         "sequencer", "--instance-id", "nokey"],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "tracevault keys generate" in proc.stderr
    bad = tmp_path / "k"
    bad.write_text(Ed25519Signer.generate("k").skey)
    bad.chmod(0o640)
    proc = subprocess.run(
        [sys.executable, "-m", "tracevault", "--bootstrap-servers", "127.0.0.1:1",
         "sequencer", "--instance-id", "nokey", "--log-key-file", str(bad)],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "chmod 600" in proc.stderr
