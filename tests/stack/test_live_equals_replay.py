"""What an agent sees live is exactly what replay serves it: the record is the one truth.

Found by the demo: a tool returned a dict whose key order differed from the record's sorted
canonical JSON, and an agent that formatted it diverged under replay. The Recorder now hands
the agent the recorded form, so live and replay agree by construction.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.producer.conftest import read_partition
from tracevault.config import Settings
from tracevault.edges import JSON, Edges
from tracevault.kafka import partition_for
from tracevault.producer import Publisher, Recorder
from tracevault.replayer import replay


def test_agent_sees_the_recorded_form_live_and_under_replay(
    settings_factory: Callable[..., Settings],
) -> None:
    settings = settings_factory(partitions=2)
    seen: list[list[Any]] = []

    def lookup(args: JSON) -> Any:
        return {"zeta": 1, "alpha": (1, 2), "mid": {"y": 1, "x": 2}}

    def agent(task: JSON, edges: Edges) -> JSON:
        got = edges.tool("lookup", task)
        observed = [list(got), type(got["alpha"]).__name__, str(got["mid"])]
        seen.append(observed)
        return {"summary": str(got)}

    publisher = Publisher(settings)
    rec = Recorder(publisher=publisher, agent_id="a", agent_version="1", tools={"lookup": lookup})
    live_output = rec.run(agent, {"q": 1})
    publisher.close(timeout=30)

    events = [
        ev
        for _, ev in read_partition(
            settings, partition_for(rec.run_id, 2), 3, key=rec.run_id.encode()
        )
    ]
    assert [e.seq for e in events] == [0, 1, 2]
    result = replay(events, agent)

    assert result.matched
    assert result.output == live_output
    assert seen[0] == seen[1] == [["alpha", "mid", "zeta"], "list", "{'x': 2, 'y': 1}"]
