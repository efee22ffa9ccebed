"""Google ADK recorded with one changed line (the runner gets ``plugins=[recorded(edges,
client=...)]``): an agent as ADK's docs write one (``Agent`` over ``LiteLlm``, function tools,
one of them sending e-mail, the model/tool loop, parallel tool calls) over the real
``google-adk``, ``litellm`` and ``openai`` packages to the local provider, the real Recorder,
broker and sequencer; replayed 50 times with the provider stopped: matched, no socket, no
e-mail sent again. A changed prompt and a changed tool result diverge at the model call that
saw them."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from typing import Any

import openai
import pytest

from tests.integrations import adk_support
from tests.integrations.adk_support import MAILED, QUESTION, SENT, agent, bounced, diverged
from tests.integrations.offline import OFFLINE_REPLAYS, replay_offline
from tests.integrations.pipeline import Pipeline
from tracevault.callsite import CALL_ID_ATTRIBUTE, SITE_ATTRIBUTE
from tracevault.demo.provider import provider_server
from tracevault.errors import ConfigError
from tracevault.integrations.adk import recorded
from tracevault.replayer import areplay


@pytest.fixture(scope="module")
def run(pipeline: Pipeline) -> Any:
    SENT.clear()
    with provider_server() as server:
        rec = pipeline.record(agent, {"url": server.url + "/v1", "question": QUESTION})
        assert len(server.requests) == 2, rec.output
    assert SENT == ["Paris"], rec.output
    return rec


def test_an_adk_agent_with_parallel_tools_records_its_loop(run: Any) -> None:
    assert run.output == f"echo: {MAILED}", run.output
    kinds = [e.kind.value for e in run.events]
    assert kinds == ["RUN_STARTED", "MODEL_CALL", "TOOL_CALL", "TOOL_CALL", "MODEL_CALL",
                     "RUN_FINISHED"]  # fmt: skip
    tools = sorted(json.loads(e.request)["tool"] for e in run.events[2:4])
    assert tools == ["get_weather", "send_email"]
    ids = sorted(e.attributes[CALL_ID_ATTRIBUTE] for e in run.events[2:4])
    assert ids == ["call_1", "call_2"]
    for ev in run.events[2:4]:  # at the tool's own function in the agent's file
        tool = json.loads(ev.request)["tool"]
        assert ev.attributes[SITE_ATTRIBUTE].startswith(f"{adk_support.__name__}:{tool}:")
    for ev in (run.events[1], run.events[4]):  # at the agent's own line, not ADK's
        assert ev.attributes[SITE_ATTRIBUTE].startswith(f"{adk_support.__name__}:agent:")


def test_replayed_50_times_with_the_provider_stopped(run: Any) -> None:
    SENT.clear()  # the provider's server is stopped: its port is closed
    got = replay_offline(run.events, agent, OFFLINE_REPLAYS, run.output)
    assert (got.matched, got.connects, SENT) == (OFFLINE_REPLAYS, (), [])


def test_a_changed_prompt_diverges_at_the_first_model_call(run: Any) -> None:
    async def changed(task: dict[str, Any], edges: Any) -> str:
        return await agent({**task, "instruction": "Answer tersely."}, edges)

    div = diverged(run.events, changed, 0, f"{adk_support.__name__}:agent:")
    assert any(d.startswith("$.request.params.messages[0].content: expected")
               for d in div.diff), div.diff  # fmt: skip


def test_a_changed_tool_result_diverges_at_the_model_call_that_saw_it(run: Any) -> None:
    div = diverged(bounced(run.events), agent, 1, f"{adk_support.__name__}:agent:")
    assert any("bounced" in d for d in div.diff), div.diff


def test_a_client_other_than_async_openai_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"needs an openai\.AsyncOpenAI"):
        recorded(object(), client=openai.OpenAI(api_key="t"))  # type: ignore[arg-type]


MAIL_SERVER: dict[str, str] = {}


def _unwrapped_mail(city: str) -> str:
    """A side effect the plugin does not wrap: one HTTP request to the "mail server"."""
    with urllib.request.urlopen(MAIL_SERVER["url"] + "/v1/models", timeout=5) as reply:
        reply.read()
    return f"mailed about {city}"


async def acts_after_the_run(task: dict[str, Any], edges: Any) -> str:
    answer = await agent(task, edges)
    return await asyncio.to_thread(_unwrapped_mail, answer)  # the agent's own code


def test_a_replay_cannot_send_mail_through_a_path_the_plugin_does_not_wrap(
    pipeline: Pipeline,
) -> None:
    """Never acts: the unwrapped side effect's connection is refused as a divergence, and the
    mail server (up during the replay) sees nothing sent again."""
    SENT.clear()
    with provider_server() as server:
        MAIL_SERVER["url"] = server.url
        rec = pipeline.record(acts_after_the_run, {"url": server.url + "/v1", "question": QUESTION})
        assert not isinstance(rec.output, Exception), rec.output
        assert sum(r.path == "/v1/models" for r in server.requests) == 1  # live, it mailed
        before = len(server.requests)
        result = asyncio.run(areplay(rec.events, acts_after_the_run, raise_on_divergence=False))
        assert len(server.requests) == before  # nothing sent again, no model call either
    assert SENT == ["Paris"]  # the recorded tool was served, not run again
    div = result.divergence
    assert not result.matched and div is not None
    assert div.actual == "CONNECT", div
    assert f"from {__name__}:_unwrapped_mail:" in div.reason, div.reason
