"""The MCP adapter: a real MCP server (``tests/integrations/mcp_weather.py``, spawned over stdio
by the real ``mcp`` client), recorded through the real Recorder, broker and sequencer; replayed
from the topic with no server: the opener is never called, so no process starts."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from tests.integrations.offline import OFFLINE_REPLAYS, replay_offline
from tests.integrations.pipeline import Pipeline
from tracevault.edges import Edges
from tracevault.errors import ConfigError, ReplayDivergence
from tracevault.integrations.mcp_client import RecordedSession
from tracevault.replayer import areplay
from tracevault.schemas import EventKind

SERVER = Path(__file__).with_name("mcp_weather.py")
opened: list[str] = []


@contextlib.asynccontextmanager
async def weather_server(log: str) -> AsyncIterator[ClientSession]:
    opened.append(log)
    params = StdioServerParameters(
        command=sys.executable, args=[str(SERVER)], env={"MCP_WEATHER_LOG": log}
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        yield session


async def agent(task: dict[str, Any], edges: Edges) -> dict[str, Any]:
    """An MCP client agent: it lists the tools, calls one, reads a resource and a prompt."""
    async with RecordedSession(
        edges, "weather", open=lambda: weather_server(task["log"])
    ) as session:
        info = await session.initialize()
        tools = [t.name for t in (await session.list_tools()).tools]
        result = await session.call_tool(tools[0], {"city": task["city"]})
        units = await session.read_resource("config://units")
        prompt = await session.get_prompt("ask", {"city": task["city"]})
    return {
        "server": info.server_info.name,
        "tools": tools,
        "answer": result.content[0].text,  # type: ignore[union-attr]
        "units": units.contents[0].text,  # type: ignore[union-attr]
        "prompt": prompt.messages[0].content.text,  # type: ignore[union-attr]
    }


def calls_made(log: Path) -> list[str]:
    return log.read_text().split() if log.exists() else []


def test_mcp_calls_record_and_replay_without_the_server(pipeline: Pipeline, tmp_path: Path) -> None:
    log = tmp_path / "calls.log"
    task = {"log": str(log), "city": "Paris"}
    opened.clear()
    run = pipeline.record(agent, task)
    assert run.output == {
        "server": "weather",
        "tools": ["forecast"],
        "answer": "sunny in Paris",
        "units": "celsius",
        "prompt": "What is the weather in Paris?",
    }, run.output
    assert opened == [str(log)] and calls_made(log) == ["Paris"]

    crossings = [(e.kind, json.loads(e.request)) for e in run.events[1:-1]]
    assert crossings == [
        (EventKind.EXTERNAL_STATE, {"name": "mcp:weather initialize"}),
        (EventKind.EXTERNAL_STATE, {"name": "mcp:weather list_tools"}),
        (EventKind.TOOL_CALL, {"tool": "mcp:weather/forecast", "args": {"city": "Paris"}}),
        (EventKind.EXTERNAL_STATE, {"name": "mcp:weather resource config://units"}),
        (EventKind.EXTERNAL_STATE, {"name": 'mcp:weather prompt ask {"city":"Paris"}'}),
    ]
    tool = json.loads(run.events[3].response)
    assert tool["content"] == [{"type": "text", "text": "sunny in Paris"}]
    assert tool["isError"] is False

    # No server: replay never opens the session, so no process starts and the tool never runs.
    opened.clear()
    got = replay_offline(run.events, agent, OFFLINE_REPLAYS, run.output)
    assert (got.matched, got.connects) == (OFFLINE_REPLAYS, ())
    assert opened == [] and calls_made(log) == ["Paris"]


def test_a_changed_tool_argument_diverges_at_the_call_tool(
    pipeline: Pipeline, tmp_path: Path
) -> None:
    task = {"log": str(tmp_path / "calls.log"), "city": "Paris"}
    run = pipeline.record(agent, task)
    tool_seq = next(e.seq for e in run.events if e.kind is EventKind.TOOL_CALL)
    opened.clear()
    with pytest.raises(ReplayDivergence) as info:
        asyncio.run(areplay(run.events, lambda t, e: agent({**t, "city": "Lyon"}, e)))
    assert info.value.seq == tool_seq
    assert any("$.request.args.city" in d for d in info.value.diff), info.value.diff
    assert opened == []


def test_an_unrecorded_session_method_is_refused_by_name() -> None:
    session = RecordedSession(object(), "weather", open=lambda: weather_server("-"))  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"ClientSession\.send_ping is not recorded"):
        session.send_ping  # noqa: B018
    with pytest.raises(ConfigError, match=r"server=.*without '/'"):
        RecordedSession(object(), "a/b", open=lambda: weather_server("-"))  # type: ignore[arg-type]
