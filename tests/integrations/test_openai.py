"""The OpenAI adapter with the real ``openai`` SDK over HTTP to a local server, through the real
Recorder, broker and sequencer; replayed from the sealed record with the server shut down."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.responses import Response, ResponseCompletedEvent, ResponseTextDeltaEvent

from tests.integrations.offline import OFFLINE_REPLAYS, replay_offline
from tests.integrations.pipeline import Pipeline
from tracevault.demo.provider import provider_server
from tracevault.edges import Edges
from tracevault.errors import PayloadError, ReplayDivergence
from tracevault.integrations.openai import wrap
from tracevault.replayer import StepSummary, areplay, replay
from tracevault.schemas import EventKind

WEATHER = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]


def get_weather(args: dict[str, Any]) -> dict[str, Any]:
    return {"city": args["city"], "sky": "clear", "celsius": 21}


def chat_agent(task: dict[str, Any], edges: Edges) -> str:
    """A tool loop written against the plain SDK; the wrap line is the only tracevault line."""
    with wrap(openai.OpenAI(base_url=task["url"], api_key="test", max_retries=0), edges) as client:
        messages: list[dict[str, Any]] = [{"role": "user", "content": task["question"]}]
        while True:
            reply = client.chat.completions.create(
                model="gpt-4o-mini", messages=messages, tools=WEATHER, seed=42, temperature=0
            )
            assert isinstance(reply, ChatCompletion)
            message = reply.choices[0].message
            if not message.tool_calls:
                return str(message.content)
            messages.append(message.model_dump(exclude_unset=True))
            for call in message.tool_calls:
                result = edges.tool(call.function.name, json.loads(call.function.arguments))
                messages.append(
                    {"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)}
                )


def model_calls(events: list[Any]) -> list[Any]:
    return [e for e in events if e.kind is EventKind.MODEL_CALL]


def test_chat_completions_record_then_replay_without_a_socket(pipeline: Pipeline) -> None:
    with provider_server() as server:
        task = {"url": server.url + "/v1", "question": "weather in Paris?"}
        run = pipeline.record(chat_agent, task, tools={"get_weather": get_weather})
        live_requests = len(server.requests)
    assert run.output == 'echo: {"celsius": 21, "city": "Paris", "sky": "clear"}'
    assert live_requests == 2

    first, second = model_calls(run.events)
    # The exact build the provider answered with, not the alias the agent typed.
    assert first.model == second.model == "gpt-4o-mini-2024-07-18"
    assert first.seed == 42
    request = json.loads(first.request)
    assert request["provider"] == "openai" and request["api"] == "chat.completions"
    assert request["params"]["model"] == "gpt-4o-mini"
    assert request["params"]["messages"] == [{"role": "user", "content": "weather in Paris?"}]
    recorded = json.loads(first.response)
    response = recorded["response"]  # the provider's response, whole
    assert response["usage"] == {"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9}
    asked = response["choices"][0]["message"]["tool_calls"][0]["function"]
    assert asked == {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    tool = next(e for e in run.events if e.kind is EventKind.TOOL_CALL)
    assert first.seq < tool.seq < second.seq  # the asked-for tool call sits between, in order
    # The timeline's short response starts with the tools the model asked for.
    assert recorded["asked_tools"] == ['get_weather({"city": "Paris"})']
    line = StepSummary.of(first)
    assert line.model == "gpt-4o-mini-2024-07-18"
    assert line.response.startswith('{"asked_tools":["get_weather({\\"city\\": \\"Paris\\"})"]')

    # Server gone: the port is closed, and replay must not have tried it, 50 times.
    got = replay_offline(run.events, chat_agent, OFFLINE_REPLAYS, run.output)
    assert (got.matched, got.connects) == (OFFLINE_REPLAYS, ())
    assert len(server.requests) == live_requests


def test_a_changed_prompt_diverges_at_the_model_call(pipeline: Pipeline) -> None:
    with provider_server() as server:
        task = {"url": server.url + "/v1", "question": "weather in Paris?"}
        run = pipeline.record(chat_agent, task, tools={"get_weather": get_weather})

    def edited(task: dict[str, Any], edges: Edges) -> str:
        return chat_agent({**task, "question": "weather in Lyon?"}, edges)

    with pytest.raises(ReplayDivergence) as info:
        replay(run.events, edited)
    assert info.value.seq == model_calls(run.events)[0].seq
    assert any("$.request.params.messages[0].content" in d for d in info.value.diff)
    assert len(server.requests) == 2


def stream_agent(task: dict[str, Any], edges: Edges) -> dict[str, Any]:
    with wrap(openai.OpenAI(base_url=task["url"], api_key="test", max_retries=0), edges) as client:
        text = ""
        with client.chat.completions.create(
            model="gpt-4o-mini",
            messages=[{"role": "user", "content": task["question"]}],
            stream=True,
            stream_options={"include_usage": True},
        ) as stream:
            kinds = set()
            for chunk in stream:
                kinds.add(type(chunk).__name__)
                if chunk.choices and chunk.choices[0].delta.content:
                    text += chunk.choices[0].delta.content
        events = client.responses.create(model="gpt-4o-mini", input=task["question"], stream=True)
        deltas = [e.delta for e in events if isinstance(e, ResponseTextDeltaEvent)]
        final = client.responses.create(model="gpt-4o-mini", input="and tomorrow?")
        assert isinstance(final, Response)
        return {
            "chat": text,
            "kinds": sorted(kinds),
            "responses": "".join(deltas),
            "final": final.output_text,
        }


def test_streams_are_recorded_whole_and_replayed_as_chunks(pipeline: Pipeline) -> None:
    with provider_server() as server:
        task = {"url": server.url + "/v1", "question": "say hi"}
        run = pipeline.record(stream_agent, task)
    assert run.output == {
        "chat": "echo: say hi ",
        "kinds": ["ChatCompletionChunk"],
        "responses": "echo: say hi ",
        "final": "echo: and tomorrow?",
    }
    chat, resp, final = model_calls(run.events)
    assert chat.model == resp.model == final.model == "gpt-4o-mini-2024-07-18"
    recorded = json.loads(chat.response)
    assert recorded["usage"]["total_tokens"] == 10
    assert recorded["stream"][0]["object"] == "chat.completion.chunk"
    recorded = json.loads(resp.response)
    assert [e["type"] for e in recorded["stream"]][-1] == "response.completed"
    assert recorded["usage"]["output_tokens"] == 3

    result = replay(run.events, stream_agent)
    assert result.matched and result.output == run.output
    assert len(server.requests) == 3


def test_stream_tool_calls_are_summed_up_in_the_record(pipeline: Pipeline) -> None:
    def agent(task: dict[str, Any], edges: Edges) -> list[Any]:
        with wrap(openai.OpenAI(base_url=task["url"], api_key="t", max_retries=0), edges) as client:
            stream = client.chat.completions.create(
                model="gpt-4o-mini",
                messages=[{"role": "user", "content": "hi"}],
                tools=WEATHER,
                stream=True,
            )
            chunks = list(stream)
            assert all(isinstance(c, ChatCompletionChunk) for c in chunks)
            return [c.model_dump(mode="json", exclude_unset=True) for c in chunks]

    with provider_server() as server:
        run = pipeline.record(agent, {"url": server.url + "/v1"})
    (call,) = model_calls(run.events)
    recorded = json.loads(call.response)
    assert recorded["tool_calls"] == [
        {"id": "call_1", "name": "get_weather", "arguments": '{"city": "Paris"}'}
    ]
    assert recorded["asked_tools"] == ['get_weather({"city": "Paris"})']
    assert replay(run.events, agent).output == run.output


async def async_agent(task: dict[str, Any], edges: Edges) -> dict[str, Any]:
    async with wrap(
        openai.AsyncOpenAI(base_url=task["url"], api_key="t", max_retries=0), edges
    ) as client:
        reply = await client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "one"}]
        )
        stream = await client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "two"}], stream=True
        )
        text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
        events = await client.responses.create(model="gpt-4o-mini", input="three", stream=True)
        done = [e async for e in events if isinstance(e, ResponseCompletedEvent)]
        return {
            "one": reply.choices[0].message.content,
            "two": text,
            "three": done[0].response.output_text,
        }


def test_async_client_record_and_replay(pipeline: Pipeline) -> None:
    with provider_server() as server:
        run = pipeline.record(async_agent, {"url": server.url + "/v1"})
    assert run.output == {"one": "echo: one", "two": "echo: two ", "three": "echo: three"}
    assert len(model_calls(run.events)) == 3
    result = asyncio.run(areplay(run.events, async_agent))
    assert result.matched and result.output == run.output
    assert len(server.requests) == 3


def test_a_response_naming_an_alias_is_refused_and_kept_in_the_record(pipeline: Pipeline) -> None:
    def agent(task: dict[str, Any], edges: Edges) -> str:
        with wrap(openai.OpenAI(base_url=task["url"], api_key="t", max_retries=0), edges) as client:
            reply = client.chat.completions.create(
                model="gpt-test-latest", messages=[{"role": "user", "content": "hi"}]
            )
            return str(reply.choices[0].message.content)

    with provider_server() as server:
        run = pipeline.record(agent, {"url": server.url + "/v1"})
    assert isinstance(run.output, PayloadError)
    assert "$.response.model" in str(run.output) and "gpt-test-latest" in str(run.output)
    (call,) = model_calls(run.events)
    assert call.model is None and call.error is not None
    kept = json.loads(call.response)  # the answer is kept
    assert kept["model"] == kept["response"]["model"] == "gpt-test-latest"
    # Replay raises the same refusal in the agent at the same call: the run matches its record.
    result = replay(run.events, agent)
    assert result.matched and result.error is not None and "alias" in result.error.message
    assert len(server.requests) == 1


def retrying_agent(task: dict[str, Any], edges: Edges) -> list[Any]:
    """Handles the SDK's own exception: replay must raise the same class for the same branch."""
    seen: list[Any] = []
    with wrap(openai.OpenAI(base_url=task["url"], api_key="t", max_retries=0), edges) as client:
        for prompt in ("please 429", "fine"):
            try:
                reply = client.chat.completions.create(
                    model="gpt-4o-mini", messages=[{"role": "user", "content": prompt}]
                )
                seen.append(reply.choices[0].message.content)
            except openai.RateLimitError as exc:
                seen.append({"status": exc.status_code, "type": type(exc).__name__})
    return seen


