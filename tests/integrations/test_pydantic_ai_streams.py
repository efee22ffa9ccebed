"""Pydantic AI's streaming doors recorded with one changed line each: ``async with
agent.run_stream(...)`` becomes ``async with run_stream(agent, ..., edges, client=...)``, and so
for ``run_stream_sync``, ``run_stream_events`` and ``iter``. Agents as Pydantic AI's docs write
them (streamed text, read with or without ``await``, streamed structured output, every event of
the run, node by node with each node's events streamed), the model asking for two tools at once
(one of them sends e-mail) before it streams its answer; the real ``pydantic-ai`` and ``openai``
packages over HTTP to the local provider (streamed Chat Completions), the real Recorder, broker
and sequencer. Each door is recorded once and replayed 50 times with the provider stopped:
matched, no socket, no e-mail sent again. A changed prompt and a changed tool result diverge at
the model call that saw them, with the JSON path, at a line of this file."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
from collections.abc import Callable, Iterator
from typing import Any

import openai
import pytest
from pydantic import BaseModel
from pydantic_ai import (
    Agent,
    AgentRunResultEvent,
    FunctionToolCallEvent,
    FunctionToolResultEvent,
    NativeOutput,
    PartDeltaEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
)

from tests.integrations.offline import OFFLINE_REPLAYS, replay_offline
from tests.integrations.pipeline import Pipeline, Recorded
from tests.integrations.pydantic_support import (
    MAILED,
    QUESTION,
    SENT,
    Mailer,
    at_its_tool,
    support,
)
from tracevault.callsite import CALL_ID_ATTRIBUTE, SITE_ATTRIBUTE
from tracevault.demo.provider import provider_server
from tracevault.edges import Edges
from tracevault.errors import ReplayDivergence
from tracevault.integrations import pydantic_ai as tv
from tracevault.replayer import areplay, replay
from tracevault.schemas import EventKind, TraceEvent


class Reply(BaseModel):
    answer: str


def _client(task: dict[str, Any]) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=task["url"], api_key="t", max_retries=0)


async def stream_agent(task: dict[str, Any], edges: Edges) -> dict[str, Any]:
    """Streamed text, read as it comes (``stream_text``)."""
    async with (
        _client(task) as client,
        tv.run_stream(support, task["question"], edges, client=client,
                      deps=Mailer("desk@example.org")) as result,
    ):  # fmt: skip
        pieces = [p async for p in result.stream_text(delta=True, debounce_by=None)]
        output = await result.get_output()
    return {"pieces": pieces, "output": output}


async def structured_agent(task: dict[str, Any], edges: Edges) -> dict[str, Any]:
    """Streamed structured output (``stream_output``), validated as it grows."""
    async with (
        _client(task) as client,
        tv.run_stream(support, task["question"], edges, client=client,
                      deps=Mailer("desk@example.org"), output_type=NativeOutput(Reply)) as result,
    ):  # fmt: skip
        partial = [r.answer async for r in result.stream_output(debounce_by=None)]
        output = await result.get_output()
    return {"partial": partial, "output": output.model_dump()}


def _step(event: Any) -> list[str] | None:
    """What the agent notes of an event: a text piece, a tool call or a tool result."""
    if isinstance(event, PartStartEvent) and isinstance(event.part, TextPart):
        return ["text", event.part.content]
    if isinstance(event, PartDeltaEvent) and isinstance(event.delta, TextPartDelta):
        return ["text", event.delta.content_delta]
    if isinstance(event, FunctionToolCallEvent):
        return ["call", event.part.tool_name]
    if isinstance(event, FunctionToolResultEvent):
        return ["result", str(event.part.content)]
    return None


async def iter_agent(task: dict[str, Any], edges: Edges) -> dict[str, Any]:
    """Node by node, each model request's and tool turn's events streamed."""
    seen: list[list[str]] = []
    async with (
        _client(task) as client,
        tv.iter(support, task["question"], edges, client=client,
                deps=Mailer("desk@example.org")) as agent_run,
    ):  # fmt: skip
        async for node in agent_run:
            if Agent.is_model_request_node(node):
                kinds: set[str] = set()
                async with node.stream(agent_run.ctx) as request_stream:
                    async for event in request_stream:
                        kinds.add(type(event).__name__)
                seen.append(["model", *sorted(kinds)])
            elif Agent.is_call_tools_node(node):
                async with node.stream(agent_run.ctx) as handle_stream:
                    seen += [step async for e in handle_stream if (step := _step(e))]
            else:
                seen.append([type(node).__name__])
    assert agent_run.result is not None
    return {"nodes": seen, "output": agent_run.result.output}


def stream_sync_agent(task: dict[str, Any], edges: Edges) -> dict[str, Any]:
    """Streamed text read without ``await`` (``run_stream_sync``), in a plain function."""
    client = _client(task)
    try:
        with tv.run_stream_sync(support, task["question"], edges, client=client,
                                deps=Mailer("desk@example.org")) as result:  # fmt: skip
            pieces = list(result.stream_text(delta=True, debounce_by=None))
            output = result.get_output()
    finally:  # a divergence too: the stream ran on the event loop Pydantic AI made for this
        # thread, and leaves it open: close the client there, then the loop (as
        # test_pydantic_ai's run_sync agent does)
        loop = asyncio.get_event_loop()
        loop.run_until_complete(client.close())
        loop.close()
        asyncio.set_event_loop(None)
    return {"pieces": pieces, "output": output}


async def events_agent(task: dict[str, Any], edges: Edges) -> dict[str, Any]:
    """Every event of the run as it comes (``run_stream_events``): the answer's text pieces,
    the tool calls and their results, then the run's result."""
    seen: list[list[str]] = []
    output = None
    async with (
        _client(task) as client,
        tv.run_stream_events(support, task["question"], edges, client=client,
                             deps=Mailer("desk@example.org")) as events,
    ):  # fmt: skip
        async for event in events:
            if isinstance(event, AgentRunResultEvent):
                output = event.result.output
            elif step := _step(event):
                seen.append(step)
    return {"events": seen, "output": output}


