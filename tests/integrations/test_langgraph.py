"""The LangGraph / LangChain integration with the real ``langgraph`` and ``langchain-openai``
packages: a StateGraph agent (a model node, a ``ToolNode``) whose ``ChatOpenAI`` talks HTTP to
a local provider server, recorded through the real Recorder, broker and sequencer, and replayed
from the sealed topic with the server stopped (and, up, with its connections counted)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from langchain_core.tools import tool as lc_tool
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from tests.integrations.offline import OFFLINE_REPLAYS, replay_offline
from tests.integrations.pipeline import Pipeline
from tracevault.demo.provider import provider_server
from tracevault.edges import Edges
from tracevault.errors import ConfigError, PayloadError, ReplayDivergence
from tracevault.integrations.langgraph import (
    chat_model,
    checkpointer,
    idempotency_key,
    tools,
)
from tracevault.replayer import areplay, replay
from tracevault.schemas import EventKind

SENT: list[tuple[str, str | None]] = []  # what the side-effecting tool did, live


@lc_tool
def get_weather(city: str) -> dict[str, Any]:
    """The weather in a city."""
    return {"city": city, "sky": "clear", "celsius": 21}


@lc_tool
def notify(city: str) -> str:
    """Tell the user's phone about a city (changes the world)."""
    SENT.append((city, idempotency_key()))
    return f"sent {city}"


def graph_builder(task: dict[str, Any], edges: Edges) -> StateGraph[Any]:
    """A LangGraph agent as people write it; the two wrap lines are the only tracevault ones."""
    llm = ChatOpenAI(
        model=task.get("model", "gpt-4o-mini"),
        base_url=task["url"],
        api_key="test",
        max_retries=0,
        seed=42,
        temperature=0,
    )
    model = chat_model(llm, edges)
    given = task.get("tools_first", [get_weather])
    toolset = tools(given, edges, side_effects={"notify"} & {t.name for t in given})
    bound = model.bind_tools(toolset)

    def call_model(state: MessagesState) -> dict[str, Any]:
        return {"messages": [bound.invoke(state["messages"])]}

    async def acall_model(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await bound.ainvoke(state["messages"])]}

    g = StateGraph(MessagesState)
    g.add_node("model", acall_model if task.get("async") else call_model)
    g.add_node("tools", ToolNode(toolset))
    g.add_edge(START, "model")
    g.add_conditional_edges("model", tools_condition)
    g.add_edge("tools", "model")
    return g


def graph(task: dict[str, Any], edges: Edges) -> Any:
    return graph_builder(task, edges).compile()


def agent(task: dict[str, Any], edges: Edges) -> str:
    out = graph(task, edges).invoke({"messages": [("user", task["question"])]})
    return str(out["messages"][-1].content)


async def aagent(task: dict[str, Any], edges: Edges) -> str:
    out = await graph({**task, "async": True}, edges).ainvoke(
        {"messages": [("user", task["question"])]}
    )
    return str(out["messages"][-1].content)


def kinds(events: list[Any]) -> list[EventKind]:
    return [e.kind for e in events]


CROSSINGS = [
    EventKind.RUN_STARTED,
    EventKind.MODEL_CALL,
    EventKind.TOOL_CALL,
    EventKind.MODEL_CALL,
    EventKind.RUN_FINISHED,
]


def test_a_langgraph_agent_records_and_replays_with_the_provider_stopped(
    pipeline: Pipeline,
) -> None:
    with provider_server() as server:
        task = {"url": server.url + "/v1", "question": "weather in Paris?"}
        run = pipeline.record(agent, task)
        assert not isinstance(run.output, Exception), run.output
        live_requests, live_connections = len(server.requests), server.connections
        # Replay with the server up: served from the record, no connection opened.
        again = replay(run.events, agent)
        assert again.matched and again.output == run.output
        assert (len(server.requests), server.connections) == (live_requests, live_connections)
    assert run.output == 'echo: {"celsius": 21, "city": "Paris", "sky": "clear"}'
    assert live_requests == 2
    assert kinds(run.events) == CROSSINGS

    first, tool_event, second = run.events[1:4]
    assert first.model == second.model == "gpt-4o-mini-2024-07-18"  # the build that answered
    assert first.seed == 42
    request = json.loads(first.request)
    assert request["framework"] == "langchain" and request["model"] == "gpt-4o-mini"
    assert request["messages"] == [{"role": "human", "content": "weather in Paris?"}]
    assert request["options"]["tools"][0]["function"]["name"] == "get_weather"
    assert json.loads(tool_event.request) == {"tool": "get_weather", "args": {"city": "Paris"}}
    assert json.loads(tool_event.response) == {"city": "Paris", "sky": "clear", "celsius": 21}
    asked = json.loads(second.request)["messages"]
    assert [m["role"] for m in asked] == ["human", "ai", "tool"]
    assert asked[1]["tool_calls"] == [
        {"id": "call_1", "name": "get_weather", "args": {"city": "Paris"}}
    ]
    # The call site is the agent's model node, not LangChain's plumbing.
    assert "graph_builder.<locals>.call_model" in first.attributes["tracevault.site"]

    # Server gone: the port is closed, and replay needs nothing from it, 50 times.
    got = replay_offline(run.events, agent, OFFLINE_REPLAYS, run.output)
    assert (got.matched, got.connects) == (OFFLINE_REPLAYS, ())


