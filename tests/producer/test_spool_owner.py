"""A live agent's spool reaches Kafka once, from its owner, while ``tracevault spool drain`` runs.

docs/design.md, "The spool": the Publisher that wrote a segment holds its ``flock`` until it
has drained the segment or exits, closed segments included; ``tracevault spool drain`` (another
process) sends only segments whose owner is gone. Before, a segment the Publisher closed
because it was full lost its lock while it still waited in the Publisher's backlog: a drain
beside the live agent claimed and sent it, and the Publisher sent it again once Kafka answered
(or, had the drain removed it first, its thread died on the missing file).

Made certain rather than likely: the agent (tests/producer/spool_owner.py, a real process)
records 3,000 events with every broker away, over several segments (rolling at 32 KiB), and
stays alive holding them; a real ``tracevault spool drain`` process runs against the real
broker meanwhile. Nothing of the live agent's spool may reach ``raw`` from it. Then the agent
exits, a drain sends its spool, and each (run, seq) of ``raw`` is counted: exactly once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.kafka_harness import ROOT, free_port
from tests.producer.conftest import read_partition, spawn_agent
from tests.services.sequencer.support import wait_until
from tracevault.config import Settings
from tracevault.producer._spool import list_segments

OWNER = Path(__file__).with_name("spool_owner.py")
_RECORDED = 3000


class _Agent:
    """Commands to the agent process, one line each way."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdin is not None and proc.stdout is not None
        self._in, self._out = proc.stdin, proc.stdout

    def line(self) -> str:
        return self._out.readline().strip()

    def ask(self, command: str) -> str:
        self._in.write(command + "\n")
        self._in.flush()
        return self.line()

    def stats(self) -> dict[str, Any]:
        body: dict[str, Any] = json.loads(self.ask("stats"))
        return body


def _drain(settings: Settings) -> tuple[int, dict[str, Any], str]:
    """``tracevault spool drain`` as an operator runs it, its own process: exit code, report,
    stderr."""
    cmd = [
        sys.executable, "-m", "tracevault", "--bootstrap-servers", settings.bootstrap_servers,
        "--prefix", settings.topic_prefix, "spool", "drain", "--spool-dir", settings.spool_dir,
        "--timeout", "120", "--json",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    body: dict[str, Any] = json.loads(done.stdout) if done.stdout.strip() else {}
    return done.returncode, body, done.stderr[-4000:]


def test_spool_drain_beside_a_live_agent_never_sends_its_rolled_segments(
    settings_factory: Callable[..., Settings],
) -> None:
    settings = settings_factory(partitions=1)
    spool = Path(settings.spool_dir)
    away = f"127.0.0.1:{free_port()}"  # the agent's Kafka: away for as long as it lives
    args = (str(OWNER), away, settings.topic_prefix, settings.spool_dir, "32768")
    with spawn_agent(*args, stdin=True) as proc:
        try:
            agent = _Agent(proc)
            ready, run_id = agent.line().split()
            assert ready == "ready"
            assert agent.ask(f"record {_RECORDED}") == "recorded"
            total = 1 + _RECORDED  # RUN_STARTED, then the decisions
            wait_until(lambda: agent.stats()["spooled"] >= total, timeout=120, what="spooled")
            segments = len(list_segments(spool))
            assert segments >= 3, f"{segments} segments: the spool did not roll"

            code, drained, err = _drain(settings)  # beside the live agent
            sent = read_partition(settings, 0, 0, key=run_id.encode(), timeout=5)
            assert not sent, (
                f"`spool drain` sent {len(sent)} events of a live agent's spool (seqs "
                f"{sent[0][1].seq}..{sent[-1][1].seq}): the agent still holds them as its own "
                "and sends them itself once Kafka answers: twice"
            )
            assert code == 0, f"spool drain exited {code}: {err}"
            assert drained["delivered"] == 0, drained
            assert {s["status"] for s in drained["segments"]} == {"in use"}, drained

            closed = json.loads(agent.ask("close"))
            assert proc.wait(timeout=60) == 0
        finally:
            proc.kill()
            proc.wait(timeout=30)
    assert closed["undelivered"] == total and closed["lost"] == 0, closed
    assert all(Path(f).exists() for f in closed["spool_files"]), "its spool is whole"

    code, left, err = _drain(settings)  # the owner is gone: now it is the drain's
    assert code == 0, f"spool drain exited {code}: {err}"
    assert left["delivered"] == total, left
    assert not list(spool.glob("*.tvspool"))
    got = read_partition(settings, 0, total, key=run_id.encode(), timeout=120)
    counts = Counter(ev.seq for _, ev in got)
    twice = sorted(seq for seq, n in counts.items() if n > 1)
    assert not twice, f"{len(twice)} events reached raw twice, e.g. seqs {twice[:5]}"
    assert [ev.seq for _, ev in got] == list(range(total)), "every event once, in seq order"
