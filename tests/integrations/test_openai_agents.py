"""The OpenAI Agents SDK adapter: a real ``Runner.run`` (function tool, handoff) over the real
``openai`` SDK to the local provider, recorded through the real Recorder, broker and sequencer;
replayed from the topic with the provider stopped and no connection opened."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import openai
import pytest
from agents import Agent, function_tool, handoff
from agents.extensions import handoff_filters

from tests.integrations.offline import OFFLINE_REPLAYS, replay_offline
from tests.integrations.pipeline import Pipeline
from tests.replayer.pipeline import wait_sealed
from tracevault.callsite import SITE_ATTRIBUTE
from tracevault.demo.provider import provider_server
from tracevault.edges import Edges
from tracevault.errors import ConfigError, ReplayDivergence
from tracevault.integrations.openai_agents import run
from tracevault.links import PARENT_RUN, PARENT_SEQ, SUBAGENT_RUN
from tracevault.replayer import areplay, load_run, verify
from tracevault.schemas import EventKind

looked_up: list[str] = []


@function_tool
def get_weather(city: str) -> str:
    """The sky over a city."""
    looked_up.append(city)
    return f"clear over {city}, 21C"


weather_agent = Agent(
    name="weather_agent",
    instructions="Answer with the weather; call get_weather.",
    model="gpt-4o-mini",
    tools=[get_weather],
)
# The handoff drops the triage agent's tool call from the history the weather agent is handed.
triage = Agent(
    name="triage",
    instructions="Hand weather questions to the weather agent.",
    model="gpt-4o-mini",
    handoffs=[handoff(weather_agent, input_filter=handoff_filters.remove_all_tools)],
)


async def agent(task: dict[str, Any], edges: Edges) -> str:
    async with openai.AsyncOpenAI(base_url=task["url"], api_key="test", max_retries=0) as client:
        result = await run(
            triage, task["question"], edges, client=client, use_responses=task["responses"]
        )
    return str(result.final_output)


def kinds(events: list[Any]) -> list[str]:
    return [e.kind.value for e in events]


@pytest.mark.parametrize("responses", [False, True], ids=["chat-completions", "responses"])
def test_a_handoff_and_a_function_tool_record_and_replay_without_the_provider(
    pipeline: Pipeline, responses: bool
) -> None:
    looked_up.clear()
    with provider_server() as server:
        task: dict[str, Any] = {"url": server.url + "/v1", "question": "weather in Paris?"}
        task["responses"] = responses
        run_ = pipeline.record(agent, task)
        live_requests, live_connections = len(server.requests), server.connections
    assert run_.output == "echo: clear over Paris, 21C", run_.output
    assert looked_up == ["Paris"]
    assert live_requests == 3  # triage, then the weather agent twice (tool, answer)

    # The parent: its model call asked for the handoff, which is a linked sub-agent crossing.
    parent = run_.events
    assert kinds(parent) == ["RUN_STARTED", "MODEL_CALL", "TOOL_CALL", "RUN_FINISHED"]
    asked = json.loads(parent[1].response)["asked_tools"]
    assert asked == ['transfer_to_weather_agent({"city": "Paris"})']
    sub = parent[2]
    assert json.loads(sub.request)["tool"] == "subagent:weather_agent"
    assert json.loads(sub.response) == run_.output
    child_id = sub.attributes[SUBAGENT_RUN]

    # The child: the weather agent's model calls and its function tool, linked back.
    wait_sealed(pipeline.settings, child_id)
    child = list(
        verify(load_run(pipeline.settings, child_id, source="topic"), require_finished=True).events
    )
    assert kinds(child) == [
        "RUN_STARTED",
        "MODEL_CALL",
        "TOOL_CALL",
        "MODEL_CALL",
        "RUN_FINISHED",
    ]
    assert child[0].attributes[PARENT_RUN] == run_.run_id
    assert child[0].attributes[PARENT_SEQ] == str(sub.seq)
    assert json.loads(child[2].request) == {"tool": "get_weather", "args": {"city": "Paris"}}
    assert json.loads(child[2].response) == "clear over Paris, 21C"
    assert child[1].model == "gpt-4o-mini-2024-07-18"
    # every call, the first turn's included, is sited in this file, not in the SDK's runner
    for ev in [*parent[1:-1], *child[1:-1]]:
        assert ev.attributes[SITE_ATTRIBUTE].startswith(f"{__name__}:"), (ev.kind, ev.attributes)

    async def weather_child(history: Any, edges: Edges) -> Any:
        async with openai.AsyncOpenAI(base_url=task["url"], api_key="t", max_retries=0) as client:
            got = await run(weather_agent, history, edges, client=client, use_responses=responses)
        return got.final_output

    # Provider stopped: the parent and the child replay from the topic 50 times each, no
    # socket opened at all (not the provider, not a trace exporter)
    looked_up.clear()
    result = replay_offline(parent, agent, OFFLINE_REPLAYS, run_.output)
    again = replay_offline(child, weather_child, OFFLINE_REPLAYS, json.loads(sub.response))
    assert (result.matched, result.connects) == (OFFLINE_REPLAYS, ())
    assert (again.matched, again.connects) == (OFFLINE_REPLAYS, ())
    assert looked_up == []  # the tool was served from the record
    assert (len(server.requests), server.connections) == (live_requests, live_connections)


def test_changed_instructions_diverge_at_the_agents_model_call(pipeline: Pipeline) -> None:
    with provider_server() as server:
        task = {"url": server.url + "/v1", "question": "weather in Paris?", "responses": False}
        run_ = pipeline.record(agent, task)
        first = next(e.seq for e in run_.events if e.kind is EventKind.MODEL_CALL)
        connections = server.connections
    edited_triage = triage.clone(instructions="Hand everything to the weather agent.")

    async def edited(task: dict[str, Any], edges: Edges) -> str:
        async with openai.AsyncOpenAI(base_url=task["url"], api_key="t", max_retries=0) as c:
            return str((await run(edited_triage, task["question"], edges, client=c)).final_output)

    with pytest.raises(ReplayDivergence) as info:
        asyncio.run(areplay(run_.events, edited))
    assert info.value.seq == first
    assert any("$.request.params.messages[0].content" in d for d in info.value.diff)
    assert server.connections == connections


def test_an_agent_with_its_own_model_object_is_refused() -> None:
    from agents.models.openai_chatcompletions import OpenAIChatCompletionsModel

    client = openai.AsyncOpenAI(base_url="http://127.0.0.1:9/v1", api_key="test")
    own = Agent(name="own", model=OpenAIChatCompletionsModel("gpt-4o-mini", client))

    async def go(edges: Any) -> Any:
        return await run(own, "hi", edges, client=client)

    with pytest.raises(ConfigError, match="'own' holds a Model object"):
        asyncio.run(go(object()))


def test_a_tool_name_the_recorder_already_has_for_another_function_is_refused(
    pipeline: Pipeline,
) -> None:
    with provider_server() as server:
        task = {"url": server.url + "/v1", "question": "weather in Paris?"}
        solo = Agent(name="solo", model="gpt-4o-mini", tools=[get_weather])

        async def agent_(task: dict[str, Any], edges: Edges) -> str:
            async with openai.AsyncOpenAI(base_url=task["url"], api_key="t", max_retries=0) as c:
                return str((await run(solo, task["question"], edges, client=c)).final_output)

        recorded = pipeline.record(agent_, task, tools={"get_weather": lambda args: "other"})
    assert isinstance(recorded.output, ConfigError), recorded.output
    assert "'get_weather' is already registered" in str(recorded.output)
    assert recorded.events[-2].kind is EventKind.ERROR  # recorded as the agent's error