def test_ainvoke_records_and_replays(pipeline: Pipeline) -> None:
    with provider_server() as server:
        task = {"url": server.url + "/v1", "question": "weather in Paris?"}
        run = pipeline.record(aagent, task)
        connections = server.connections
        again = asyncio.run(areplay(run.events, aagent))
        assert again.matched and again.output == run.output
        assert server.connections == connections
    assert kinds(run.events) == CROSSINGS
    got = replay_offline(run.events, aagent, OFFLINE_REPLAYS, run.output)
    assert (got.matched, got.connects) == (OFFLINE_REPLAYS, ())


def test_a_changed_prompt_diverges_at_the_model_call_with_its_json_path(
    pipeline: Pipeline,
) -> None:
    with provider_server() as server:
        task = {"url": server.url + "/v1", "question": "weather in Paris?"}
        run = pipeline.record(agent, task)

    def edited(task: dict[str, Any], edges: Edges) -> str:
        return agent({**task, "question": "weather in Lyon?"}, edges)

    with pytest.raises(ReplayDivergence) as info:
        replay(run.events, edited)
    assert info.value.seq == 1
    assert any("$.request.messages[0].content" in d for d in info.value.diff), info.value.diff
    assert len(server.requests) == 2

    # A tool's new description is a change in what the model was offered, at the same seq.
    @lc_tool
    def get_weather(city: str) -> dict[str, Any]:
        """The weather in a city, in Fahrenheit."""
        return {}

    with pytest.raises(ReplayDivergence) as info:
        replay(run.events, lambda t, e: agent({**t, "tools_first": [get_weather]}, e))
    assert info.value.seq == 1
    assert any("$.request.options.tools[0].function.description" in d for d in info.value.diff)


def test_a_side_effecting_tool_gets_an_idempotency_key_and_is_not_run_under_replay(
    pipeline: Pipeline,
) -> None:
    SENT.clear()
    with provider_server() as server:
        task = {"url": server.url + "/v1", "question": "tell me", "tools_first": [notify]}

        def with_notify(task: dict[str, Any], edges: Edges) -> str:
            return agent({**task, "tools_first": [notify]}, edges)

        run = pipeline.record(with_notify, {k: v for k, v in task.items() if k != "tools_first"})
    assert not isinstance(run.output, Exception), run.output
    call = next(e for e in run.events if e.kind is EventKind.TOOL_CALL)
    assert call.idempotency_key and [("Paris", call.idempotency_key)] == SENT
    result = replay(run.events, with_notify)
    assert result.matched and [("Paris", call.idempotency_key)] == SENT  # not sent again


def test_an_alias_the_provider_answers_with_is_refused_unless_allowed(pipeline: Pipeline) -> None:
    with provider_server() as server:
        task = {"url": server.url + "/v1", "question": "hi", "model": "gpt-x-latest"}
        refused = pipeline.record(agent, task)
        allowed = pipeline.record(agent, task, model_allow=["gpt-x-latest"])
    assert isinstance(refused.output, PayloadError)
    assert "gpt-x-latest" in str(refused.output)
    assert allowed.events[1].model == "gpt-x-latest"
    assert replay(allowed.events, agent).matched


SAVERS: dict[str, InMemorySaver] = {}


