"""Google ADK streamed and with sub-agents, recorded by the same one plugin
(``plugins=[recorded(edges, client=...)]``): ``run_async`` with
``RunConfig(streaming_mode=StreamingMode.SSE)``, the partial events read as they come; a
parent that transfers to a sub-agent (``transfer_to_agent``, ADK's ``sub_agents``); a parent
that calls a sub-agent as a tool (``AgentTool``). The real ``google-adk``, ``litellm`` and
``openai`` packages over HTTP to the local provider (streamed Chat Completions), the real
Recorder, broker and sequencer. The streamed run replays 50 times and each sub-agent run 20
times with the provider stopped: matched, no socket, no e-mail sent again. A changed prompt
and a changed tool result diverge at the model call that saw them, at a line of this file."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
from google.adk.agents import Agent, RunConfig
from google.adk.agents.run_config import StreamingMode
from google.adk.apps import App
from google.adk.models.lite_llm import LiteLlm
from google.adk.runners import InMemoryRunner
from google.adk.tools.agent_tool import AgentTool
from google.genai import types

from tests.integrations import adk_support
from tests.integrations.adk_support import (
    MAILED,
    QUESTION,
    SENT,
    bounced,
    diverged,
    get_weather,
    send_email,
)
from tests.integrations.offline import OFFLINE_REPLAYS, replay_offline
from tests.integrations.pipeline import Pipeline, Recorded
from tracevault.callsite import SITE_ATTRIBUTE
from tracevault.demo.provider import provider_server
from tracevault.edges import Edges
from tracevault.integrations.adk import recorded
from tracevault.schemas import EventKind

SUBAGENT_REPLAYS = 20  # the brief's bar for a parent with one sub-agent


def _model(url: str) -> LiteLlm:
    return LiteLlm(model="openai/gpt-4o-mini", api_base=url, api_key="t")


def _weather(url: str, instruction: str) -> Agent:
    """The sub-agent: the tools, and no transfer back (it answers)."""
    return Agent(name="weather", model=_model(url), instruction=instruction,
                 description="Knows the weather; can mail the user.",
                 tools=[get_weather, send_email],
                 disallow_transfer_to_parent=True, disallow_transfer_to_peers=True)  # fmt: skip


def _root(task: dict[str, Any]) -> Agent:
    url, instruction = task["url"], task.get("instruction", "Answer the user; use the tools.")
    if task["shape"] == "transfer":
        return Agent(name="triage", model=_model(url), instruction="Hand the user on.",
                     sub_agents=[_weather(url, instruction)])  # fmt: skip
    if task["shape"] == "agent_tool":
        return Agent(name="triage", model=_model(url), instruction="Ask the weather agent.",
                     tools=[AgentTool(_weather(url, instruction))])  # fmt: skip
    return adk_support.support(url, instruction)


async def agent(task: dict[str, Any], edges: Edges) -> dict[str, Any]:
    """An ADK agent as its docs write one, streamed (SSE): every event's text, partial or not."""
    async with openai.AsyncOpenAI(base_url=task["url"], api_key="t", max_retries=0) as client:
        app = App(name="desk", root_agent=_root(task), plugins=[recorded(edges, client=client)])
        runner = InMemoryRunner(app=app)
        session = await runner.session_service.create_session(app_name="desk", user_id="u1")
        message = types.Content(role="user", parts=[types.Part(text=task["question"])])
        streamed: list[list[Any]] = []
        final = ""
        async for event in runner.run_async(
            user_id="u1", session_id=session.id, new_message=message,
            run_config=RunConfig(streaming_mode=StreamingMode.SSE),
        ):  # fmt: skip
            parts = (event.content.parts or []) if event.content else []
            text = "".join(p.text or "" for p in parts)
            streamed.append([event.author, bool(event.partial), text])
            if event.is_final_response() and text:
                final = text
        await runner.close()
    return {"final": final, "events": streamed}


def _record(pipeline: Pipeline, task: dict[str, Any]) -> tuple[Recorded, int, list[Any]]:
    SENT.clear()
    with provider_server() as server:
        rec = pipeline.record(agent, {**task, "url": server.url + "/v1"})
        bodies = [r.body for r in server.requests]
    sent = len(SENT)
    SENT.clear()
    return rec, sent, bodies


@pytest.fixture(scope="module")
def streamed(pipeline: Pipeline) -> tuple[Recorded, int, list[Any]]:
    return _record(pipeline, {"shape": "one", "question": QUESTION})


