"""Call sites are the agent's own frame under ``asyncio.gather``, TaskGroup and threads.

Recorded by the real Recorder through the real broker and sequencer, read back from the
sealed topic. Before the fix, a crossing made by ``asyncio.gather(edges.atool(...))`` or
``TaskGroup.create_task(edges.atool(...))`` was sited at the line that called
``asyncio.run``, and ``replay run --until N`` named the CLI's own frame (click) as the next
call.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.replayer import site_agents
from tests.replayer.pipeline import (
    fresh_settings,
    record_live,
    replay_cli,
    sequencer_running,
    wait_sealed,
)
from tracevault.callsite import SITE_ATTRIBUTE
from tracevault.config import Settings
from tracevault.producer import Publisher, Recorder
from tracevault.replayer import areplay, load_run, verify
from tracevault.replayer.rerun import _interleave
from tracevault.replayer.rerun._interleave import interleaved
from tracevault.schemas import EventKind, TraceEvent

_MOD = "tests.replayer.site_agents"


@pytest.fixture(scope="module")
def settings(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    s = fresh_settings(kafka_bootstrap, tmp_path_factory.mktemp("sites"), "tvsite")
    with sequencer_running(s):
        yield s


def _recorded(settings: Settings, agent: Any) -> tuple[str, list[TraceEvent]]:
    run_id = f"site-{uuid.uuid4().hex[:10]}"
    out = record_live(settings, agent, {}, run_id)
    assert not isinstance(out, BaseException), out
    wait_sealed(settings, run_id)
    return run_id, list(verify(load_run(settings, run_id, source="topic")).events)


def _sites(events: list[TraceEvent]) -> dict[str, str]:
    """Each crossing's request (compact JSON) → its recorded site."""
    return {
        json.dumps(json.loads(ev.request), sort_keys=True, separators=(",", ":")): ev.attributes[
            SITE_ATTRIBUTE
        ]
        for ev in events
        if ev.kind not in (EventKind.RUN_STARTED, EventKind.RUN_FINISHED)
    }


def _at(function: str, marker: str) -> str:
    return f"{_MOD}:{function}:{site_agents.line(marker)}"


def test_gather_of_edge_calls_is_sited_at_the_agents_lines(settings: Settings) -> None:
    _, events = _recorded(settings, site_agents.gather_agent)
    assert _sites(events) == {
        '{"args":{"q":"a"},"tool":"search"}': _at("gather_agent", "gather-a"),
        '{"args":{"q":"b"},"tool":"search"}': _at("gather_agent", "gather-b"),
        '{"choice":"yes","name":"done","options":null}': _at("gather_agent", "gather-done"),
    }


def test_taskgroup_tasks_are_sited_at_the_agents_lines(settings: Settings) -> None:
    _, events = _recorded(settings, site_agents.taskgroup_agent)
    assert _sites(events) == {
        '{"args":{"q":"x"},"tool":"search"}': _at("taskgroup_agent", "tg-x"),
        '{"name":"inventory"}': _at("taskgroup_agent", "tg-state"),
    }


def test_thread_pool_branches_are_sited_at_the_agents_line(settings: Settings) -> None:
    _, events = _recorded(settings, site_agents.thread_agent)
    site = _at("_branch", "thread")
    assert set(_sites(events).values()) == {site}


def test_until_names_the_agents_next_call_under_gather(settings: Settings) -> None:
    run_id, _ = _recorded(settings, site_agents.gather_agent)
    agent = f"{_MOD}:gather_agent"
    res = replay_cli(settings, "run", run_id, "--agent", agent, "--until", "1", "--from", "topic",
                     "--json")  # fmt: skip
    assert res.exit_code == 0, res.output
    asked = json.loads(res.output)["next_call"]
    assert asked["kind"] == "TOOL_CALL"
    assert asked["site"] == _at("gather_agent", "gather-b"), asked


# -- right seq, right site, right headline in a concurrent record ---------------------------
@pytest.fixture(scope="module")
def concurrent_run(settings: Settings) -> tuple[str, list[TraceEvent]]:
    """One recording of ``concurrent_agent`` (gathers, SDK-style model calls), sealed."""
    run_id = f"conc-{uuid.uuid4().hex[:10]}"
    publisher = Publisher(settings)
    try:
        rec = Recorder(publisher=publisher, agent_id="sites", agent_version="1",
                       tools=site_agents.ATOOLS, run_id=run_id)  # fmt: skip
        asyncio.run(rec.arun(site_agents.concurrent_agent, {}))
    finally:
        assert publisher.flush(30)
        publisher.close()
    wait_sealed(settings, run_id)
    events = list(verify(load_run(settings, run_id, source="topic")).events)
    assert interleaved(events), "the record must overlap crossings to test the Interleaver"
    assert asyncio.run(areplay(events, site_agents.concurrent_agent)).matched
    return run_id, events


def _diverged(settings: Settings, run_id: str, agent: str) -> dict[str, Any]:
    """``replay run`` from the topic with a changed agent; its JSON divergence report."""
    started = time.monotonic()
    res = replay_cli(settings, "run", run_id, "--agent", f"{_MOD}:{agent}", "--from", "topic",
                     "--json")  # fmt: skip
    took = time.monotonic() - started
    assert res.exit_code == 1, res.output
    report: dict[str, Any] = json.loads(res.output)["divergence"]
    report["took"] = took
    return report


def test_an_extra_clock_read_under_gather_is_named_at_its_seq_and_line(
    settings: Settings, concurrent_run: tuple[str, list[TraceEvent]]
) -> None:
    run_id, events = concurrent_run
    report = _diverged(settings, run_id, "extra_clock_agent")
    assert report["seq"] == 2, report
    assert events[2].kind is EventKind.TOOL_CALL
    assert (report["expected"], report["actual"]) == ("TOOL_CALL", "CLOCK")
    assert report["site"] == _at("_concurrent", "extra-clock")
    assert "after the record ended" not in report["reason"]


def test_swapped_calls_name_the_call_the_agent_made_at_once(
    settings: Settings, concurrent_run: tuple[str, list[TraceEvent]]
) -> None:
    run_id, events = concurrent_run
    gamma = next(ev for ev in events if b'"gamma"' in ev.request)
    report = _diverged(settings, run_id, "swapped_agent")
    assert report["seq"] == gamma.seq, report
    assert report["actual"] == "TOOL_CALL"
    assert report["actual_request"] == {"tool": "calc", "args": {"x": 5}}
    assert report["site"] == _at("_concurrent", "swapped")
    assert report["reason"].endswith("at $.request.tool"), report["reason"]
    assert report["took"] < _interleave.STALL_TIMEOUT_S, "it waited for a stall"


def test_a_changed_prompt_in_a_concurrent_sdk_agent_is_headlined_by_its_path(
    settings: Settings, concurrent_run: tuple[str, list[TraceEvent]]
) -> None:
    run_id, _ = concurrent_run
    report = _diverged(settings, run_id, "changed_prompt_agent")
    first = "$.request.messages[0].content"
    assert report["reason"] == f"the MODEL_CALL call's request differs from the record at {first}"
    assert report["diff"] == [f'{first}: expected "one", got "ONE"'], report["diff"]