Door = Callable[[dict[str, Any], Edges], Any]  # a coroutine function, or a plain one
DOORS: dict[str, Door] = {
    "run_stream": stream_agent,
    "run_stream structured": structured_agent,
    "run_stream_sync": stream_sync_agent,
    "run_stream_events": events_agent,
    "iter": iter_agent,
}


def _replay(events: list[TraceEvent], agent: Door) -> Any:
    if inspect.iscoroutinefunction(agent):
        return asyncio.run(areplay(events, agent))
    return replay(events, agent)


def _instructed_otherwise(agent: Door) -> Door:
    """The same door, its agent's instructions changed (the prompt the model first sees)."""
    if inspect.iscoroutinefunction(agent):

        async def changed(task: dict[str, Any], edges: Edges) -> Any:
            with support.override(instructions="Answer tersely; use the tools."):
                return await agent(task, edges)

        return changed

    def changed_sync(task: dict[str, Any], edges: Edges) -> Any:
        with support.override(instructions="Answer tersely; use the tools."):
            return agent(task, edges)

    return changed_sync


@pytest.fixture(scope="module")
def recorded(pipeline: Pipeline) -> Iterator[dict[str, tuple[Recorded, int]]]:
    """Each door recorded once: its run and how many e-mails it sent."""
    runs = {}
    for name, door in DOORS.items():
        SENT.clear()
        with provider_server() as server:
            rec = pipeline.record(door, {"url": server.url + "/v1", "question": QUESTION})
            assert len(server.requests) == 2, (name, rec.output)
            assert all(r.body.get("stream") for r in server.requests), name
        runs[name] = (rec, len(SENT))
    yield runs
    SENT.clear()


@pytest.mark.parametrize("door", DOORS)
def test_each_door_records_its_loop(recorded: dict[str, tuple[Recorded, int]], door: str) -> None:
    rec, sent = recorded[door]
    assert not isinstance(rec.output, Exception), rec.output
    assert sent == 1  # live, the e-mail went once
    kinds = [e.kind.value for e in rec.events]
    assert kinds == ["RUN_STARTED", "MODEL_CALL", "TOOL_CALL", "TOOL_CALL", "MODEL_CALL",
                     "RUN_FINISHED"], door  # fmt: skip
    calls = rec.events[2:4]
    assert sorted(json.loads(e.request)["tool"] for e in calls) == ["get_weather", "send_email"]
    assert sorted(e.attributes[CALL_ID_ATTRIBUTE] for e in calls) == ["call_1", "call_2"]
    for ev in (rec.events[1], rec.events[4]):  # each model request recorded as its stream
        assert ev.model == "gpt-4o-mini-2024-07-18"
        assert json.loads(ev.response)["stream"], door
    assert all(at_its_tool(e) for e in calls), (door, calls)
    for ev in (rec.events[1], rec.events[4]):  # at the agent's line that made the request
        site = ev.attributes[SITE_ATTRIBUTE]
        assert site.startswith(f"{__name__}:{DOORS[door].__name__}:"), (door, site)


