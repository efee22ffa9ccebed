"""The Google ADK agent the ADK tests record, as ADK's docs write one: an ``Agent`` over
``LiteLlm`` (an OpenAI-compatible endpoint), plain function tools (one sends e-mail, counted in
:data:`SENT`), an ``InMemoryRunner`` and its session, the event loop read to the final
response."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import openai
from google.adk.agents import Agent
from google.adk.apps import App
from google.adk.models.lite_llm import LiteLlm
from google.adk.runners import InMemoryRunner
from google.genai import types

from tracevault.edges import Edges
from tracevault.integrations.adk import recorded
from tracevault.replayer import areplay
from tracevault.schemas import EventKind, TraceEvent

__all__ = ["MAILED", "QUESTION", "SENT", "agent", "bounced", "diverged", "support"]

SENT: list[str] = []  # every real e-mail
#: the local provider asks for both tools at once, then echoes the last tool result
QUESTION = "[parallel] weather in Paris? and mail me"
#: ADK hands the model a tool's non-dict result as {"result": ...}
MAILED = '{"result": "mailed about Paris"}'


def get_weather(city: str) -> dict[str, str]:
    """The sky over a city."""
    return {"status": "success", "report": f"clear over {city}, 21C"}


def send_email(city: str) -> str:
    """E-mail the user about a city (changes the world)."""
    SENT.append(city)
    return f"mailed about {city}"


def support(url: str, instruction: str = "Answer the user; use the tools.") -> Agent:
    model = LiteLlm(model="openai/gpt-4o-mini", api_base=url, api_key="t")
    return Agent(name="support", model=model, instruction=instruction,
                 tools=[get_weather, send_email])  # fmt: skip


async def agent(task: dict[str, Any], edges: Edges) -> str:
    async with openai.AsyncOpenAI(base_url=task["url"], api_key="t", max_retries=0) as client:
        root = support(task["url"], task.get("instruction", "Answer the user; use the tools."))
        app = App(name="desk", root_agent=root, plugins=[recorded(edges, client=client)])
        runner = InMemoryRunner(app=app)
        session = await runner.session_service.create_session(app_name="desk", user_id="u1")
        message = types.Content(role="user", parts=[types.Part(text=task["question"])])
        final = ""
        async for event in runner.run_async(user_id="u1", session_id=session.id,
                                            new_message=message):  # fmt: skip
            if event.is_final_response() and event.content and event.content.parts:
                final = "".join(p.text or "" for p in event.content.parts)
        await runner.close()
    return final


def bounced(events: Sequence[TraceEvent]) -> list[TraceEvent]:
    """The run with its e-mail tool's recorded result edited to ``"bounced"``."""
    edited = list(events)
    mail = next(i for i, e in enumerate(edited)
                if e.kind is EventKind.TOOL_CALL and b"send_email" in e.request)  # fmt: skip
    edited[mail] = dataclasses.replace(edited[mail], response=b'"bounced"')
    return edited


def diverged(events: Sequence[TraceEvent], agent: Callable[..., Any], nth: int, site: str) -> Any:
    """Replay ``events`` with ``agent``: it must diverge at the run's ``nth`` MODEL_CALL (0,
    the first), naming ``site`` (``module:function:``), with no e-mail sent. The divergence."""
    SENT.clear()
    result = asyncio.run(areplay(list(events), agent, raise_on_divergence=False))
    at = [e for e in events if e.kind is EventKind.MODEL_CALL][nth]
    div = result.divergence
    assert not result.matched and div is not None
    assert div.seq == at.seq, div
    assert site in str(div), div
    assert SENT == []
    return div
