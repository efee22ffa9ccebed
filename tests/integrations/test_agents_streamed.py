"""The OpenAI Agents SDK's ``Runner.run_streamed`` recorded with its function tools and its
handoff: a triage agent hands off to a mail agent whose ``send_email`` tool changes the world.
The real ``openai-agents`` and ``openai`` packages over HTTP to the local provider (streamed
Chat Completions), the real Recorder, broker and sequencer; the parent and the child run
replayed 50 times each with the provider stopped: matched, no e-mail sent again, no socket."""

from __future__ import annotations

import json
from typing import Any

import openai
from agents import Agent, function_tool, handoff
from agents.extensions import handoff_filters

from tests.integrations.offline import OFFLINE_REPLAYS, replay_offline
from tests.integrations.pipeline import Pipeline
from tests.replayer.pipeline import wait_sealed
from tracevault.demo.provider import provider_server
from tracevault.edges import Edges
from tracevault.integrations.openai_agents import run as agents_run
from tracevault.integrations.openai_agents import run_streamed
from tracevault.links import SUBAGENT_RUN
from tracevault.replayer import load_run, verify

SENT: list[str] = []  # every real e-mail


@function_tool
def send_email(city: str) -> str:
    """E-mail the user about a city (changes the world)."""
    SENT.append(city)
    return f"mailed about {city}"


mail_agent = Agent(name="mail_agent", instructions="Mail the user.", model="gpt-4o-mini",
                   tools=[send_email])  # fmt: skip
triage = Agent(
    name="triage",
    instructions="Hand mail requests to the mail agent.",
    model="gpt-4o-mini",
    handoffs=[handoff(mail_agent, input_filter=handoff_filters.remove_all_tools)],
)


async def _streamed(agent: Agent[Any], given: Any, edges: Edges, url: str) -> tuple[Any, list[str]]:
    async with openai.AsyncOpenAI(base_url=url, api_key="t", max_retries=0) as client:
        result = run_streamed(agent, given, edges, client=client)
        seen = [ev.type async for ev in result.stream_events()]
    return result.final_output, seen


async def streamed_agent(task: dict[str, Any], edges: Edges) -> Any:
    output, seen = await _streamed(triage, task["question"], edges, task["url"])
    return {"output": output, "events": sorted(set(seen))}


def test_run_streamed_records_its_tools_and_handoff_and_replays_without_acting(
    pipeline: Pipeline,
) -> None:
    SENT.clear()
    with provider_server() as server:
        task = {"url": server.url + "/v1", "question": "mail me about Paris"}
        run = pipeline.record(streamed_agent, task)
        requests = len(server.requests)
    assert not isinstance(run.output, Exception), run.output
    assert run.output["output"] == "echo: mailed about Paris", run.output
    assert "raw_response_event" in run.output["events"]
    assert SENT == ["Paris"] and requests == 3
    parent = run.events
    assert [e.kind.value for e in parent] == [
        "RUN_STARTED",
        "MODEL_CALL",
        "TOOL_CALL",
        "RUN_FINISHED",
    ]
    child_id = parent[2].attributes[SUBAGENT_RUN]
    wait_sealed(pipeline.settings, child_id)
    child = list(verify(load_run(pipeline.settings, child_id, source="topic"),
                        require_finished=True).events)  # fmt: skip
    tools = [json.loads(e.request) for e in child if e.kind.value == "TOOL_CALL"]
    assert tools == [{"tool": "send_email", "args": {"city": "Paris"}}]

    async def mail_child(history: Any, edges: Edges) -> Any:
        # a handed-off agent runs as a child run through Runner.run (its output is one
        # completed event of the parent's stream), as replay run --recurse replays it
        async with openai.AsyncOpenAI(base_url=task["url"], api_key="t", max_retries=0) as c:
            return (await agents_run(mail_agent, history, edges, client=c)).final_output

    # the provider is stopped: each run 50 times, every connection counted
    got = replay_offline(parent, streamed_agent, OFFLINE_REPLAYS, run.output)
    child_output = json.loads(child[-1].response)["output"]
    again = replay_offline(child, mail_child, OFFLINE_REPLAYS, child_output)
    assert (got.matched, got.connects, SENT) == (OFFLINE_REPLAYS, (), ["Paris"])
    assert (again.matched, again.connects) == (OFFLINE_REPLAYS, ())
