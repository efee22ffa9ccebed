"""The agent of the SDK golden run (tests/integrations/golden/): frozen, because the record
under golden/ was made with it, by the method-level adapter tracevault had before the door
(``make_golden.py``). Do not edit it; record a new golden instead."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anthropic
import openai

from tracevault.edges import Edges
from tracevault.integrations import anthropic as tv_anthropic
from tracevault.integrations import openai as tv_openai

GOLDEN = Path(__file__).with_name("golden")
NAME = "sdk_v1"

WEATHER = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]


def get_weather(args: dict[str, Any]) -> dict[str, Any]:
    return {"city": args["city"], "sky": "clear"}


def sdk_agent(task: dict[str, Any], edges: Edges) -> dict[str, Any]:
    out: dict[str, Any] = {}
    sdk = openai.OpenAI(base_url=task["url"] + "/v1", api_key="t", max_retries=0)
    with tv_openai.wrap(sdk, edges) as client:
        messages: list[Any] = [{"role": "user", "content": "weather in Paris?"}]
        reply = client.chat.completions.create(
            model="gpt-4o-mini", messages=messages, tools=WEATHER, seed=42, temperature=0
        )
        call = reply.choices[0].message.tool_calls[0]
        messages.append(reply.choices[0].message.model_dump(exclude_unset=True))
        result = edges.tool(call.function.name, json.loads(call.function.arguments))
        messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)})
        reply = client.chat.completions.create(model="gpt-4o-mini", messages=messages, seed=42)
        out["chat"] = reply.choices[0].message.content
        stream = client.chat.completions.create(
            model="gpt-4o-mini",
            messages=[{"role": "user", "content": "stream"}],
            stream=True,
            stream_options={"include_usage": True},
        )
        out["stream"] = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        events = client.responses.create(model="gpt-4o-mini", input="responses", stream=True)
        out["responses"] = [e.type for e in events]
        try:
            client.chat.completions.create(
                model="gpt-4o-mini", messages=[{"role": "user", "content": "please 429"}]
            )
        except openai.RateLimitError as exc:
            out["error"] = [type(exc).__name__, exc.status_code]
    claude = anthropic.Anthropic(base_url=task["url"], api_key="t", max_retries=0)
    with tv_anthropic.wrap(claude, edges) as client:
        message = client.messages.create(
            model="claude-haiku-4-5", max_tokens=32, messages=[{"role": "user", "content": "hi"}]
        )
        out["anthropic"] = message.content[0].text
        stream = client.messages.create(
            model="claude-haiku-4-5",
            max_tokens=32,
            messages=[{"role": "user", "content": "streamed"}],
            stream=True,
        )
        out["anthropic_stream"] = [e.type for e in stream]
    return out
