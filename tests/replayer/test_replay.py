"""Re-running recorded runs: matches, recorded errors, --until, async agents."""

from __future__ import annotations

import asyncio

import pytest

from tests.replayer import agents
from tests.replayer.recording import arecord, record
from tracevault.errors import ReplayDivergence
from tracevault.replayer import RecordedError, areplay, replay
from tracevault.schemas import EventKind


def _record(agent=agents.research_agent, run_id="run-1", **kw):
    return record(
        agent, agents.INPUT, run_id=run_id, model_fn=agents.fake_model, tools=agents.TOOLS,
        states=agents.STATES, **kw,
    )  # fmt: skip


def test_replay_of_a_recorded_run_matches_and_serves_every_event() -> None:
    events = _record()
    result = replay(events, agents.research_agent)
    assert result.matched and not result.stopped and result.divergence is None
    assert result.steps == len(events)
    assert result.output["answer"].startswith("About 93")
    assert [e.seq for e in result.served] == list(range(len(events)))


def test_replay_never_calls_the_real_tools_or_state_readers() -> None:
    events = _record()
    calls: list[str] = []

    def agent(agent_input, edges):
        edges.state("x", read=lambda: calls.append("read"))

    ev = record(agent, {}, run_id="r-state", model_fn=agents.fake_model, tools={})
    assert replay(ev, agent).matched
    assert calls == ["read"]  # only the live recording read the state
    assert replay(events, agents.research_agent).matched


def test_recorded_tool_error_is_raised_again_with_its_type_and_message() -> None:
    events = _record(agents.failing_tool_agent)
    assert events[1].error is not None and events[1].error.type == "FileNotFoundError"
    result = replay(events, agents.failing_tool_agent)
    assert result.matched
    assert result.output == {"note": "fallback after FileNotFoundError", "t": 1_790_000_000.5}


def test_recorded_error_is_the_builtin_itself() -> None:
    seen: list[BaseException] = []

    def agent(agent_input, edges):
        try:
            edges.tool("fetch", {"url": "https://example.org/missing"})
        except Exception as exc:
            seen.append(exc)
        return 1

    events = record(agent, {}, run_id="r-err", model_fn=agents.fake_model, tools=agents.TOOLS)
    replay(events, agent)
    exc = seen[-1]
    assert type(exc) is FileNotFoundError and not isinstance(exc, RecordedError)
    assert exc.recorded_type == "FileNotFoundError"
    assert str(exc) == "no such page: https://example.org/missing"


def test_agent_failure_that_was_recorded_replays_as_a_match() -> None:
    events = _record(agents.crashing_agent)
    assert [e.kind for e in events[-2:]] == [EventKind.ERROR, EventKind.RUN_FINISHED]
    result = replay(events, agents.crashing_agent)
    assert result.matched and result.error is not None
    assert result.error.type == "FileNotFoundError"
    assert result.steps == len(events)


def test_until_stops_at_the_given_step_without_comparing_the_output() -> None:
    events = _record()
    result = replay(events, agents.research_agent, until=3)
    assert result.matched and result.stopped
    assert [e.seq for e in result.served] == [0, 1, 2, 3]
    assert result.served[-1].kind is EventKind.MODEL_CALL
    # a divergence after N is not reached when stopping at N
    assert replay(events, agents.extra_tool_agent, until=5).matched


def test_until_zero_does_not_call_the_agent() -> None:
    events = _record()
    called = []
    result = replay(events, lambda i, e: called.append(1), until=0)
    assert result.stopped and result.steps == 1 and called == []


def test_async_agent_replays_with_areplay() -> None:
    events = asyncio.run(
        arecord(agents.async_research_agent, agents.INPUT, run_id="run-async",
                model_fn=agents.fake_model, tools=agents.TOOLS, states=agents.STATES)
    )  # fmt: skip
    result = asyncio.run(areplay(events, agents.async_research_agent))
    assert result.matched and result.output["cached"] == {"pages_cached": 3}


def test_divergence_swallowed_by_the_agent_is_still_reported() -> None:
    events = _record()
    with pytest.raises(ReplayDivergence) as info:
        replay(events, agents.swallowing_agent)
    assert info.value.seq == 1
    assert info.value.expected == "CLOCK" and info.value.actual == "TOOL_CALL"


def test_raise_on_divergence_false_returns_the_report() -> None:
    events = _record()
    result = replay(events, agents.changed_prompt_agent, raise_on_divergence=False)
    assert not result.matched and result.divergence is not None
    assert result.divergence.seq == 3
    assert result.to_json()["divergence"]["seq"] == 3


def test_crossings_nested_inside_a_served_tool_call_are_not_expected_again() -> None:
    # live, the search tool called the model itself (parent_seq = the tool's seq); under
    # replay the tool is not run, so its nested call must be skipped, not awaited
    import dataclasses

    events = _record()
    search = events[4]
    nested = dataclasses.replace(events[3], seq=5, parent_seq=search.seq)
    rest = [dataclasses.replace(e, seq=e.seq + 1) for e in events[5:]]
    result = replay([*events[:5], nested, *rest], agents.research_agent)
    assert result.matched and result.steps == len(events) + 1


def test_an_agent_defined_error_is_raised_again_as_its_own_class() -> None:
    events = _record(agents.quota_agent)
    assert events[1].error.type == "tests.replayer.agents.QuotaExceededError"
    result = replay(events, agents.quota_agent)
    assert result.matched and result.output == {"handled": "quota of u1 exhausted"}


def test_encrypted_events_replayed_unopened_say_how_to_open_them() -> None:
    import dataclasses
    import os

    from tracevault.content import RunCipher
    from tracevault.errors import ConfigError

    events = _record()
    cipher = RunCipher(events[0].run_id, os.urandom(32))
    sealed = [dataclasses.replace(events[0], request=cipher.seal(0, "request", events[0].request))]
    with pytest.raises(ConfigError, match=r"content is encrypted .* tracevault\.content\.open_run"):
        replay([*sealed, *events[1:]], agents.research_agent)
