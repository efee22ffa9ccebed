"""The Anthropic adapter with the real ``anthropic`` SDK over HTTP to a local server, through
the real Recorder, broker and sequencer; replayed from the sealed record, server shut down."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import anthropic
import pytest
from anthropic.types import Message, RawContentBlockDeltaEvent

from tests.integrations.offline import OFFLINE_REPLAYS, replay_offline
from tests.integrations.pipeline import Pipeline
from tracevault.demo.provider import provider_server
from tracevault.edges import Edges
from tracevault.errors import ReplayDivergence
from tracevault.integrations.anthropic import wrap
from tracevault.replayer import areplay, replay
from tracevault.schemas import EventKind

WEATHER = [{"name": "get_weather", "input_schema": {"type": "object"}}]


def get_weather(args: dict[str, Any]) -> dict[str, Any]:
    return {"city": args["city"], "sky": "clear"}


def agent(task: dict[str, Any], edges: Edges) -> str:
    """A tool loop against the plain SDK; the wrap line is the only tracevault line."""
    with wrap(
        anthropic.Anthropic(base_url=task["url"], api_key="t", max_retries=0), edges
    ) as client:
        messages: list[dict[str, Any]] = [{"role": "user", "content": task["question"]}]
        while True:
            reply = client.messages.create(
                model="claude-haiku-4-5", max_tokens=256, messages=messages, tools=WEATHER
            )
            assert isinstance(reply, Message)
            uses = [b for b in reply.content if b.type == "tool_use"]
            if not uses:
                return "".join(b.text for b in reply.content if b.type == "text")
            messages.append({"role": "assistant", "content": [b.model_dump() for b in uses]})
            results = [
                {
                    "type": "tool_result",
                    "tool_use_id": b.id,
                    "content": json.dumps(edges.tool(b.name, b.input)),
                }
                for b in uses
            ]
            messages.append({"role": "user", "content": results})


def test_messages_record_then_replay_without_a_socket(pipeline: Pipeline) -> None:
    with provider_server() as server:
        task = {"url": server.url, "question": "weather in Paris?"}
        run = pipeline.record(agent, task, tools={"get_weather": get_weather})
        live = len(server.requests)
    assert live == 2 and run.output.startswith("echo: ")
    first, second = [e for e in run.events if e.kind is EventKind.MODEL_CALL]
    assert first.model == second.model == "claude-haiku-4-5-20251001"
    request = json.loads(first.request)
    assert request["provider"] == "anthropic" and request["api"] == "messages"
    assert request["params"]["model"] == "claude-haiku-4-5"
    recorded = json.loads(first.response)
    assert recorded["asked_tools"] == ['get_weather({"city": "Paris"})']
    response = recorded["response"]
    assert response["usage"] == {"input_tokens": 7, "output_tokens": 5}
    assert response["content"][0]["type"] == "tool_use"
    assert response["content"][0]["input"] == {"city": "Paris"}

    got = replay_offline(run.events, agent, OFFLINE_REPLAYS, run.output)
    assert (got.matched, got.connects) == (OFFLINE_REPLAYS, ())
    assert len(server.requests) == live

    def edited(task: dict[str, Any], edges: Edges) -> str:
        return agent({**task, "question": "weather in Oslo?"}, edges)

    with pytest.raises(ReplayDivergence) as info:
        replay(run.events, edited)
    assert info.value.seq == first.seq
    assert any("$.request.params.messages[0].content" in d for d in info.value.diff)


def stream_agent(task: dict[str, Any], edges: Edges) -> dict[str, Any]:
    with wrap(
        anthropic.Anthropic(base_url=task["url"], api_key="t", max_retries=0), edges
    ) as client:
        out: dict[str, Any] = {}
        for name, tools in (("text", []), ("tool", WEATHER)):
            with client.messages.create(
                model="claude-haiku-4-5",
                max_tokens=64,
                messages=[{"role": "user", "content": "hello there"}],
                tools=tools,
                stream=True,
            ) as stream:
                deltas = [e.delta for e in stream if isinstance(e, RawContentBlockDeltaEvent)]
            out[name] = "".join(
                getattr(d, "text", None) or getattr(d, "partial_json", "") for d in deltas
            )
        return out


def test_stream_recorded_whole_and_replayed_as_events(pipeline: Pipeline) -> None:
    with provider_server() as server:
        run = pipeline.record(stream_agent, {"url": server.url})
    assert run.output == {"text": "echo: hello there ", "tool": '{"city": "Paris"}'}
    text, tool = [e for e in run.events if e.kind is EventKind.MODEL_CALL]
    assert text.model == tool.model == "claude-haiku-4-5-20251001"
    summary = json.loads(tool.response)
    assert summary["tool_calls"] == [
        {"id": "toolu_1", "name": "get_weather", "arguments": '{"city": "Paris"}'}
    ]
    assert summary["usage"] == {"input_tokens": 7, "output_tokens": 5}
    assert replay(run.events, stream_agent).output == run.output
    assert len(server.requests) == 2


async def async_agent(task: dict[str, Any], edges: Edges) -> list[str]:
    async with wrap(
        anthropic.AsyncAnthropic(base_url=task["url"], api_key="t", max_retries=0), edges
    ) as client:
        reply = await client.messages.create(
            model="claude-haiku-4-5", max_tokens=64, messages=[{"role": "user", "content": "one"}]
        )
        stream = await client.messages.create(
            model="claude-haiku-4-5",
            max_tokens=64,
            messages=[{"role": "user", "content": "two"}],
            stream=True,
        )
        text = [e.delta.text async for e in stream if isinstance(e, RawContentBlockDeltaEvent)]
        return [reply.content[0].text, "".join(text)]


def test_async_client_record_and_replay(pipeline: Pipeline) -> None:
    with provider_server() as server:
        run = pipeline.record(async_agent, {"url": server.url})
    assert run.output == ["echo: one", "echo: two "]
    result = asyncio.run(areplay(run.events, async_agent))
    assert result.matched and result.output == run.output
    assert len(server.requests) == 2
