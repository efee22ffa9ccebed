"""Replay never acts: a side effect reached through a path no integration wraps (a tool given
to the framework unwrapped, a function the agent calls itself, the agent's own code after a
framework's run) cannot run under replay. It opens a connection, which replay refuses before
anything leaves the process, as a divergence naming the address and the agent's frame; the
"mail server" (the local provider, its requests counted) sees nothing. One test per
integration, with the frameworks' own packages; the real Recorder, broker and sequencer.

Pydantic AI's streaming doors (``run_stream``, ``run_stream_sync``, ``run_stream_events``,
``iter``) as well: through the integration, the
mail tool is served from the record; the door called directly, its model over a client nothing
wraps, diverges at its model request's connection, before the tool could run."""

from __future__ import annotations

import asyncio
import inspect
import json
import urllib.request
import warnings
from typing import Any

import anthropic
import openai
from agents import Agent, function_tool
from langchain_core.tools import tool as lc_tool
from langchain_openai import ChatOpenAI
from langgraph.prebuilt import create_react_agent
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from tests.integrations.pipeline import Pipeline
from tracevault.demo.provider import provider_server
from tracevault.edges import Edges
from tracevault.integrations import anthropic as tv_anthropic
from tracevault.integrations import openai as tv_openai
from tracevault.integrations.langgraph import chat_model, tools
from tracevault.integrations.openai_agents import run as agents_run
from tracevault.integrations.pydantic_ai import iter as pydantic_iter
from tracevault.integrations.pydantic_ai import run as pydantic_run
from tracevault.integrations.pydantic_ai import run_stream as pydantic_stream
from tracevault.integrations.pydantic_ai import run_stream_events as pydantic_events
from tracevault.integrations.pydantic_ai import run_stream_sync as pydantic_stream_sync
from tracevault.replayer import areplay, replay
from tracevault.schemas import EventKind

SERVER: dict[str, str] = {}  # the "mail server" the unwrapped side effect posts to


def send_email(city: str) -> str:
    """The side effect nobody wrapped: one HTTP request to the mail server per call."""
    with urllib.request.urlopen(SERVER["url"] + "/v1/models", timeout=5) as reply:
        reply.read()
    return f"mailed about {city}"


@lc_tool
def email_tool(city: str) -> str:
    """Mail the user about a city."""
    return send_email(city)


@lc_tool
def weather_tool(city: str) -> str:
    """The sky over a city."""
    return f"clear over {city}"


def langgraph_agent(task: dict[str, Any], edges: Edges) -> str:
    llm = chat_model(ChatOpenAI(model="gpt-4o-mini", base_url=task["url"] + "/v1",
                                api_key="t", max_retries=0), edges)  # fmt: skip
    with warnings.catch_warnings():  # create_react_agent moved to langchain.agents in 1.0
        warnings.simplefilter("ignore")
        # the weather tool is wrapped; the e-mail tool was given to the graph unwrapped
        graph = create_react_agent(llm, [*tools([weather_tool], edges), email_tool])
    out = graph.invoke({"messages": [("user", "[parallel] weather in Paris?")]})
    return str(out["messages"][-1].content)


def openai_agent(task: dict[str, Any], edges: Edges) -> str:
    sdk = openai.OpenAI(base_url=task["url"] + "/v1", api_key="t", max_retries=0)
    spec = {"type": "function", "function": {"name": "send_email", "parameters": {}}}
    with tv_openai.wrap(sdk, edges) as client:
        asked = client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "mail me"}], tools=[spec]
        )
        call = asked.choices[0].message.tool_calls[0]
        return send_email(json.loads(call.function.arguments)["city"])  # not edges.tool


async def anthropic_agent(task: dict[str, Any], edges: Edges) -> str:
    sdk = anthropic.AsyncAnthropic(base_url=task["url"], api_key="t", max_retries=0)
    spec = {"name": "send_email", "input_schema": {"type": "object"}}
    async with tv_anthropic.wrap(sdk, edges) as client:
        asked = await client.messages.create(
            model="claude-haiku-4-5", max_tokens=64, tools=[spec],  # type: ignore[list-item]
            messages=[{"role": "user", "content": "mail me"}],
        )  # fmt: skip
        use = next(b for b in asked.content if b.type == "tool_use")
        return await asyncio.to_thread(send_email, use.input["city"])  # type: ignore[index]


