"""The Pydantic AI agent the Pydantic AI tests record through each door, as Pydantic AI's docs
write one: ``Agent``, a ``@agent.tool_plain`` and an ``@agent.tool`` tool (the latter sends
e-mail, counted in :data:`SENT`), run dependencies."""

from __future__ import annotations

import json
from dataclasses import dataclass

from pydantic_ai import Agent, RunContext

from tracevault.callsite import SITE_ATTRIBUTE
from tracevault.schemas import TraceEvent

__all__ = ["MAILED", "QUESTION", "SENT", "Mailer", "at_its_tool", "support"]

SENT: list[str] = []  # every real e-mail
#: the local provider asks for both tools at once, then echoes the last tool result: this one
QUESTION = "[parallel] weather in Paris? and mail me"
MAILED = "desk@example.org mailed about Paris"


@dataclass
class Mailer:
    sender: str


# defer_model_check: the model is named here, and the door gives it the recorded OpenAI client
# (without it, Pydantic AI builds a provider at once and asks for OPENAI_API_KEY)
support = Agent("openai:gpt-4o-mini", deps_type=Mailer, defer_model_check=True,
                instructions="Answer the user; use the tools.")  # fmt: skip


@support.tool_plain
def get_weather(city: str) -> str:
    """The sky over a city."""
    return f"clear over {city}, 21C"


@support.tool
def send_email(ctx: RunContext[Mailer], city: str) -> str:
    """E-mail the user about a city (changes the world)."""
    SENT.append(city)
    return f"{ctx.deps.sender} mailed about {city}"


def at_its_tool(event: TraceEvent) -> bool:
    """A TOOL_CALL is sited at its tool's function above: Pydantic AI runs a turn's tool calls
    in tasks of their own, whose stacks hold no frame of the agent."""
    tool = json.loads(event.request)["tool"]
    return str(event.attributes[SITE_ATTRIBUTE]).startswith(f"{__name__}:{tool}:")