def test_what_each_door_streamed(recorded: dict[str, tuple[Recorded, int]]) -> None:
    text = recorded["run_stream"][0].output
    assert text["output"].strip() == f"echo: {MAILED}", text
    assert len(text["pieces"]) > 1 and "".join(text["pieces"]) == text["output"], text
    structured = recorded["run_stream structured"][0].output
    assert structured["output"] == {"answer": f"echo: {MAILED}"}, structured
    assert structured["partial"][-1] == f"echo: {MAILED}", structured
    synced = recorded["run_stream_sync"][0].output
    assert synced == text, synced  # the same stream, read without await
    events = recorded["run_stream_events"][0].output
    assert events["output"] == text["output"], events
    steps = events["events"]
    assert [s[0] for s in steps][:2] == ["call", "call"], steps  # both tools asked at once
    assert [s[1] for s in steps if s[0] == "result" and "mailed" in s[1]] == [MAILED], steps
    texts = [s[1] for s in steps if s[0] == "text"]
    assert len(texts) > 1 and "".join(texts) == text["output"], steps  # as the chunks came
    nodes = recorded["iter"][0].output
    assert nodes["output"].strip() == f"echo: {MAILED}", nodes
    steps = nodes["nodes"]
    assert steps[0] == ["UserPromptNode"] and steps[1][0] == "model", steps
    assert sorted(s[1] for s in steps if s[0] == "call") == ["get_weather", "send_email"], steps
    assert [s[1] for s in steps if s[0] == "result" and "mailed" in s[1]] == [MAILED], steps
    assert steps[-1] == ["End"], steps


@pytest.mark.parametrize("door", DOORS)
def test_each_door_replays_50_times_with_the_provider_stopped(
    recorded: dict[str, tuple[Recorded, int]], door: str
) -> None:
    rec, _ = recorded[door]
    SENT.clear()  # the provider's server is stopped: its port is closed
    got = replay_offline(rec.events, DOORS[door], OFFLINE_REPLAYS, rec.output)
    assert (got.matched, got.connects, SENT) == (OFFLINE_REPLAYS, (), []), door


@pytest.mark.parametrize("door", DOORS)
def test_a_changed_prompt_diverges_at_the_first_model_call(
    recorded: dict[str, tuple[Recorded, int]], door: str
) -> None:
    rec, _ = recorded[door]
    agent = DOORS[door]
    SENT.clear()
    with pytest.raises(ReplayDivergence) as info:
        _replay(rec.events, _instructed_otherwise(agent))
    first = next(e for e in rec.events if e.kind is EventKind.MODEL_CALL)
    assert info.value.seq == first.seq, door
    assert any(d.startswith("$.request.params.messages[0].content: expected")
               for d in info.value.diff), info.value.diff  # fmt: skip
    assert f"{__name__}:{agent.__name__}:" in str(info.value), str(info.value)
    assert SENT == []


@pytest.mark.parametrize("door", DOORS)
def test_a_changed_tool_result_diverges_at_the_model_call_that_saw_it(
    recorded: dict[str, tuple[Recorded, int]], door: str
) -> None:
    """The e-mail tool's recorded result edited: the answering model call is asked otherwise."""
    rec, _ = recorded[door]
    events = list(rec.events)
    mail = next(i for i, e in enumerate(events)
                if e.kind is EventKind.TOOL_CALL and b"send_email" in e.request)  # fmt: skip
    events[mail] = dataclasses.replace(events[mail], response=b'"bounced"')
    SENT.clear()
    with pytest.raises(ReplayDivergence) as info:
        _replay(events, DOORS[door])
    answer = [e for e in events if e.kind is EventKind.MODEL_CALL][1]
    assert info.value.seq == answer.seq, door
    assert any('got "bounced"' in d and d.startswith("$.request.params.messages[")
               for d in info.value.diff), info.value.diff  # fmt: skip
    assert f"{__name__}:{DOORS[door].__name__}:" in str(info.value), str(info.value)
    assert SENT == []
