"""LangGraph's ToolNode runs a model's parallel tool calls in a thread pool: a sync tool per
worker thread, arriving in whatever order the scheduler picks. Each TOOL_CALL carries its
tool-call id (``tracevault.call_id``) and a call site in the agent's file (the tool's own
definition: the worker's stack holds no agent frame), and replay matches the concurrent calls
by that id, not by arrival order. The real ``langgraph`` and ``langchain-openai`` packages, the
local provider (``[parallel]``: it asks for every tool at once), the real Recorder, broker and
sequencer; one record, replayed 20 times in-process."""

from __future__ import annotations

import random
import threading
import time
import warnings
from typing import Any

from langchain_core.tools import tool as lc_tool
from langchain_openai import ChatOpenAI
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, create_react_agent, tools_condition

from tests.integrations.pipeline import Pipeline
from tracevault.callsite import CALL_ID_ATTRIBUTE, SITE_ATTRIBUTE
from tracevault.demo.provider import provider_server
from tracevault.edges import Edges
from tracevault.integrations.langgraph import chat_model, tools
from tracevault.replayer import replay
from tracevault.schemas import EventKind

REPLAYS = 20
RAN: list[str] = []  # every real run of a tool: none under replay


def _jitter() -> None:
    """Live latency that varies, so the threads finish in a different order each time."""
    deadline = time.monotonic() + random.uniform(0.0, 0.01)
    while time.monotonic() < deadline:
        threading.Event().wait(0.001)


@lc_tool
def lookup_order(city: str) -> dict[str, Any]:
    """The order shipped to a city."""
    RAN.append("lookup_order")
    _jitter()
    return {"order": 17, "city": city}


@lc_tool
def get_policy(city: str) -> str:
    """The return policy in a city."""
    RAN.append("get_policy")
    _jitter()
    return f"30 days in {city}"


@lc_tool
def check_stock(city: str) -> int:
    """Items in stock near a city."""
    RAN.append("check_stock")
    _jitter()
    return 3


TOOLS = [lookup_order, get_policy, check_stock]


def _llm(task: dict[str, Any], edges: Edges) -> Any:
    llm = ChatOpenAI(model="gpt-4o-mini", base_url=task["url"], api_key="t", max_retries=0)
    return chat_model(llm, edges)


def state_graph_agent(task: dict[str, Any], edges: Edges) -> str:
    toolset = tools(TOOLS, edges)
    bound = _llm(task, edges).bind_tools(toolset)

    def call_model(state: MessagesState) -> dict[str, Any]:
        return {"messages": [bound.invoke(state["messages"])]}

    g = StateGraph(MessagesState)
    g.add_node("model", call_model)
    g.add_node("tools", ToolNode(toolset))
    g.add_edge(START, "model")
    g.add_conditional_edges("model", tools_condition)
    g.add_edge("tools", "model")
    out = g.compile().invoke({"messages": [("user", task["question"])]})
    return str(out["messages"][-1].content)


def react_agent(task: dict[str, Any], edges: Edges) -> str:
    with warnings.catch_warnings():  # moved to langchain.agents (not installed) in 1.0
        warnings.simplefilter("ignore")
        graph = create_react_agent(_llm(task, edges), tools(TOOLS, edges))
    out = graph.invoke({"messages": [("user", task["question"])]})
    return str(out["messages"][-1].content)


def test_parallel_sync_tools_replay_every_time_matched_by_their_call_id(
    pipeline: Pipeline,
) -> None:
    for agent in (state_graph_agent, react_agent):
        with provider_server() as server:
            task = {"url": server.url + "/v1", "question": "[parallel] my order in Paris?"}
            run = pipeline.record(agent, task)
        assert not isinstance(run.output, Exception), run.output
        calls = [e for e in run.events if e.kind is EventKind.TOOL_CALL]
        assert len(calls) == 3, [e.request for e in calls]
        assert sorted(e.attributes[CALL_ID_ATTRIBUTE] for e in calls) == [
            "call_1", "call_2", "call_3",
        ]  # fmt: skip
        # the worker thread's stack has no agent frame: the site is the tool's definition
        assert {e.attributes[SITE_ATTRIBUTE].rsplit(":", 2)[0] for e in calls} == {__name__}
        RAN.clear()
        matched = sum(replay(run.events, agent, raise_on_divergence=False).matched
                      for _ in range(REPLAYS))  # fmt: skip
        assert (matched, RAN) == (REPLAYS, []), agent.__name__
