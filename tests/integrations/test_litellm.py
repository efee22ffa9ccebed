"""LiteLLM's ``completion`` and ``acompletion`` recorded with one changed line, against the
local provider (an OpenAI-compatible server), through the real ``litellm`` and ``openai``
packages, the real Recorder, broker and sequencer; replayed with the provider stopped (any
socket would fail the replay): a tool loop with a side-effecting tool, sync and async."""

from __future__ import annotations

import gc
import json
from typing import Any

import pytest

from tests.integrations.offline import OFFLINE_REPLAYS, replay_offline
from tests.integrations.pipeline import Pipeline
from tracevault.demo.provider import provider_server
from tracevault.edges import Edges
from tracevault.errors import ConfigError
from tracevault.integrations import litellm as tv_litellm
from tracevault.schemas import EventKind

SENT: list[str] = []
TOOLS = [{"type": "function", "function": {"name": "send_email", "parameters": {}}}]


def _send_email(args: Any) -> Any:
    SENT.append(args["city"])
    return f"mailed about {args['city']}"


def _followup(asked: Any, result: Any) -> list[dict[str, Any]]:
    call = asked.choices[0].message.tool_calls[0]
    return [
        {"role": "user", "content": "mail me"},
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": str(result)},
    ]


def sync_agent(task: dict[str, Any], edges: Edges) -> str:
    common = {"model": "openai/gpt-4o-mini", "api_base": task["url"], "api_key": "t"}
    asked = tv_litellm.completion(edges, messages=[{"role": "user", "content": "mail me"}],
                                  tools=TOOLS, **common)  # fmt: skip
    call = asked.choices[0].message.tool_calls[0]
    result = edges.tool("send_email", json.loads(call.function.arguments))
    answer = tv_litellm.completion(edges, messages=_followup(asked, result), **common)
    return str(answer.choices[0].message.content)


async def async_agent(task: dict[str, Any], edges: Edges) -> str:
    common = {"model": "openai/gpt-4o-mini", "api_base": task["url"], "api_key": "t"}
    asked = await tv_litellm.acompletion(edges, messages=[{"role": "user", "content": "mail"}],
                                         tools=TOOLS, **common)  # fmt: skip
    call = asked.choices[0].message.tool_calls[0]
    result = await edges.atool("send_email", json.loads(call.function.arguments))
    answer = await tv_litellm.acompletion(edges, messages=_followup(asked, result), **common)
    return str(answer.choices[0].message.content)


# litellm leaves an event loop of its own (its logging worker) unclosed after a sync call
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize("agent", [sync_agent, async_agent], ids=["completion", "acompletion"])
def test_litellm_records_and_replays_offline(pipeline: Pipeline, agent: Any) -> None:
    SENT.clear()
    with provider_server() as server:
        run = pipeline.record(agent, {"url": server.url + "/v1"}, tools={"send_email": _send_email})
        assert len(server.requests) == 2, run.output
    assert run.output == "echo: mailed about Paris", run.output
    kinds = [e.kind for e in run.events]
    assert kinds.count(EventKind.MODEL_CALL) == 2 and kinds.count(EventKind.TOOL_CALL) == 1
    assert SENT == ["Paris"]
    got = replay_offline(run.events, agent, OFFLINE_REPLAYS, run.output)  # provider stopped
    assert (got.matched, got.connects, SENT) == (OFFLINE_REPLAYS, (), ["Paris"])
    gc.collect()  # litellm's unclosed loop and sockets, reported here (ignored), not at exit


def test_a_model_litellm_would_not_send_through_openai_is_refused() -> None:
    with pytest.raises(ConfigError, match="its 'anthropic' handler"):
        tv_litellm.completion(object(), model="anthropic/claude-haiku-4-5", messages=[])  # type: ignore[arg-type]
