"""``tracevault --help``'s "Typical session" runs as written and ends with a verified run.

Its lines run in one bash script in a temp folder against the test's broker (so its first
line, ``dev/kafka start`` "if you have none", is left out), with a topic prefix of its own and
none of the test session's ``TRACEVAULT_*`` variables. One run is recorded once the services
are up, and the session's last line verifies it from the archive. Before this, the session's
``tracevault sequencer &`` exited 2: nothing in it gave the sequencer a log key.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from confluent_kafka.admin import AdminClient

from tests.conftest import unique_name
from tracevault.cli import tracevault
from tracevault.config import TopicNames

_RECORD = """
from tracevault.config import load_settings
from tracevault.demo import FleetWorld, scripted_model, support_agent
from tracevault.producer import Publisher, Recorder
publisher = Publisher(load_settings())
recorder = Recorder(publisher=publisher, agent_id="session", agent_version="1.0.0",
                    model=scripted_model, tools=FleetWorld().tools())
recorder.run(support_agent, {"ticket": "Where is my order", "order_id": "A-17", "seed": 3})
publisher.close()
print(recorder.run_id)
"""


def _session() -> list[str]:
    text = CliRunner().invoke(tracevault, ["--help"], terminal_width=200).output
    lines = text.split("Typical session:\n", 1)[1].split("\n\n", 1)[0].splitlines()
    return [ln.split("  #", 1)[0].strip() for ln in lines if ln.strip()]


@pytest.fixture
def prefix(kafka_bootstrap: str) -> Iterator[str]:
    name = unique_name("session")
    yield name
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    for fut in admin.delete_topics(list(TopicNames(name).all())).values():
        fut.result(timeout=30)


def test_the_typical_session_in_help_runs_and_verifies_a_run(
    kafka_bootstrap: str, prefix: str, tmp_path: Path
) -> None:
    lines = _session()
    assert lines[0] == "dev/kafka start", lines
    *services, last = lines[1:]
    assert last.startswith("tracevault replay verify RUN_ID"), last
    script = "\n".join(
        [
            "set -euo pipefail",
            "trap 'kill $(jobs -p) 2>/dev/null || true; wait' EXIT",
            *services,
            f"RUN_ID=$({sys.executable} -c '{_RECORD}')",
            # the archiver seals a run's tiles within seconds; wait for it, bounded
            'for _ in $(seq 90); do tracevault archive ls "$RUN_ID" >/dev/null 2>&1 && break;'
            " sleep 1; done",
            last.replace("RUN_ID", '"$RUN_ID"'),
        ]
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRACEVAULT_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    env["TRACEVAULT_BOOTSTRAP_SERVERS"] = kafka_bootstrap
    env["TRACEVAULT_TOPIC_PREFIX"] = prefix
    proc = subprocess.run(
        ["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, f"{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
