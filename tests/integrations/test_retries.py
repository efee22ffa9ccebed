"""A wrapped client retries as the bare SDK does, each attempt one recorded crossing, and a
client given its own ``http_client`` (httpx2 or legacy httpx) through ``with_options`` stays
behind the door. The real SDKs over HTTP to the local provider server (which answers 429 to a
message containing ``429``); replayed with the server up, its connections counted."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

import anthropic
import httpx
import openai

from tests.integrations.pipeline import Pipeline
from tracevault.demo.provider import provider_server
from tracevault.edges import Edges
from tracevault.integrations import anthropic as tv_anthropic
from tracevault.integrations import openai as tv_openai
from tracevault.replayer import areplay, replay
from tracevault.schemas import EventKind

HI = [{"role": "user", "content": "please 429"}]


def openai_sync(task: dict[str, Any], edges: Edges) -> list[str]:
    sdk = openai.OpenAI(base_url=task["url"] + "/v1", api_key="t", max_retries=1)
    with tv_openai.wrap(sdk, edges) as client:
        try:
            client.chat.completions.create(model="gpt-4o-mini", messages=HI)  # type: ignore[arg-type]
        except openai.RateLimitError as exc:
            return [type(exc).__module__, type(exc).__name__, str(exc)]
    return []


async def openai_async(task: dict[str, Any], edges: Edges) -> list[str]:
    sdk = openai.AsyncOpenAI(base_url=task["url"] + "/v1", api_key="t", max_retries=1)
    async with tv_openai.wrap(sdk, edges) as client:
        try:
            await client.chat.completions.create(model="gpt-4o-mini", messages=HI)
        except openai.RateLimitError as exc:
            return [type(exc).__module__, type(exc).__name__, str(exc)]
    return []


def anthropic_sync(task: dict[str, Any], edges: Edges) -> list[str]:
    sdk = anthropic.Anthropic(base_url=task["url"], api_key="t", max_retries=1)
    with tv_anthropic.wrap(sdk, edges) as client:
        try:
            client.messages.create(model="claude-haiku-4-5", max_tokens=8, messages=HI)  # type: ignore[arg-type]
        except anthropic.RateLimitError as exc:
            return [type(exc).__module__, type(exc).__name__, str(exc)]
    return []


async def anthropic_async(task: dict[str, Any], edges: Edges) -> list[str]:
    sdk = anthropic.AsyncAnthropic(base_url=task["url"], api_key="t", max_retries=1)
    async with tv_anthropic.wrap(sdk, edges) as client:
        try:
            await client.messages.create(model="claude-haiku-4-5", max_tokens=8, messages=HI)  # type: ignore[arg-type]
        except anthropic.RateLimitError as exc:
            return [type(exc).__module__, type(exc).__name__, str(exc)]
    return []


def _replay(events: list[Any], agent: Any) -> Any:
    if inspect.iscoroutinefunction(agent):
        return asyncio.run(areplay(events, agent))
    return replay(events, agent)


def test_every_wrapped_client_retries_a_429_and_records_each_attempt(
    pipeline: Pipeline,
) -> None:
    agents = [openai_sync, openai_async, anthropic_sync, anthropic_async]
    with provider_server() as server:
        for agent in agents:
            before = len(server.requests)
            run = pipeline.record(agent, {"url": server.url})
            assert len(server.requests) - before == 2, agent.__name__  # max_retries=1
            assert run.output[:2] == [agent.__name__.split("_")[0], "RateLimitError"], run.output
            assert "rate limited" in run.output[2]
            calls = [e for e in run.events if e.kind is EventKind.MODEL_CALL]
            assert len(calls) == 2, agent.__name__
            assert all(c.error is not None and "RateLimitError" in c.error.type for c in calls)
            requests, connections = len(server.requests), server.connections
            result = _replay(run.events, agent)
            assert result.matched, (agent.__name__, result)
            assert result.output == run.output, agent.__name__
            assert (len(server.requests), server.connections) == (requests, connections)


def own_http_client(task: dict[str, Any], edges: Edges) -> list[str]:
    sdk = openai.OpenAI(base_url=task["url"] + "/v1", api_key="t", max_retries=0)
    with tv_openai.wrap(sdk, edges) as client:
        with client.with_options(http_client=httpx.Client()) as own:
            reply = own.chat.completions.create(
                model="gpt-4o-mini", messages=[{"role": "user", "content": "legacy httpx"}]
            )
        return [reply.choices[0].message.content or ""]


def test_with_options_takes_a_legacy_httpx_client_live_and_under_replay(
    pipeline: Pipeline,
) -> None:
    with provider_server() as server:
        run = pipeline.record(own_http_client, {"url": server.url})
        assert run.output == ["echo: legacy httpx"], run.output
        assert [e.kind for e in run.events].count(EventKind.MODEL_CALL) == 1
        requests, connections = len(server.requests), server.connections
        result = replay(run.events, own_http_client)
        assert result.matched and result.output == run.output, result
        assert (len(server.requests), server.connections) == (requests, connections)
