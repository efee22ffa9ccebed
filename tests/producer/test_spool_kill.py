"""An agent SIGKILLed while Kafka is away loses nothing older than the durability bound.

docs/design.md, "The spool": an event the Recorder accepted and Kafka has not acknowledged
is on disk within ``SPOOL_DURABLE_MS``. The agent (tests/producer/spool_victim.py) is a real
process that logs each accepted event with its time; it is SIGKILLed at four points, the
broker comes back, ``tracevault spool drain`` sends what the dead process left, and every
event accepted more than the bound before the kill must be in ``raw``, in seq order.

- ``burst``: the broker stopped, killed just after a burst of 3,000 events;
- ``flood``: the broker stopped, killed mid-burst while the in-memory queue is long;
- ``steady``: killed right after the broker went down (``dev/kafka stop`` returned);
- ``hang``: the broker SIGSTOPped (connections stay open, nothing is acknowledged),
  killed a second later, long before ``spool_after_ms``.

Exactly once in ``raw`` for the first three. For ``hang`` the shadow copies on disk
(tracevault/producer/_shadow.py) may hold events the broker wrote when it resumed: such
duplicates are the same event twice (the sequencer drops the same bytes arriving twice, so
each is sealed once); the test asserts that and prints how many.
"""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.consumer.sequencer.support import assert_chain, running, sealed_by_run, wait_until
from tests.kafka_harness import LocalBroker
from tests.producer.conftest import read_partition, spawn_agent
from tracevault.cli import tracevault
from tracevault.config import Settings
from tracevault.kafka import ensure_topics, partition_for
from tracevault.producer._publisher import SPOOL_DURABLE_MS

VICTIM = Path(__file__).with_name("spool_victim.py")


#: side-file bytes to wait for before the kill: ~30k events (flood), ~1 s of events (hang)
_GROWTH = {"flood": 1_500_000, "hang": 40_000}


def _await_growth(side: Path, by: int) -> None:
    start = side.stat().st_size
    wait_until(
        lambda: side.stat().st_size > start + by, timeout=120, what="more events", every=0.01
    )


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
    with spawn_agent(*args, str(side), kill_point, stdin=True) as proc:
        try:
            assert proc.stdout is not None and proc.stdin is not None
            assert proc.stdout.readline().strip() == "ready"
            if kill_point == "hang":
                os.kill(broker.pid(), signal.SIGSTOP)
            else:
                broker.stop()  # returns once the broker process is gone
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
    lost = [(seq, at) for _, seq, at in accepted if seq not in counts]
    measured = {
        "kill_point": kill_point,
        "accepted": len(accepted),
        "lost_within_bound": len(lost),
        "oldest_lost_ms": round((kill_ns - min(at for _, at in lost)) / 1e6, 1) if lost else 0,
        "newest_accepted_ms": round((kill_ns - max(at for _, _, at in accepted)) / 1e6, 1),
        "spool_drained": json.loads(drained.output)["delivered"],
        "raw_duplicates": len(dups),
    }
    print(json.dumps(measured))
    assert not missing, f"{len(missing)} accepted events lost, e.g. seqs {missing[:5]}: {measured}"
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
