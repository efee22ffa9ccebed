"""No side doors: every call a wrapped client can make is recorded and served, or refused by
name before it leaves the process. The real ``openai`` and ``anthropic`` SDKs over HTTP to the
local provider server, the real Recorder, broker and sequencer; replayed with the server UP
and counting its connections, which must stay where recording left them."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import anthropic
import httpx2
import openai
import pytest
from pydantic import BaseModel

from tests.integrations.pipeline import Pipeline
from tracevault.demo.provider import provider_server
from tracevault.edges import Edges
from tracevault.errors import ConfigError
from tracevault.integrations import anthropic as tv_anthropic
from tracevault.integrations import openai as tv_openai
from tracevault.replayer import areplay, replay
from tracevault.schemas import EventKind

EMBEDDING_MODEL = "text-embedding-3-small"  # no dated build exists: allowed by exact id


class Answer(BaseModel):
    answer: str


def openai_agent(task: dict[str, Any], edges: Edges) -> dict[str, Any]:
    """Every side door issue 23 found open: with_options, embeddings, files, models, parse."""
    sdk = openai.OpenAI(base_url=task["url"], api_key="t", max_retries=0)
    with tv_openai.wrap(sdk, edges) as client:
        quick = client.with_options(timeout=5, max_retries=0)
        reply = quick.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "with options"}]
        )
        vectors = client.embeddings.create(model=EMBEDDING_MODEL, input=["a doc", "another"])
        files = [f.filename for f in client.files.list()]
        models = [m.id for m in client.models.list()]
        parsed = client.beta.chat.completions.parse(
            model="gpt-4o-mini",
            messages=[{"role": "user", "content": "structured"}],
            response_format=Answer,
        )
        raw = client.chat.completions.with_raw_response.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "raw"}]
        )
        with client.with_options(http_client=httpx2.Client()) as own:
            other = own.chat.completions.create(
                model="gpt-4o-mini", messages=[{"role": "user", "content": "own http client"}]
            )
        return {
            "reply": reply.choices[0].message.content,
            "vectors": [d.embedding for d in vectors.data],
            "files": files,
            "models": models,
            "parsed": parsed.choices[0].message.parsed.answer,
            "raw": raw.parse().choices[0].message.content,
            "other": other.choices[0].message.content,
        }


def kinds(events: list[Any]) -> list[tuple[str, str]]:
    out = []
    for e in events:
        if e.kind is EventKind.MODEL_CALL:
            out.append(("model", json.loads(e.request)["api"]))
        elif e.kind is EventKind.EXTERNAL_STATE:
            out.append(("state", json.loads(e.request)["name"]))
    return out


def test_every_openai_door_is_recorded_and_replayed_without_a_connection(
    pipeline: Pipeline,
) -> None:
    with provider_server() as server:
        run = pipeline.record(
            openai_agent, {"url": server.url + "/v1"}, model_allow=[EMBEDDING_MODEL]
        )
        assert not isinstance(run.output, Exception), run.output
        assert run.output["reply"] == "echo: with options"
        assert run.output["parsed"] == "echo: structured"
        assert run.output["files"] == ["notes.txt"]
        assert run.output["models"] == ["gpt-4o-mini-2024-07-18"]
        assert run.output["other"] == "echo: own http client"
        assert len(run.output["vectors"]) == 2
        assert kinds(run.events) == [
            ("model", "chat.completions"),
            ("model", "embeddings"),
            ("state", "openai GET /files"),
            ("state", "openai GET /models"),
            ("model", "chat.completions"),
            ("model", "chat.completions"),
            ("model", "chat.completions"),
        ]
        # Each crossing's call site is the agent's own line, not the SDK's.
        sites = {
            e.attributes.get("tracevault.site", "").rsplit(":", 1)[0]
            for e in run.events
            if e.kind in (EventKind.MODEL_CALL, EventKind.EXTERNAL_STATE)
        }
        assert sites == {"tests.integrations.test_doors:openai_agent"}
        embed = [e for e in run.events if e.kind is EventKind.MODEL_CALL][1]
        assert embed.model == EMBEDDING_MODEL
        parse = json.loads([e for e in run.events if e.kind is EventKind.MODEL_CALL][2].request)
        assert parse["params"]["response_format"]["type"] == "json_schema"
        requests, connections = len(server.requests), server.connections

        # The server is up and reachable: replay must still open nothing.
        result = replay(run.events, openai_agent)
        assert result.matched, result
        assert result.output == run.output
        assert (len(server.requests), server.connections) == (requests, connections)


def refused_agent(task: dict[str, Any], edges: Edges) -> list[str]:
    sdk = openai.OpenAI(base_url=task["url"], api_key="t", max_retries=2)
    seen = []
    with tv_openai.wrap(sdk, edges) as client:
        calls: list[Callable[[], object]] = [
            lambda: client.files.create(file=("a.txt", b"hello"), purpose="assistants"),
            lambda: client.files.delete("file-1"),
            lambda: client.files.content("file-1"),
            lambda: client.with_options(timeout=3).batches.create(
                completion_window="24h", endpoint="/v1/chat/completions", input_file_id="file-1"
            ),
        ]
        for call in calls:
            try:
                call()
            except ConfigError as exc:
                seen.append(str(exc).split(" is not recorded")[0])
    return seen


def test_what_cannot_be_recorded_is_refused_by_name_before_a_connection(
    pipeline: Pipeline,
) -> None:
    with provider_server() as server:
        run = pipeline.record(refused_agent, {"url": server.url + "/v1"})
        assert run.output == [
            "openai POST /files sends a multipart/form-data body",
            "openai DELETE /files/file-1",
            "openai GET /files/file-1/content answers with file bytes, not JSON",
            "openai POST /batches",
        ]
        assert (len(server.requests), server.connections) == (0, 0)
        result = replay(run.events, refused_agent)
        assert result.matched and result.output == run.output
        assert (len(server.requests), server.connections) == (0, 0)


def anthropic_agent(task: dict[str, Any], edges: Edges) -> dict[str, Any]:
    sdk = anthropic.Anthropic(base_url=task["url"], api_key="t", max_retries=0)
    with tv_anthropic.wrap(sdk, edges) as client:
        reply = client.with_options(timeout=5).messages.create(
            model="claude-haiku-4-5", max_tokens=32, messages=[{"role": "user", "content": "hi"}]
        )
        with client.messages.stream(
            model="claude-haiku-4-5",
            max_tokens=32,
            messages=[{"role": "user", "content": "streamed"}],
        ) as stream:
            text = "".join(stream.text_stream)
        tokens = client.messages.count_tokens(
            model="claude-haiku-4-5", messages=[{"role": "user", "content": "count me"}]
        )
        models = [m.id for m in client.models.list()]
        try:
            client.messages.batches.create(requests=[])
            refused = ""
        except ConfigError as exc:
            refused = str(exc).split(" is not recorded")[0]
        return {
            "refused": refused,
            "reply": reply.content[0].text,
            "stream": text,
            "tokens": tokens.input_tokens,
            "models": models,
        }


def test_every_anthropic_door_is_recorded_and_replayed_without_a_connection(
    pipeline: Pipeline,
) -> None:
    with provider_server() as server:
        run = pipeline.record(anthropic_agent, {"url": server.url})
        assert run.output == {
            "refused": "anthropic POST /messages/batches",
            "reply": "echo: hi",
            "stream": "echo: streamed ",
            "tokens": 7,
            "models": ["claude-haiku-4-5-20251001"],
        }
        found = kinds(run.events)
        assert found[:2] == [("model", "messages"), ("model", "messages")]
        assert found[2][1].startswith("anthropic POST /messages/count_tokens {")
        assert found[3][0] == "state" and found[3][1].startswith("anthropic GET /models")
        requests, connections = len(server.requests), server.connections
        result = replay(run.events, anthropic_agent)
        assert result.matched and result.output == run.output
        assert (len(server.requests), server.connections) == (requests, connections)


async def async_agent(task: dict[str, Any], edges: Edges) -> list[Any]:
    sdk = openai.AsyncOpenAI(base_url=task["url"], api_key="t", max_retries=0)
    async with tv_openai.wrap(sdk, edges) as client:
        reply = await client.with_options(timeout=5).chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "async"}]
        )
        vectors = await client.embeddings.create(model=EMBEDDING_MODEL, input="one doc")
        models = [m.id async for m in client.models.list()]
        return [reply.choices[0].message.content, vectors.data[0].embedding, models]


def test_async_doors_are_recorded_and_replayed_without_a_connection(pipeline: Pipeline) -> None:
    with provider_server() as server:
        run = pipeline.record(
            async_agent, {"url": server.url + "/v1"}, model_allow=[EMBEDDING_MODEL]
        )
        assert not isinstance(run.output, Exception), run.output
        assert run.output[0] == "echo: async" and run.output[2] == ["gpt-4o-mini-2024-07-18"]
        assert [k for k, _ in kinds(run.events)] == ["model", "model", "state"]
        requests, connections = len(server.requests), server.connections
        result = asyncio.run(areplay(run.events, async_agent))
        assert result.matched and result.output == run.output
        assert (len(server.requests), server.connections) == (requests, connections)


def test_a_wrapped_client_refuses_websockets_and_a_second_wrap() -> None:
    client = tv_openai.wrap(openai.OpenAI(base_url="http://127.0.0.1:9", api_key="t"), object())  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="WebSocket"):
        client._websocket_query_params(httpx2.URL("http://127.0.0.1:9/v1/realtime"), {})
    with pytest.raises(ConfigError, match="already wrapped"):
        tv_openai.wrap(client, object())  # type: ignore[arg-type]


def unreachable_agent(task: dict[str, Any], edges: Edges) -> list[str]:
    """The SDK's own retries of a connection error: each attempt is a recorded crossing."""
    sdk = openai.OpenAI(base_url=task["url"], api_key="t", max_retries=1)
    with tv_openai.wrap(sdk, edges) as client:
        try:
            client.models.list()
        except openai.APIConnectionError as exc:
            return [type(exc).__name__, type(exc.__cause__).__name__]
    return []


def test_connection_errors_are_retried_by_the_sdk_and_replayed_attempt_by_attempt(
    pipeline: Pipeline,
) -> None:
    with provider_server() as server:
        dead = server.url + "/v1"
    run = pipeline.record(unreachable_agent, {"url": dead})
    assert run.output == ["APIConnectionError", "ConnectError"]
    attempts = [e for e in run.events if e.kind is EventKind.EXTERNAL_STATE]
    assert len(attempts) == 2
    assert all(a.error is not None and "ConnectError" in a.error.type for a in attempts)
    result = replay(run.events, unreachable_agent)
    assert result.matched and result.output == run.output
