"""Record the SDK golden run kept under tests/integrations/golden/ (by hand, needs a broker).

    KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:9092 python -m tests.integrations.make_golden

``golden_agents.sdk_agent`` runs through the real SDKs against the local provider server,
under the real Recorder; the real Sequencer seals it and the sealed records are written byte
for byte as ``sdk_v1.avro`` beside ``sdk_v1.json`` (what it returned). The committed one was
recorded by the method-level adapter (before the HTTP door), so ``test_golden_sdk.py`` proves
that records of the older request shape still replay.
"""

from __future__ import annotations

import json
import os
import uuid

from confluent_kafka.admin import AdminClient

from tests.integrations import golden_agents
from tests.integrations.golden_agents import GOLDEN, NAME
from tests.integrations.pipeline import Pipeline
from tests.replayer.make_golden import _bodies
from tests.replayer.pipeline import sequencer_running
from tracevault.archive import encode_segment
from tracevault.config import Settings
from tracevault.demo.provider import provider_server
from tracevault.kafka import ensure_topics
from tracevault.replayer import load_run, verify
from tracevault.transparency import LOG_KEY_ENV, Ed25519Signer


def main() -> None:
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
    os.environ.setdefault(LOG_KEY_ENV, Ed25519Signer.generate("golden").skey)
    settings = Settings(
        bootstrap_servers=bootstrap, topic_prefix=f"golden-{uuid.uuid4().hex[:8]}", partitions=1
    )
    ensure_topics(settings)
    GOLDEN.mkdir(exist_ok=True)
    run_id = f"golden-{NAME}"
    with sequencer_running(settings), provider_server() as server:
        recorded = Pipeline(settings).record(
            golden_agents.sdk_agent,
            {"url": server.url},
            tools={"get_weather": golden_agents.get_weather},
            run_id=run_id,
        )
        out = recorded.output
        run = load_run(settings, run_id, source="topic")
        report = verify(run)
        sealed = list(run.records)
    (GOLDEN / f"{NAME}.avro").write_bytes(encode_segment(run_id, 0, _bodies(sealed)))
    meta = {"run_id": run_id, "count": report.count, "head": report.head, "output": out}
    (GOLDEN / f"{NAME}.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    print(f"{NAME}: {report.count} events, head {report.head[:16]}")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.delete_topics(list(settings.topics.all())).values():
        fut.result(30)


if __name__ == "__main__":
    main()