def test_an_sdk_error_is_raised_again_as_the_sdk_class_under_replay(pipeline: Pipeline) -> None:
    with provider_server() as server:
        run = pipeline.record(retrying_agent, {"url": server.url + "/v1"})
    assert run.output == [{"status": 429, "type": "RateLimitError"}, "echo: fine"]
    failed = model_calls(run.events)[0]
    assert failed.error is not None and failed.error.type.endswith("RateLimitError")
    result = replay(run.events, retrying_agent)
    assert result.matched and result.output == run.output
    assert len(server.requests) == 2


def test_wrapping_a_client_builds_no_ssl_context_of_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A wrapped client sends through the SDK's own client, so the door builds no transport:
    httpx's default one loads the CA bundle (~45 ms), which was paid once per recorded run
    (bench/framework_overhead.py)."""
    import httpcore2

    sync_client = openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="t", max_retries=0)
    async_client = openai.AsyncOpenAI(base_url="http://127.0.0.1:9/v1", api_key="t")
    built: list[object] = []
    real = httpcore2.default_ssl_context

    def counted(*args: Any, **kwargs: Any) -> Any:
        built.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(httpcore2, "default_ssl_context", counted)
    openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="t")
    assert len(built) == 1, "the count sees a client's SSL context being built"
    built.clear()
    edges: Any = object()  # wrapping records nothing: no call is made here
    wrap(sync_client, edges)
    wrap(async_client, edges)
    assert built == [], f"wrap built {len(built)} SSL context(s)"