def conversation(task: dict[str, Any], edges: Edges) -> str:
    """One turn of a conversation kept by LangGraph's checkpointer on a thread."""
    task = {**task, "async": False}
    saver = checkpointer(SAVERS[task["saver"]], edges)
    app = graph_builder(task, edges).compile(checkpointer=saver)
    config: Any = {"configurable": {"thread_id": task["thread"]}}
    out = app.invoke({"messages": [("user", task["question"])]}, config)
    return str(out["messages"][-1].content)


def test_the_checkpoint_a_graph_resumes_from_is_recorded_state(pipeline: Pipeline) -> None:
    SAVERS["live"] = InMemorySaver()
    with provider_server() as server:
        base = {"url": server.url + "/v1", "saver": "live", "thread": "t-1"}
        pipeline.record(conversation, {**base, "question": "weather in Paris?"})
        second = pipeline.record(conversation, {**base, "question": "and in Lyon?"})
    assert not isinstance(second.output, Exception), second.output
    read = second.events[1]
    assert read.kind is EventKind.EXTERNAL_STATE
    assert json.loads(read.request) == {"name": "langgraph checkpoint t-1"}
    model = next(e for e in second.events if e.kind is EventKind.MODEL_CALL)
    asked = [m["content"] for m in json.loads(model.request)["messages"] if m["role"] == "human"]
    assert asked == ["weather in Paris?", "and in Lyon?"]  # the first turn, from the checkpoint

    # Replay in a process whose saver has never seen the thread: the checkpoint is served, and
    # nothing is written to the saver.
    SAVERS["live"] = fresh = InMemorySaver()
    result = replay(second.events, conversation)
    assert result.matched and result.output == second.output
    assert fresh.get_tuple({"configurable": {"thread_id": "t-1"}}) is None


@lc_tool
def opaque(city: str) -> Any:
    """Answers with something that is not JSON."""
    return object()


def test_bad_wiring_and_a_result_that_is_not_json_are_refused_by_name(pipeline: Pipeline) -> None:
    with pytest.raises(ConfigError, match="BaseChatModel"):
        chat_model(get_weather, None)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="BaseTool"):
        tools([len], None)  # type: ignore[list-item]
    with pytest.raises(ConfigError, match="'nope'"):
        tools([get_weather], None, side_effects={"nope"})  # type: ignore[arg-type]

    def with_opaque(task: dict[str, Any], edges: Edges) -> str:
        return agent({**task, "tools_first": [opaque]}, edges)

    with provider_server() as server:
        run = pipeline.record(with_opaque, {"url": server.url + "/v1", "question": "?"})
    assert isinstance(run.output, PayloadError), run.output
    assert "$.response" in str(run.output)
    call = next(e for e in run.events if e.kind is EventKind.TOOL_CALL)
    assert call.error is not None and "PayloadError" in str(call.error)  # recorded, seq kept


async def aconversation(task: dict[str, Any], edges: Edges) -> dict[str, Any]:
    """``conversation`` awaited: the checkpoint is read with ``aget_tuple``, history with
    ``aget_state_history`` (the saver's ``alist``)."""
    saver = checkpointer(SAVERS[task["saver"]], edges)
    app = graph_builder({**task, "async": True}, edges).compile(checkpointer=saver)
    config: Any = {"configurable": {"thread_id": task["thread"]}}
    out = await app.ainvoke({"messages": [("user", task["question"])]}, config)
    steps = [s.metadata["step"] async for s in app.aget_state_history(config, limit=3)]
    return {"answer": str(out["messages"][-1].content), "steps": steps}


def test_ainvoke_with_a_checkpointer_records_the_async_reads(pipeline: Pipeline) -> None:
    SAVERS["alive"] = InMemorySaver()
    with provider_server() as server:
        base = {"url": server.url + "/v1", "saver": "alive", "thread": "t-2"}
        # The first turn sync: langchain-openai caches its async HTTP client across event
        # loops, so a second asyncio.run in one process would find it bound to a closed one.
        pipeline.record(conversation, {**base, "question": "weather in Paris?"})
        second = pipeline.record(aconversation, {**base, "question": "and in Lyon?"})
    assert not isinstance(second.output, Exception), second.output
    reads = [
        json.loads(e.request)["name"] for e in second.events if e.kind is EventKind.EXTERNAL_STATE
    ]
    assert reads[0] == "langgraph checkpoint t-2"
    assert reads[-1].startswith("langgraph checkpoint t-2 list ")
    assert len(second.output["steps"]) == 3

    SAVERS["alive"] = InMemorySaver()
    result = asyncio.run(areplay(second.events, aconversation))
    assert result.matched and result.output == second.output