@function_tool
def agents_weather(city: str) -> str:
    """The sky over a city."""
    return f"clear over {city}"


async def agents_sdk_agent(task: dict[str, Any], edges: Edges) -> str:
    agent = Agent(name="weather", instructions="Answer.", model="gpt-4o-mini",
                  tools=[agents_weather])  # fmt: skip
    async with openai.AsyncOpenAI(base_url=task["url"] + "/v1", api_key="t") as client:
        result = await agents_run(agent, "weather in Paris?", edges, client=client)
    return send_email(str(result.final_output))  # the agent's own code, after the run


weather = PydanticAgent("openai:gpt-4o-mini", instructions="Answer.", defer_model_check=True)


@weather.tool_plain
def pydantic_weather(city: str) -> str:
    """The sky over a city."""
    return f"clear over {city}"


async def pydantic_ai_agent(task: dict[str, Any], edges: Edges) -> str:
    async with openai.AsyncOpenAI(base_url=task["url"] + "/v1", api_key="t") as client:
        result = await pydantic_run(weather, "weather in Paris?", edges, client=client)
    return send_email(str(result.output))  # the agent's own code, after the run


AGENTS = [langgraph_agent, openai_agent, anthropic_agent, agents_sdk_agent, pydantic_ai_agent]


def test_no_integration_replays_a_side_effect_it_does_not_wrap(pipeline: Pipeline) -> None:
    for agent in AGENTS:
        with provider_server() as server:
            SERVER["url"] = server.url
            run = pipeline.record(agent, {"url": server.url})
            assert not isinstance(run.output, Exception), (agent.__name__, run.output)
            mails = [r for r in server.requests if r.path == "/v1/models"]
            assert mails, agent.__name__  # live, the unwrapped side effect ran
            before = len(server.requests)
            if inspect.iscoroutinefunction(agent):
                result = asyncio.run(areplay(run.events, agent, raise_on_divergence=False))
            else:
                result = replay(run.events, agent, raise_on_divergence=False)
            assert len(server.requests) == before, agent.__name__  # nothing sent again
            assert not result.matched and result.divergence is not None, agent.__name__
            div = result.divergence
            assert div.actual == "CONNECT", (agent.__name__, div)
            assert f"from {__name__}:send_email:" in div.reason, div.reason


mailer = PydanticAgent("openai:gpt-4o-mini", instructions="Mail the user.", defer_model_check=True)


@mailer.tool_plain
def pydantic_mail(city: str) -> str:
    """Mail the user about a city (changes the world)."""
    return send_email(city)


def _mails(server: Any) -> int:
    return sum(r.path == "/v1/models" for r in server.requests)


async def pydantic_stream_agent(task: dict[str, Any], edges: Edges) -> str:
    async with (
        openai.AsyncOpenAI(base_url=task["url"] + "/v1", api_key="t") as client,
        pydantic_stream(mailer, "mail me", edges, client=client) as result,
    ):
        return await result.get_output()


async def pydantic_iter_agent(task: dict[str, Any], edges: Edges) -> str:
    async with (
        openai.AsyncOpenAI(base_url=task["url"] + "/v1", api_key="t") as client,
        pydantic_iter(mailer, "mail me", edges, client=client) as agent_run,
    ):
        async for _node in agent_run:
            pass
    assert agent_run.result is not None
    return str(agent_run.result.output)


def _close_sync_loop(client: openai.AsyncOpenAI) -> None:
    """``run_stream_sync`` ran on an event loop Pydantic AI made for this thread and left
    open: close the client there, then the loop."""
    loop = asyncio.get_event_loop()
    loop.run_until_complete(client.close())
    loop.close()
    asyncio.set_event_loop(None)


def pydantic_stream_sync_agent(task: dict[str, Any], edges: Edges) -> str:
    client = openai.AsyncOpenAI(base_url=task["url"] + "/v1", api_key="t")
    try:
        with pydantic_stream_sync(mailer, "mail me", edges, client=client) as result:
            return str(result.get_output())
    finally:
        _close_sync_loop(client)


async def pydantic_events_agent(task: dict[str, Any], edges: Edges) -> str:
    async with (
        openai.AsyncOpenAI(base_url=task["url"] + "/v1", api_key="t") as client,
        pydantic_events(mailer, "mail me", edges, client=client) as events,
    ):
        kinds = [type(event).__name__ async for event in events]
    return ",".join(sorted(set(kinds)))


