"""Pydantic AI recorded with one changed line (``await agent.run(...)`` becomes ``await
run(agent, ..., edges, client=...)``): an agent as Pydantic AI's docs write one (``Agent``,
``@agent.tool_plain`` and ``@agent.tool`` tools, one of them sending e-mail, the model/tool
loop, parallel tool calls) over the real ``pydantic-ai`` and ``openai`` packages to the local
provider, the real Recorder, broker and sequencer; replayed 50 times with the provider stopped:
matched, no socket, no e-mail sent again. A changed prompt and a changed tool result diverge at
the model call that saw them, with the JSON path, at a line of this file."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from typing import Any

import openai
import pytest
from pydantic_ai import Agent

from tests.integrations.offline import OFFLINE_REPLAYS, replay_offline
from tests.integrations.pipeline import Pipeline
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
from tracevault.errors import ConfigError, ReplayDivergence
from tracevault.integrations.pydantic_ai import run, run_sync
from tracevault.replayer import areplay
from tracevault.schemas import EventKind


async def agent(task: dict[str, Any], edges: Edges) -> str:
    async with openai.AsyncOpenAI(base_url=task["url"], api_key="t", max_retries=0) as client:
        result = await run(support, task["question"], edges, client=client,
                           deps=Mailer("desk@example.org"))  # fmt: skip
    return str(result.output)


def sync_agent(task: dict[str, Any], edges: Edges) -> str:
    client = openai.AsyncOpenAI(base_url=task["url"], api_key="t", max_retries=0)
    result = run_sync(support, task["question"], edges, client=client,
                      deps=Mailer("desk@example.org"))  # fmt: skip
    # run_sync leaves its event loop open for the next call: close the client there, then it
    loop = asyncio.get_event_loop()
    loop.run_until_complete(client.close())
    loop.close()
    asyncio.set_event_loop(None)
    return str(result.output)


@pytest.fixture(scope="module")
def recorded(pipeline: Pipeline) -> Any:
    SENT.clear()
    with provider_server() as server:
        rec = pipeline.record(agent, {"url": server.url + "/v1", "question": QUESTION})
        assert len(server.requests) == 2, rec.output
    assert SENT == ["Paris"]
    return rec


def test_an_agent_with_parallel_tools_records_its_loop(recorded: Any) -> None:
    assert recorded.output == f"echo: {MAILED}", recorded.output
    kinds = [e.kind.value for e in recorded.events]
    assert kinds == ["RUN_STARTED", "MODEL_CALL", "TOOL_CALL", "TOOL_CALL", "MODEL_CALL",
                     "RUN_FINISHED"]  # fmt: skip
    tools = sorted(json.loads(e.request)["tool"] for e in recorded.events[2:4])
    assert tools == ["get_weather", "send_email"]
    # each tool call under its tool-call id, at its tool's own line (Pydantic AI's task)
    ids = sorted(e.attributes[CALL_ID_ATTRIBUTE] for e in recorded.events[2:4])
    assert ids == ["call_1", "call_2"]
    assert all(at_its_tool(e) for e in recorded.events[2:4]), recorded.events[2:4]
    for ev in (recorded.events[1], recorded.events[4]):  # at the agent's run() line
        assert ev.attributes[SITE_ATTRIBUTE].startswith(f"{__name__}:agent:"), ev.attributes
    assert recorded.events[1].model == "gpt-4o-mini-2024-07-18"


def test_replayed_50_times_with_the_provider_stopped(recorded: Any) -> None:
    SENT.clear()  # the provider's server is stopped: its port is closed
    got = replay_offline(recorded.events, agent, OFFLINE_REPLAYS, recorded.output)
    assert (got.matched, got.connects, SENT) == (OFFLINE_REPLAYS, (), [])


def test_run_sync_records_and_replays_offline(pipeline: Pipeline) -> None:
    SENT.clear()
    with provider_server() as server:
        rec = pipeline.record(sync_agent, {"url": server.url + "/v1", "question": QUESTION})
        live = server.connections
    assert rec.output == f"echo: {MAILED}", rec.output
    got = replay_offline(rec.events, sync_agent, 5, rec.output)
    assert (got.matched, got.connects, SENT) == (5, (), ["Paris"])
    assert server.connections == live


def test_a_changed_prompt_diverges_at_the_first_model_call(recorded: Any) -> None:
    edited = support.override(instructions="Answer tersely; use the tools.")

    async def changed(task: dict[str, Any], edges: Edges) -> str:
        with edited:
            return await agent(task, edges)

    with pytest.raises(ReplayDivergence) as info:
        asyncio.run(areplay(recorded.events, changed))
    first = next(e for e in recorded.events if e.kind is EventKind.MODEL_CALL)
    assert info.value.seq == first.seq
    assert any(d.startswith("$.request.params.messages[0].content: expected")
               for d in info.value.diff), info.value.diff  # fmt: skip
    assert f"{__name__}:agent:" in str(info.value)


def test_a_changed_tool_result_diverges_at_the_model_call_that_saw_it(recorded: Any) -> None:
    """The e-mail tool's recorded result edited: the answering model call is asked otherwise."""
    events = list(recorded.events)
    mail = next(i for i, e in enumerate(events)
                if e.kind is EventKind.TOOL_CALL and b"send_email" in e.request)  # fmt: skip
    events[mail] = dataclasses.replace(events[mail], response=b'"bounced"')
    with pytest.raises(ReplayDivergence) as info:
        asyncio.run(areplay(events, agent))
    answer = [e for e in events if e.kind is EventKind.MODEL_CALL][1]
    assert info.value.seq == answer.seq
    assert any('got "bounced"' in d for d in info.value.diff), info.value.diff
    assert f"{__name__}:agent:" in str(info.value)


def test_a_model_other_than_openai_chat_is_refused() -> None:
    other = Agent("anthropic:claude-haiku-4-5", defer_model_check=True)
    client = openai.AsyncOpenAI(base_url="http://127.0.0.1:9/v1", api_key="t")
    with pytest.raises(ConfigError, match="whose calls tracevault cannot record"):
        asyncio.run(run(other, "hi", object(), client=client))  # type: ignore[arg-type]
