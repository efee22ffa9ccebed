"""Golden runs recorded with the real Recorder and Sequencer (tests/replayer/make_golden.py).

The bytes under golden/ are the record: they verify from genesis and replay cleanly with the
agent that recorded them, so a change to the codec, the chain, the crossing payloads or the
replay edges that would break old records fails here.
"""

from __future__ import annotations

import asyncio

import pytest

from tests.replayer.golden_runs import NAMES, golden_run
from tracevault.replayer import areplay, replay, verify
from tracevault.replayer.batch.jobs import load_agent


def test_the_golden_corpus_is_there() -> None:
    assert set(NAMES) >= {"research", "tool_error_handled", "agent_crashed", "async_research"}


@pytest.mark.parametrize("name", NAMES)
def test_golden_run_verifies_and_replays(name: str) -> None:
    meta, run = golden_run(name)
    report = verify(run, require_finished=True)
    assert (report.count, report.head) == (meta["count"], meta["head"])
    agent = load_agent(meta["agent"])
    if asyncio.iscoroutinefunction(agent):
        result = asyncio.run(areplay(report.events, agent))
    else:
        result = replay(report.events, agent)
    assert result.matched and result.steps == report.count
    if meta["error"] is None:
        assert result.output == meta["output"]
    else:
        assert result.error is not None and result.error.type.endswith(meta["error"])
