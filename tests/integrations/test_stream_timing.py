"""Streams keep their chunk timing where the user asks for it: ``wrap(client, edges,
stream_timing=True)`` records when each chunk arrived and replays a stream with the recorded
gaps (sync and async); without it, or for a stream recorded without it, the chunks come at once.
The real SDKs over HTTP to the local provider server pacing its stream, the real Recorder,
broker and sequencer; replayed with the server UP and counting its connections."""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Callable
from typing import Any

import anthropic
import openai

from tests.integrations.pipeline import Pipeline, Recorded
from tracevault.demo.provider import ProviderServer, provider_server
from tracevault.edges import Edges
from tracevault.integrations import anthropic as tv_anthropic
from tracevault.integrations import openai as tv_openai
from tracevault.integrations._door import CHUNK_OFFSETS
from tracevault.replayer import areplay, replay
from tracevault.schemas import EventKind

DELAY = 0.1  # seconds between the provider's stream events
RAW_EVENTS = {
    "message_start",
    "content_block_start",
    "content_block_delta",
    "content_block_stop",
    "message_delta",
    "message_stop",
}


def chat_agent(timing: bool, arrivals: list[float]) -> Callable[[dict[str, Any], Edges], str]:
    """A sync OpenAI ``stream=True`` agent noting when each chunk reached it."""

    def agent(task: dict[str, Any], edges: Edges) -> str:
        sdk = openai.OpenAI(base_url=task["url"], api_key="t", max_retries=0)
        with tv_openai.wrap(sdk, edges, stream_timing=timing) as client:
            # A copy made by with_options keeps the option.
            stream = client.with_options(timeout=10).chat.completions.create(
                model="gpt-4o-mini", messages=[{"role": "user", "content": "a b"}], stream=True
            )
            text = ""
            for chunk in stream:
                arrivals.append(time.monotonic())
                text += (chunk.choices[0].delta.content or "") if chunk.choices else ""
            return text

    return agent


def messages_agent(timing: bool, arrivals: list[float]) -> Callable[..., Any]:
    """An async Anthropic ``messages.stream()`` agent noting when each event reached it."""

    async def agent(task: dict[str, Any], edges: Edges) -> str:
        sdk = anthropic.AsyncAnthropic(base_url=task["url"], api_key="t", max_retries=0)
        async with tv_anthropic.wrap(sdk, edges, stream_timing=timing) as client:
            async with client.messages.stream(
                model="claude-haiku-4-5",
                max_tokens=32,
                messages=[{"role": "user", "content": "a b"}],
            ) as stream:
                async for event in stream:
                    if event.type in RAW_EVENTS:  # not the helper's derived ``text`` events
                        arrivals.append(time.monotonic())
                message = await stream.get_final_message()
            return "".join(b.text for b in message.content if b.type == "text")

    return agent


def gaps(times: list[float]) -> list[float]:
    return [b - a for a, b in itertools.pairwise(times)]


def recorded_offsets(run: Recorded) -> list[float] | None:
    (call,) = [e for e in run.events if e.kind is EventKind.MODEL_CALL]
    offsets: list[float] | None = json.loads(call.response).get(CHUNK_OFFSETS)
    return offsets


def replayed(run: Recorded, make: Callable[..., Any], timing: bool) -> list[float]:
    """The agent's chunk gaps under replay, ``stream_timing`` as given."""
    arrivals: list[float] = []
    agent = make(timing, arrivals)
    if asyncio.iscoroutinefunction(agent):
        result = asyncio.run(areplay(run.events, agent))
    else:
        result = replay(run.events, agent)
    assert result.matched, result
    assert result.output == run.output
    return gaps(arrivals)


def unchanged(server: ProviderServer) -> tuple[int, int]:
    return len(server.requests), server.connections


def check_paced(pipeline: Pipeline, make: Callable[..., Any], url: str, events: int) -> None:
    with provider_server(chunk_delay=DELAY) as server:
        run = pipeline.record(make(True, []), {"url": server.url + url})
        assert not isinstance(run.output, Exception), run.output
        assert run.output.startswith("echo: a b")
        offsets = recorded_offsets(run)
        assert offsets is not None and len(offsets) == events
        recorded = gaps(offsets)
        # The provider paced the stream and the record kept it. Summed, not gap by gap: a
        # reader descheduled for a moment finds two chunks buffered and records one gap short.
        assert sum(recorded) >= 0.8 * DELAY * len(recorded), recorded
        before = unchanged(server)

        on = replayed(run, make, timing=True)
        # The SDK hands the agent one parsed chunk per recorded event, each after its gap.
        assert len(on) == len(recorded), (on, recorded)
        # Each chunk comes no earlier than the record says, give or take how late the SDK
        # handed the agent the first one (a bound that load cannot break).
        assert sum(on) >= 0.8 * sum(recorded), (on, recorded)
        assert all(sum(on[:k]) >= sum(recorded[:k]) - 0.5 * DELAY for k in range(1, len(on) + 1)), (
            on,
            recorded,
        )
        off = replayed(run, make, timing=False)
        assert len(off) == len(recorded)
        assert sum(off) < 0.25 * sum(recorded), (off, recorded)
        assert unchanged(server) == before  # replay opened no connection


def test_a_sync_openai_stream_replays_with_its_recorded_chunk_gaps(pipeline: Pipeline) -> None:
    # role, "echo:", "a", "b", finish
    check_paced(pipeline, chat_agent, "/v1", events=5)


def test_an_async_anthropic_stream_replays_with_its_recorded_chunk_gaps(
    pipeline: Pipeline,
) -> None:
    # message_start, content_block_start, 3 deltas, content_block_stop, message_delta, stop
    check_paced(pipeline, messages_agent, "", events=8)


def test_a_stream_recorded_without_timing_replays_at_once_even_when_asked(
    pipeline: Pipeline,
) -> None:
    with provider_server(chunk_delay=DELAY) as server:
        run = pipeline.record(chat_agent(False, []), {"url": server.url + "/v1"})
        assert run.output == "echo: a b "
        assert recorded_offsets(run) is None
        before = unchanged(server)
        on = replayed(run, chat_agent, timing=True)
        assert len(on) == 4
        assert sum(on) < 0.25 * 4 * DELAY, on
        assert unchanged(server) == before
