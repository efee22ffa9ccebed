"""Record and replay an agent written against the OpenAI SDK: ``client = wrap(OpenAI(), edges)``.

``client.chat.completions.create(...)`` and ``client.responses.create(...)`` (sync, async,
``stream=True``) become MODEL_CALL crossings (see ``tracevault.integrations._core``); every
other attribute is the SDK client's own and is not recorded. Under replay the same calls return
``ChatCompletion`` / ``Response`` objects, or streams of ``ChatCompletionChunk`` /
response-event objects, rebuilt from the record, and no request leaves the process.

Recorded per call: the request as sent, the full response (``model_dump`` JSON, a stream as
its chunks), the exact build in the event's ``model`` (``response.model``; an alias there is
refused), the ``seed``, the token usage (``usage`` in the response), and the tool calls the
model asked for (in the response, and summed up as ``tool_calls`` for a stream).

Needs the ``openai`` extra: ``pip install 'tracevault[openai]'``.
"""

from __future__ import annotations

import functools
from typing import Any

import openai
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.responses import Response, ResponseStreamEvent

from tracevault.edges import JSON, Edges
from tracevault.errors import ConfigError
from tracevault.integrations._core import (
    Api,
    AsyncResource,
    ClientProxy,
    Resource,
    StreamEvents,
    build,
)

__all__ = ["WrappedAsyncOpenAI", "WrappedOpenAI", "wrap"]

_OMITTED: tuple[type, ...] = (openai.Omit, openai.NotGiven)
_CHAT = "chat.completions"
_RESPONSES = "responses"


_event = StreamEvents(ResponseStreamEvent, "Responses", "openai", openai.__version__)


# -- what a stream records ---------------------------------------------------------------------
def _chat_stream(chunks: list[JSON]) -> JSON:
    model: str | None = None
    usage: JSON = None
    calls: dict[int, dict[str, Any]] = {}
    for chunk in chunks:
        model = model or chunk.get("model") or None
        usage = chunk.get("usage") or usage
        for choice in chunk.get("choices") or ():
            for tc in (choice.get("delta") or {}).get("tool_calls") or ():
                call = calls.setdefault(
                    tc.get("index", 0), {"id": None, "name": "", "arguments": ""}
                )
                fn = tc.get("function") or {}
                call["id"] = tc.get("id") or call["id"]
                call["name"] += fn.get("name") or ""
                call["arguments"] += fn.get("arguments") or ""
    return {
        "model": model,
        "stream": chunks,
        "tool_calls": [calls[i] for i in sorted(calls)],
        "usage": usage,
    }


def _responses_stream(events: list[JSON]) -> JSON:
    model: str | None = None
    usage: JSON = None
    calls: list[JSON] = []
    for ev in events:
        resp = ev.get("response")
        if isinstance(resp, dict):
            model = model or resp.get("model")
            usage = resp.get("usage") or usage
        item = ev.get("item")
        done = ev.get("type") == "response.output_item.done" and isinstance(item, dict)
        if done and item.get("type") == "function_call":
            calls.append(
                {
                    "id": item.get("call_id"),
                    "name": item.get("name"),
                    "arguments": item.get("arguments"),
                }
            )
    return {"model": model, "stream": events, "tool_calls": calls, "usage": usage}


def _chat_tool_calls(response: JSON) -> list[JSON]:
    return [
        {
            "id": tc.get("id"),
            "name": (tc.get("function") or {}).get("name"),
            "arguments": (tc.get("function") or {}).get("arguments"),
        }
        for choice in response.get("choices") or ()
        for tc in (choice.get("message") or {}).get("tool_calls") or ()
    ]


def _responses_tool_calls(response: JSON) -> list[JSON]:
    return [
        {"id": item.get("call_id"), "name": item.get("name"), "arguments": item.get("arguments")}
        for item in response.get("output") or ()
        if isinstance(item, dict) and item.get("type") == "function_call"
    ]


_APIS = {
    _CHAT: Api(
        "openai",
        _CHAT,
        _OMITTED,
        functools.partial(build, ChatCompletion),
        functools.partial(build, ChatCompletionChunk),
        _chat_stream,
        _chat_tool_calls,
        openai.APIStatusError,
        openai.APIConnectionError,
    ),
    _RESPONSES: Api(
        "openai",
        _RESPONSES,
        _OMITTED,
        functools.partial(build, Response),
        _event,
        _responses_stream,
        _responses_tool_calls,
        openai.APIStatusError,
        openai.APIConnectionError,
    ),
}


class _Chat:
    def __init__(self, chat: Any, completions: Resource) -> None:
        self._chat = chat
        self.completions = completions

    def __getattr__(self, name: str) -> Any:
        return getattr(self._chat, name)


class WrappedOpenAI(ClientProxy):
    """An ``openai.OpenAI`` whose Chat Completions and Responses calls cross ``edges``."""

    _resource: type[Resource] = Resource

    def __init__(self, client: Any, edges: Edges) -> None:
        super().__init__(client, edges)
        wrapped = self._resource
        url = client.base_url
        self.chat = _Chat(client.chat, wrapped(_APIS[_CHAT], client.chat.completions, edges, url))
        self.responses = wrapped(_APIS[_RESPONSES], client.responses, edges, url)


class WrappedAsyncOpenAI(WrappedOpenAI):
    """An ``openai.AsyncOpenAI`` whose Chat Completions and Responses calls cross ``edges``."""

    _resource = AsyncResource


def wrap(client: openai.OpenAI | openai.AsyncOpenAI, edges: Edges) -> Any:
    """``client`` with its model calls recorded live and served from the record under replay.

    Typed ``Any`` so the agent keeps the SDK's own method signatures in its editor.
    """
    if isinstance(client, openai.AsyncOpenAI):
        return WrappedAsyncOpenAI(client, edges)
    if isinstance(client, openai.OpenAI):
        return WrappedOpenAI(client, edges)
    raise ConfigError(f"wrap(client, edges) needs an openai.OpenAI or AsyncOpenAI, got {client!r}")
