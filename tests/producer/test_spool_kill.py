"""An agent SIGKILLed while Kafka is away loses nothing older than the durability bound.

docs/design.md, "The spool": an event the Recorder accepted and Kafka has not acknowledged
is on disk within ``SPOOL_DURABLE_MS``. The agent (tests/producer/spool_victim.py) is a real
process that logs each accepted event with its time; it is SIGKILLed at four points, the
broker comes back, ``tracevault spool drain`` sends what the dead process left, and every
event accepted more than the bound before the kill must be in ``raw``, in seq order.

- ``burst``: the broker stopped, killed just after a burst of 3,000 events;
- ``flood``: the broker stopped, killed mid-burst while the in-memory queue is long, with
  two CPU-burning processes beside it (the Publisher's thread must get the CPU in time, or
  the agent's calls wait for it: tracevault/producer/_backpressure.py);
- ``steady``: killed right after the broker went down (``dev/kafka stop`` returned);
- ``hang``: the broker SIGSTOPped (connections stay open, nothing is acknowledged),
  killed a second later, long before ``spool_after_ms``.

Exactly once in ``raw`` for the first three. For ``hang`` the shadow copies on disk
(tracevault/producer/_shadow.py) may hold events the broker wrote when it resumed: such
duplicates are the same event twice (the sequencer drops the same bytes arriving twice, so
each is sealed once); the test asserts that and prints how many.

And one with the broker up: an agent that adopted a dead agent's 20,000 spooled events is
SIGKILLed while it drains them, recording as fast as it can beside two CPU burners.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tests.conftest import burning_cpus
from tests.kafka_harness import LocalBroker
from tests.producer.conftest import read_partition, spawn_agent
from tests.producer.test_spool import _spool_a_run
from tests.services.sequencer.support import assert_chain, running, sealed_by_run, wait_until
from tracevault.cli import tracevault
from tracevault.config import Settings
from tracevault.kafka import ensure_topics, partition_for
from tracevault.producer._publisher import SPOOL_DURABLE_MS
from tracevault.producer._spool import list_segments

VICTIM = Path(__file__).with_name("spool_victim.py")


#: side-file bytes to wait for before the kill: ~30k events (flood), ~1 s of events (hang)
_GROWTH = {"flood": 1_500_000, "hang": 40_000}


def _await_growth(side: Path, by: int) -> None:
    start = side.stat().st_size
    wait_until(
        lambda: side.stat().st_size > start + by, timeout=120, what="more events", every=0.01
    )


def _losses(accepted: list[tuple[str, int, int]], found: set[int], kill_ns: int) -> dict[str, Any]:
    """How many accepted events did not survive and how long before the kill the oldest was
    accepted: the bound actually observed."""
    lost = [at for _, seq, at in accepted if seq not in found]
    return {
        "accepted": len(accepted),
        "lost": len(lost),
        "oldest_lost_ms": round((kill_ns - min(lost)) / 1e6, 1) if lost else 0,
        "newest_accepted_ms": round((kill_ns - max(at for _, _, at in accepted)) / 1e6, 1),
    }


def _accepted(side: Path) -> list[tuple[str, int, int]]:
    out = []
    for line in side.read_text().splitlines():
        parts = line.split()
        if len(parts) == 3:  # a line cut by the kill is not a whole record of acceptance
            out.append((parts[0], int(parts[1]), int(parts[2])))
    return out


@pytest.mark.parametrize("kill_point", ["burst", "flood", "steady", "hang"])
def test_sigkilled_spooling_agent_loses_nothing_older_than_the_bound(
    kill_point: str,
    module_broker: LocalBroker,
    tmp_path: Path,
    log_key: str,
) -> None:
    # one broker for the four cases (tests/conftest.py): each leaves it running
    broker = module_broker
    broker.ensure_running()
    settings = Settings(
        bootstrap_servers=broker.bootstrap,
        topic_prefix=f"kill-{uuid.uuid4().hex[:8]}",
        partitions=3,
        spool_dir=str(tmp_path / "spool"),
        log_key=log_key,
    )
    ensure_topics(settings)
    side = tmp_path / "accepted.txt"
    args = (str(VICTIM), broker.bootstrap, settings.topic_prefix, settings.spool_dir)
    agent = spawn_agent(*args, str(side), kill_point, stdin=True)
    with agent as proc, contextlib.ExitStack() as cm:
        try:
            assert proc.stdout is not None and proc.stdin is not None
            assert proc.stdout.readline().strip() == "ready"
            if kill_point == "hang":
                os.kill(broker.pid(), signal.SIGSTOP)
            else:
                broker.stop()  # returns once the broker process is gone
            if kill_point == "flood":  # the CPU saturated while the queue is long
                cm.enter_context(burning_cpus(2))
            if kill_point in ("burst", "flood"):
                proc.stdin.write("go\n")
                proc.stdin.flush()
            if kill_point == "burst":  # killed just after a burst
                assert proc.stdout.readline().strip() == "done"
            elif kill_point in _GROWTH:  # flood: mid-burst, long queue; hang: 1 s into it
                _await_growth(side, _GROWTH[kill_point])
            kill_ns = time.monotonic_ns()
            proc.send_signal(signal.SIGKILL)
        finally:
            proc.kill()
            proc.wait(timeout=30)
            cm.close()  # the burners stop with the agent: the drain and the checks run unburdened
            if kill_point == "hang":
                os.kill(broker.pid(), signal.SIGCONT)
    assert proc.returncode == -signal.SIGKILL

    accepted = _accepted(side)
    (run_id,) = {run for run, _, _ in accepted}
    must = {0} | {seq for _, seq, at in accepted if at < kill_ns - SPOOL_DURABLE_MS * 1_000_000}

    if kill_point != "hang":
        broker.start(keep_data=True)
    base = ["--bootstrap-servers", broker.bootstrap, "--prefix", settings.topic_prefix]
    drained = CliRunner().invoke(
        tracevault, [*base, "spool", "drain", "--spool-dir", settings.spool_dir, "--json"]
    )
    assert drained.exit_code == 0, drained.output
    assert not list(Path(settings.spool_dir).glob("*.tvspool"))

    part = partition_for(run_id, settings.partitions)
    got = read_partition(settings, part, len(must), key=run_id.encode(), timeout=120)
    seqs = [ev.seq for _, ev in got]
    counts = Counter(seqs)
    dups = sorted(s for s, n in counts.items() if n > 1)
    first = {}
    for _, ev in got:
        assert first.setdefault(ev.seq, ev) == ev, f"seq {ev.seq} twice with different bytes"
    missing = sorted(must - set(counts))
    measured = {
        "kill_point": kill_point,
        **_losses(accepted, set(counts), kill_ns),
        "spool_drained": json.loads(drained.output)["delivered"],
        "raw_duplicates": len(dups),
    }
    print(json.dumps(measured))
    assert not missing, (
        f"{len(missing)} events accepted more than {SPOOL_DURABLE_MS} ms before the kill were "
        f"lost, the oldest {measured['oldest_lost_ms']} ms before it, e.g. seqs "
        f"{missing[:5]}: {measured}"
    )
    if kill_point in ("burst", "flood"):  # nothing was in flight when the broker left
        assert not dups, f"{len(dups)} events twice in raw, e.g. seqs {dups[:5]}"
    once = list(dict.fromkeys(seqs))
    assert once == sorted(once), "the run's events reach raw in seq order"

    # Sealed exactly once: the sequencer drops each duplicate and chains every seq once.
    with running(settings) as (seq, errors):

        def sealed() -> bool:
            # the counters first (no read); then the sealed topic itself, read_committed
            snap = seq.metrics.snapshot()
            if snap.get("tracevault_sequencer_duplicates_total", 0) < len(dups):
                return False
            if snap.get("tracevault_sequencer_sealed_total", 0) < len(once):
                return False
            return len(sealed_by_run(settings).get(run_id, [])) >= len(once)

        wait_until(sealed, timeout=240, what="the run sealed", every=0.2)
        assert not errors, errors
    chain = [ev for _, ev in sealed_by_run(settings)[run_id]]
    assert_chain(run_id, chain, None)
    assert [ev.seq for ev in chain] == once


def test_sigkilled_agent_draining_an_adopted_spool_on_a_saturated_cpu_keeps_the_bound(
    settings_factory: Callable[..., Settings], tmp_path: Path
) -> None:
    """A dead agent's 20,000 spooled events are adopted by a new agent that records as fast
    as it can beside two CPU burners; SIGKILLed while it drains them, it loses nothing it
    accepted more than ``SPOOL_DURABLE_MS`` before the kill, and neither run loses anything
    once ``tracevault spool drain`` (the next agent) sends what it left."""
    settings = settings_factory(partitions=3)
    dead_run, dead_count = _spool_a_run(settings, steps=20_000)
    (adopted,) = list_segments(Path(settings.spool_dir))
    side = tmp_path / "accepted.txt"
    args = (str(VICTIM), settings.bootstrap_servers, settings.topic_prefix, settings.spool_dir)
    with burning_cpus(2), spawn_agent(*args, str(side), "adopt") as proc:
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "ready"

            def draining() -> bool:
                # the first adopted batch acknowledged, while the agent records on
                return adopted.cursor_path.exists() and side.stat().st_size > 0

            wait_until(draining, timeout=120, what="the adopted spool draining", every=0.01)
            _await_growth(side, 20_000)  # and some 300 more events recorded meanwhile
            kill_ns = time.monotonic_ns()
            proc.send_signal(signal.SIGKILL)
        finally:
            proc.kill()
            proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    assert adopted.path.exists(), "the adopted spool was drained before the kill: kill sooner"

    accepted = _accepted(side)
    (run_id,) = {run for run, _, _ in accepted}
    must = {0} | {seq for _, seq, at in accepted if at < kill_ns - SPOOL_DURABLE_MS * 1_000_000}
    base = ["--bootstrap-servers", settings.bootstrap_servers, "--prefix", settings.topic_prefix]
    drained = CliRunner().invoke(
        tracevault, [*base, "spool", "drain", "--spool-dir", settings.spool_dir, "--json"]
    )
    assert drained.exit_code == 0, drained.output
    assert not list(Path(settings.spool_dir).glob("*.tvspool"))

    def seqs_of(run: str, count: int) -> list[int]:
        part = partition_for(run, settings.partitions)
        got = read_partition(settings, part, count, key=run.encode(), timeout=120)
        return [ev.seq for _, ev in got]

    dead = seqs_of(dead_run, dead_count)
    assert set(dead) == set(range(dead_count)), "the adopted run lost events"
    assert list(dict.fromkeys(dead)) == list(range(dead_count)), "the adopted run in seq order"
    seqs = seqs_of(run_id, len(must))
    missing = sorted(must - set(seqs))
    measured = {
        "kill_point": "adopt",
        **_losses(accepted, set(seqs), kill_ns),
        "spool_drained": json.loads(drained.output)["delivered"],
        "raw_duplicates": len(seqs) - len(set(seqs)) + len(dead) - dead_count,
    }
    print(json.dumps(measured))
    assert not missing, (
        f"{len(missing)} events accepted more than {SPOOL_DURABLE_MS} ms before the kill were "
        f"lost, the oldest {measured['oldest_lost_ms']} ms before it, e.g. seqs "
        f"{missing[:5]}: {measured}"
    )
    once = list(dict.fromkeys(seqs))
    assert once == sorted(once), "the run's events reach raw in seq order"