def test_a_streamed_run_records_each_response_as_its_stream(
    streamed: tuple[Recorded, int, list[Any]],
) -> None:
    rec, sent, bodies = streamed
    assert not isinstance(rec.output, Exception), rec.output
    assert sent == 1 and len(bodies) == 2 and all(b.get("stream") for b in bodies), bodies
    kinds = [e.kind.value for e in rec.events]
    assert kinds == ["RUN_STARTED", "MODEL_CALL", "TOOL_CALL", "TOOL_CALL", "MODEL_CALL",
                     "RUN_FINISHED"]  # fmt: skip
    for ev in (rec.events[1], rec.events[4]):  # as the chunks the provider sent
        assert json.loads(ev.response)["stream"], ev.response
        assert ev.attributes[SITE_ATTRIBUTE].startswith(f"{__name__}:agent:")
    out = rec.output
    assert out["final"].strip() == f"echo: {MAILED}", out
    partial = [text for _, part, text in out["events"] if part and text]
    assert len(partial) > 1, out["events"]  # ADK yielded the answer as it streamed
    assert "".join(partial).strip() == out["final"].strip(), out["events"]


def test_a_streamed_run_replays_50_times_with_the_provider_stopped(
    streamed: tuple[Recorded, int, list[Any]],
) -> None:
    rec, _, _ = streamed
    got = replay_offline(rec.events, agent, OFFLINE_REPLAYS, rec.output)
    assert (got.matched, got.connects, SENT) == (OFFLINE_REPLAYS, (), [])


def test_a_changed_prompt_diverges_at_the_first_streamed_model_call(
    streamed: tuple[Recorded, int, list[Any]],
) -> None:
    async def changed(task: dict[str, Any], edges: Edges) -> dict[str, Any]:
        return await agent({**task, "instruction": "Answer tersely."}, edges)

    div = diverged(streamed[0].events, changed, 0, f"{__name__}:agent:")
    assert any(d.startswith("$.request.params.messages[0].content: expected")
               for d in div.diff), div.diff  # fmt: skip


def test_a_changed_tool_result_diverges_at_the_streamed_call_that_saw_it(
    streamed: tuple[Recorded, int, list[Any]],
) -> None:
    div = diverged(bounced(streamed[0].events), agent, 1, f"{__name__}:agent:")
    assert any("bounced" in d for d in div.diff), div.diff


@pytest.fixture(scope="module")
def subagents(pipeline: Pipeline) -> dict[str, tuple[Recorded, int, list[Any]]]:
    return {shape: _record(pipeline, {"shape": shape, "question": "weather in Paris? mail me"})
            for shape in ("transfer", "agent_tool")}  # fmt: skip


def _tools(rec: Recorded, nested: bool) -> list[str]:
    return [json.loads(e.request)["tool"] for e in rec.events
            if e.kind is EventKind.TOOL_CALL and (e.parent_seq is not None) == nested]  # fmt: skip


def test_a_transfer_to_a_sub_agent_records_both_agents_calls(
    subagents: dict[str, tuple[Recorded, int, list[Any]]],
) -> None:
    rec, _, bodies = subagents["transfer"]
    assert not isinstance(rec.output, Exception), rec.output
    kinds = [e.kind.value for e in rec.events]
    assert kinds == ["RUN_STARTED", "MODEL_CALL", "TOOL_CALL", "MODEL_CALL", "TOOL_CALL",
                     "MODEL_CALL", "RUN_FINISHED"], kinds  # fmt: skip
    assert _tools(rec, nested=False) == ["transfer_to_agent", "get_weather"]
    assert json.loads(rec.events[2].request)["args"] == {"agent_name": "weather"}
    authors = [a for a, part, text in rec.output["events"] if not part and text]
    assert authors == ["weather"], rec.output  # the sub-agent answered
    assert rec.output["final"].strip().startswith("echo:"), rec.output
    assert len(bodies) == 3


def test_an_agent_tool_sub_agent_runs_inside_its_tool_call(
    subagents: dict[str, tuple[Recorded, int, list[Any]]],
) -> None:
    rec, _, bodies = subagents["agent_tool"]
    assert not isinstance(rec.output, Exception), rec.output
    assert _tools(rec, nested=False) == ["weather"], rec.events
    assert _tools(rec, nested=True) == ["get_weather"], rec.events  # the sub-agent's, nested
    nested_calls = [e for e in rec.events if e.kind is EventKind.MODEL_CALL and e.parent_seq]
    assert len(nested_calls) == 2 and len(bodies) == 4, bodies
    assert rec.output["final"].strip().startswith("echo:"), rec.output


@pytest.mark.parametrize("shape", ["transfer", "agent_tool"])
def test_a_parent_with_a_sub_agent_replays_20_times_with_the_provider_stopped(
    subagents: dict[str, tuple[Recorded, int, list[Any]]], shape: str
) -> None:
    rec, _, _ = subagents[shape]
    got = replay_offline(rec.events, agent, SUBAGENT_REPLAYS, rec.output)
    assert (got.matched, got.connects, SENT) == (SUBAGENT_REPLAYS, (), []), shape
