"""Investigating runs recorded by the real Recorder, sealed by the real Sequencer, archived.

Fork (what-if) at step N with a changed tool, sub-agent trees and ``--recurse``, and a diff
of two runs that differ only by one decision.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from tests.replayer import agents, lead_agents
from tests.replayer.pipeline import replay_cli, sequencer_running, wait_sealed
from tracevault.callsite import SITE_ATTRIBUTE
from tracevault.config import Settings
from tracevault.links import (
    FORKED_FROM_RUN,
    FORKED_FROM_SEQ,
    PARENT_RUN,
    PARENT_SEQ,
    SUBAGENT_RUN,
)
from tracevault.producer import Publisher, Recorder
from tracevault.replayer import load_run, replay, replay_tree, verify
from tracevault.services.archiver import Archiver

LEAD = "tests.replayer.lead_agents:lead_agent"


def _record(settings: Settings, agent: Any, run_id: str) -> Any:
    publisher = Publisher(settings)
    try:
        rec = Recorder(publisher=publisher, agent_id="lead", agent_version="1.0.0",
                       model=agents.fake_model, tools=agents.TOOLS, run_id=run_id)  # fmt: skip
        return rec.run(agent, agents.INPUT)
    finally:
        assert publisher.flush(30)
        publisher.close()


def _events(settings: Settings, run_id: str) -> Any:
    return verify(load_run(settings, run_id, source="archive")).events


def _cli(settings: Settings, *args: str) -> Any:
    return replay_cli(settings, *args)


def _content(ev: Any) -> tuple[Any, ...]:
    return (ev.kind, ev.request, ev.response, ev.model, ev.seed, ev.error)


def test_fork_at_step_n_with_a_changed_tool(settings_factory) -> None:
    settings = settings_factory(partitions=2)
    with sequencer_running(settings):
        _record(settings, lead_agents.lead_agent, "lead-1")
        wait_sealed(settings, "lead-1")
        Archiver(settings).run(until_idle=1.0)
        original = _events(settings, "lead-1")
        assert all(SITE_ATTRIBUTE in e.attributes for e in original[1:-1])  # the real Recorder
        changed = "tests.replayer.lead_agents:changed_fetch"
        res = _cli(settings, "run", "lead-1", "--until", "4", "--then", "live", "--agent", LEAD,
                   "--live-edges", changed, "--json")  # fmt: skip
        assert res.exit_code == 0, res.output
        out = json.loads(res.output)
        fork_id = out["run_id"]
        assert out["forked_from"] == {"run_id": "lead-1", "seq": 4} and out["delivered"]
        wait_sealed(settings, fork_id)
    Archiver(settings).run(until_idle=1.0)
    fork = _events(settings, fork_id)
    # the first N+1 events (seq 0..4) are the original's, content for content
    assert [_content(e) for e in fork[:5]] == [_content(e) for e in original[:5]]
    assert (fork[0].attributes[FORKED_FROM_RUN], fork[0].attributes[FORKED_FROM_SEQ]) == (
        "lead-1", "4")  # fmt: skip
    # after N the changed tool answered, and the rest followed from it
    assert b"99 \xc2\xb0C" in fork[5].response and b"93.4" in original[5].response
    assert fork[-1].response != original[-1].response
    # diff between the original and the fork: nothing before seq 5
    res = _cli(settings, "diff", "lead-1", fork_id, "--ignore", "clock,random", "--json")
    assert res.exit_code == 1, res.output
    diff = json.loads(res.output)
    assert [d["seq_a"] for d in diff["differences"]] == [5, 7, 8]
    assert diff["differences"][0]["fields"][0]["path"] == "$.response.body"
    # the fork replays like any run
    assert replay(fork, lead_agents.lead_agent).matched


def test_sub_agent_tree_replay_and_recurse(settings_factory) -> None:
    settings = settings_factory(partitions=2)
    with sequencer_running(settings):
        _record(settings, lead_agents.lead_agent, "lead-2")
        wait_sealed(settings, "lead-2")
        parent = verify(load_run(settings, "lead-2", source="topic")).events
        child_id = parent[4].attributes[SUBAGENT_RUN]
        wait_sealed(settings, child_id)
    Archiver(settings).run(until_idle=1.0)
    child = _events(settings, child_id)
    assert (child[0].attributes[PARENT_RUN], child[0].attributes[PARENT_SEQ]) == ("lead-2", "4")
    assert child[0].agent.agent_id == "researcher" and len(child) == 4
    assert json.loads(parent[4].response) == json.loads(child[-1].response)["output"]
    # replaying the parent serves the child's recorded result, without running the child
    assert replay(parent, lead_agents.lead_with_sloppy_researcher).matched
    # the tree
    res = _cli(settings, "show", "lead-2", "--tree")
    assert res.exit_code == 0, res.output
    assert "seq 4 subagent researcher" in res.output and child_id[:8] in res.output
    tree = json.loads(_cli(settings, "show", "lead-2", "--tree", "--json").output)
    assert tree["children"][0]["run"]["parent"] == ["lead-2", 4]
    assert tree["children"][0]["run"]["agent"] == "researcher 1.0.0"
    # --recurse replays the child too: a changed child is caught in its own run
    res = _cli(settings, "run", "lead-2", "--agent", LEAD, "--recurse", "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["tree_matched"] and out["children"][0]["replay"]["matched"]
    sloppy = "tests.replayer.lead_agents:lead_with_sloppy_researcher"
    res = _cli(settings, "run", "lead-2", "--agent", sloppy, "--recurse", "--json")
    assert res.exit_code == 1, res.output
    out = json.loads(res.output)
    assert out["matched"] and not out["tree_matched"]
    assert out["children"][0]["replay"]["divergence"]["seq"] == 2
    res = _cli(settings, "run", "lead-2", "--agent", sloppy, "--recurse")
    assert "diverged at seq 2" in res.output and "subagent researcher" in res.output


def test_two_runs_that_differ_only_by_one_decision(settings_factory) -> None:
    settings = settings_factory(partitions=2)
    with sequencer_running(settings):
        lead_agents.ROUTE["choice"] = "answer"
        _record(settings, lead_agents.lead_agent, "route-a")
        lead_agents.ROUTE["choice"] = "escalate"
        try:
            _record(settings, lead_agents.lead_agent, "route-b")
        finally:
            lead_agents.ROUTE["choice"] = "answer"
        wait_sealed(settings, "route-a")
        wait_sealed(settings, "route-b")
    Archiver(settings).run(until_idle=1.0)
    noisy = json.loads(_cli(settings, "diff", "route-a", "route-b", "--json").output)
    assert noisy["differences"][0]["kind"] == "CLOCK"  # two honest runs differ by the clock…
    res = _cli(settings, "diff", "route-a", "route-b", "--ignore", "clock,random", "--json")
    assert res.exit_code == 1
    diff = json.loads(res.output)
    # …and by exactly one decision once the noise is ignored
    assert [(d["seq_a"], d["seq_b"], d["kind"]) for d in diff["differences"]] == [
        (6, 6, "DECISION")]  # fmt: skip
    assert diff["differences"][0]["fields"] == [
        {"path": "$.request.choice", "a": '"answer"', "b": '"escalate"'}]  # fmt: skip
    assert diff["differences"][0]["site"].startswith("tests.replayer.lead_agents:_lead:")


def test_an_async_parent_whose_sub_agent_failed(settings_factory) -> None:
    settings = settings_factory(partitions=2)
    publisher = Publisher(settings)
    rec = Recorder(publisher=publisher, agent_id="lead", agent_version="1.0.0",
                   model=agents.fake_model, tools=agents.TOOLS, run_id="lead-async")  # fmt: skip
    output = asyncio.run(rec.arun(lead_agents.async_lead, agents.INPUT))
    assert publisher.flush(30)
    publisher.close()
    assert output["n"] == -1 and "no such page" in output["why"]
    with sequencer_running(settings):
        wait_sealed(settings, "lead-async")
        parent = verify(load_run(settings, "lead-async", source="topic")).events
        child_id = parent[1].attributes[SUBAGENT_RUN]
        wait_sealed(settings, child_id)
        child = verify(load_run(settings, child_id, source="topic")).events
    # the parent's crossing raised what the child raised; the child recorded its failure
    assert parent[1].error is not None and parent[1].error.type == "FileNotFoundError"
    assert [e.kind.value for e in child] == ["RUN_STARTED", "TOOL_CALL", "ERROR", "RUN_FINISHED"]
    load = {"lead-async": parent, child_id: child}.__getitem__
    tree = replay_tree(load, parent, lead_agents.async_lead)
    assert tree.matched and tree.result.output == output
    ((_, sub),) = tree.children
    assert not isinstance(sub, str) and sub.result.matched and sub.result.error is not None
