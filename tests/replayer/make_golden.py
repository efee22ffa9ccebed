"""Record the golden runs kept under tests/replayer/golden/ (run by hand, needs a broker).

    KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:9092 python -m tests.replayer.make_golden

Each agent of GOLDEN runs under the real Recorder, the real Sequencer seals it, and the
sealed records are read back from the topic by the replayer and written, byte for byte, as an
Avro OCF of SealedEvent records (``<name>.avro``) beside a ``<name>.json`` saying which agent
replays it and what it returned. ``test_golden.py`` verifies and replays every one.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

from confluent_kafka.admin import AdminClient

from tests.replayer import agents
from tests.replayer.pipeline import record_live, sequencer_running, wait_sealed
from tracevault.archive import encode_segment, sealed_body
from tracevault.config import Settings
from tracevault.kafka import ensure_topics
from tracevault.replayer import load_run, verify
from tracevault.schemas import SealedEvent, encode_sealed

GOLDEN_DIR = Path(__file__).with_name("golden")

# name -> agent (module-level in tests.replayer.agents)
GOLDEN = {
    "research": "research_agent",
    "tool_error_handled": "failing_tool_agent",
    "agent_crashed": "crashing_agent",
    "async_research": "async_research_agent",
}


def main() -> None:
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
    settings = Settings(
        bootstrap_servers=bootstrap, topic_prefix=f"golden-{uuid.uuid4().hex[:8]}", partitions=1
    )
    ensure_topics(settings)
    GOLDEN_DIR.mkdir(exist_ok=True)
    with sequencer_running(settings):
        for name, attr in GOLDEN.items():
            run_id = f"golden-{name}"
            out = record_live(settings, getattr(agents, attr), agents.INPUT, run_id)
            wait_sealed(settings, run_id)
            run = load_run(settings, run_id, source="topic")
            report = verify(run)
            sealed = list(run.records)
            (GOLDEN_DIR / f"{name}.avro").write_bytes(encode_segment(run_id, 0, _bodies(sealed)))
            meta = {
                "run_id": run_id,
                "agent": f"tests.replayer.agents:{attr}",
                "count": report.count,
                "head": report.head,
                "output": None if isinstance(out, Exception) else out,
                "error": type(out).__name__ if isinstance(out, Exception) else None,
            }
            (GOLDEN_DIR / f"{name}.json").write_text(
                json.dumps(meta, indent=2, sort_keys=True) + "\n"
            )
            print(f"{name}: {report.count} events, head {report.head[:16]}")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.delete_topics(list(settings.topics.all())).values():
        fut.result(30)


def _bodies(sealed: list[SealedEvent]) -> list[bytes]:
    """The SealedEvent Avro bodies, as the archiver writes them into segments."""
    return [sealed_body(encode_sealed(s)) for s in sealed]


if __name__ == "__main__":
    main()
