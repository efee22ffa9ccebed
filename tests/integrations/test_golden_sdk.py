"""A run recorded by the method-level adapter (before the HTTP door) replays with the door.

``golden/sdk_v1.avro`` holds the sealed records ``make_golden.py`` wrote with that adapter:
chat tool loop, chat and Responses streams, a 429 the agent handles, Anthropic Messages and
its stream. The request and response shapes the door records must compare equal to those.
The provider server is up (another port: the recorded one is gone) and must see nothing.
"""

from __future__ import annotations

import json
from io import BytesIO

import fastavro

from tests.integrations.golden_agents import GOLDEN, NAME, sdk_agent
from tracevault.demo.provider import provider_server
from tracevault.replayer import LoadedRun, replay, verify
from tracevault.replayer._records import SealedRows


def test_a_record_of_the_method_level_adapter_replays_through_the_door() -> None:
    meta = json.loads((GOLDEN / f"{NAME}.json").read_text())
    rows = list(fastavro.reader(BytesIO((GOLDEN / f"{NAME}.avro").read_bytes())))
    run = LoadedRun(
        run_id=meta["run_id"], source="memory", records=SealedRows(rows),
        objects=[f"golden/{NAME}.avro"] * len(rows),
    )  # fmt: skip
    report = verify(run, require_finished=True)
    assert (report.count, report.head) == (meta["count"], meta["head"])
    with provider_server() as server:
        result = replay(report.events, sdk_agent)
        assert result.matched, result
        assert result.steps == report.count
        assert result.output == meta["output"]
        assert (len(server.requests), server.connections) == (0, 0)