def _replay(events: Any, agent: Any) -> Any:
    if inspect.iscoroutinefunction(agent):
        return asyncio.run(areplay(events, agent, raise_on_divergence=False))
    return replay(events, agent, raise_on_divergence=False)


STREAMED = (pydantic_stream_agent, pydantic_stream_sync_agent, pydantic_events_agent,
            pydantic_iter_agent)  # fmt: skip


def test_pydantic_ai_streaming_doors_serve_their_mail_tool_from_the_record(
    pipeline: Pipeline,
) -> None:
    for agent in STREAMED:
        with provider_server() as server:  # up during the replay: anything sent would arrive
            SERVER["url"] = server.url
            run = pipeline.record(agent, {"url": server.url})
            assert not isinstance(run.output, Exception), (agent.__name__, run.output)
            assert _mails(server) == 1, agent.__name__  # live, the tool mailed once
            tools = [json.loads(e.request)["tool"] for e in run.events
                     if e.kind is EventKind.TOOL_CALL]  # fmt: skip
            assert tools == ["pydantic_mail"], agent.__name__
            before = len(server.requests)
            result = _replay(run.events, agent)
            assert len(server.requests) == before, agent.__name__  # nothing sent again
            assert result.matched and result.output == run.output, (agent.__name__, result)


async def bare_stream_agent(task: dict[str, Any], edges: Edges) -> str:
    """``agent.run_stream`` called directly: its model over a client nothing wraps."""
    async with openai.AsyncOpenAI(base_url=task["url"] + "/v1", api_key="t", max_retries=0) as c:
        model = OpenAIChatModel("gpt-4o-mini", provider=OpenAIProvider(openai_client=c))
        async with mailer.run_stream("mail me", model=model) as result:
            return await result.get_output()


async def bare_iter_agent(task: dict[str, Any], edges: Edges) -> str:
    """``agent.iter`` called directly, as above."""
    async with openai.AsyncOpenAI(base_url=task["url"] + "/v1", api_key="t", max_retries=0) as c:
        model = OpenAIChatModel("gpt-4o-mini", provider=OpenAIProvider(openai_client=c))
        async with mailer.iter("mail me", model=model) as agent_run:
            async for _node in agent_run:
                pass
    assert agent_run.result is not None
    return str(agent_run.result.output)


def bare_stream_sync_agent(task: dict[str, Any], edges: Edges) -> str:
    """``agent.run_stream_sync`` called directly, as above."""
    c = openai.AsyncOpenAI(base_url=task["url"] + "/v1", api_key="t", max_retries=0)
    model = OpenAIChatModel("gpt-4o-mini", provider=OpenAIProvider(openai_client=c))
    try:
        with mailer.run_stream_sync("mail me", model=model) as result:
            return str(result.get_output())
    finally:
        _close_sync_loop(c)


async def bare_events_agent(task: dict[str, Any], edges: Edges) -> str:
    """``agent.run_stream_events`` called directly, as above."""
    async with openai.AsyncOpenAI(base_url=task["url"] + "/v1", api_key="t", max_retries=0) as c:
        model = OpenAIChatModel("gpt-4o-mini", provider=OpenAIProvider(openai_client=c))
        async with mailer.run_stream_events("mail me", model=model) as events:
            kinds = [type(event).__name__ async for event in events]
    return ",".join(sorted(set(kinds)))


def test_pydantic_ai_streaming_doors_called_unwrapped_diverge_before_their_tool(
    pipeline: Pipeline,
) -> None:
    for agent in (bare_stream_agent, bare_stream_sync_agent, bare_events_agent, bare_iter_agent):
        with provider_server() as server:
            SERVER["url"] = server.url
            run = pipeline.record(agent, {"url": server.url})
            assert not isinstance(run.output, Exception), (agent.__name__, run.output)
            assert _mails(server) == 1, agent.__name__  # live, unrecorded, the tool mailed
            before = len(server.requests)
            result = _replay(run.events, agent)
            assert len(server.requests) == before, agent.__name__  # no model call, no mail
            assert not result.matched and result.divergence is not None, agent.__name__
            div = result.divergence
            assert div.actual == "CONNECT", (agent.__name__, div)
            port = int(server.url.rsplit(":", 1)[1])
            assert f"connection to ('127.0.0.1', {port})" in div.reason, div.reason
            # never the harness line that ran the event loop (this test's asyncio.run)
            assert f"{__name__}:test_" not in div.reason, div.reason
