"""The spool survives the agent process being SIGKILLed: what was spooled is delivered later."""

from __future__ import annotations

import json
import signal
from collections.abc import Callable
from pathlib import Path

from click.testing import CliRunner

from tests.kafka_harness import free_port
from tests.producer.conftest import read_partition, spawn_agent
from tracevault.cli import tracevault
from tracevault.config import Settings
from tracevault.kafka import partition_for
from tracevault.schemas import EventKind

VICTIM = """
import sys, threading
from tracevault.config import Settings
from tracevault.producer import Publisher, Recorder

bootstrap, prefix, spool, steps = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
settings = Settings(bootstrap_servers=bootstrap, topic_prefix=prefix, spool_dir=spool,
                    spool_after_ms=100)
publisher = Publisher(settings)
rec = Recorder(publisher=publisher, agent_id="victim", agent_version="1", input=None)
rec.__enter__()
for i in range(steps):
    rec.decision("step", i)
done = threading.Event()
while publisher.stats().spooled < steps + 1:
    done.wait(0.02)
print(rec.run_id, flush=True)
done.wait()  # until SIGKILL
"""


def test_sigkilled_agent_process_loses_nothing_it_spooled(
    settings_factory: Callable[..., Settings],
) -> None:
    settings = settings_factory(partitions=3)
    steps = 50
    dead = f"127.0.0.1:{free_port()}"
    with spawn_agent(
        "-c", VICTIM, dead, settings.topic_prefix, settings.spool_dir, str(steps)
    ) as proc:
        try:
            assert proc.stdout is not None
            run_id = proc.stdout.readline().strip()
            assert run_id, "the victim never reported its events spooled"
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL

    runner = CliRunner()
    base = ["--bootstrap-servers", settings.bootstrap_servers, "--prefix", settings.topic_prefix]
    status = runner.invoke(
        tracevault, [*base, "spool", "status", "--spool-dir", settings.spool_dir, "--json"]
    )
    assert status.exit_code == 0, status.output
    assert json.loads(status.output)["remaining"] == steps + 1

    drained = runner.invoke(
        tracevault, [*base, "spool", "drain", "--spool-dir", settings.spool_dir, "--json"]
    )
    assert drained.exit_code == 0, drained.output
    assert json.loads(drained.output)["delivered"] == steps + 1
    assert not list(Path(settings.spool_dir).glob("*.tvspool"))

    got = read_partition(
        settings, partition_for(run_id, settings.partitions), steps + 1, key=run_id.encode()
    )
    assert [ev.seq for _, ev in got] == list(range(steps + 1))
    assert got[0][1].kind is EventKind.RUN_STARTED
    assert all(ev.kind is EventKind.DECISION for _, ev in got[1:])
