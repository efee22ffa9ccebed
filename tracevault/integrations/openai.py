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

import typing
from collections.abc import Callable
from functools import cache
from typing import Any, TypeVar

import openai
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import BaseModel

from tracevault.edges import JSON, Edges
from tracevault.errors import ConfigError
from tracevault.integrations._core import (
    AsyncReplayedStream,
    ReplayedStream,
    amodel_call,
    model_call,
    request_json,
    sendable,
)

__all__ = ["WrappedAsyncOpenAI", "WrappedOpenAI", "wrap"]

M = TypeVar("M", bound=BaseModel)
_OMITTED: tuple[type, ...] = (openai.Omit, openai.NotGiven)
_CHAT = "chat.completions"
_RESPONSES = "responses"


def _dump(obj: BaseModel) -> JSON:
    # The fields the provider sent, as it sent them: the SDK builds its objects without
    # validation, so a full dump would add nulls in places its own types do not allow.
    return obj.model_dump(mode="json", exclude_unset=True)


def _build(cls: type[M], data: JSON) -> M:
    # The SDK's own lenient, recursive constructor: the object it would have built from the
    # same JSON, and one that never refuses what the provider really sent.
    return cls.model_construct(**data)


@cache
def _event_types() -> dict[str, type[BaseModel]]:
    """Each Responses stream event class by its ``type``: how a recorded event is rebuilt."""
    union = typing.get_args(ResponseStreamEvent)[0]
    out: dict[str, type[BaseModel]] = {}
    for cls in typing.get_args(union):
        for name in typing.get_args(cls.model_fields["type"].annotation):
            out[name] = cls
    return out


def _event(data: JSON) -> BaseModel:
    cls = _event_types().get(data.get("type", "") if isinstance(data, dict) else "")
    if cls is None:
        raise ConfigError(
            f"a recorded Responses stream event has type {data.get('type')!r}, which this "
            f"openai {openai.__version__} does not know; replay with the SDK that recorded it"
        )
    return _build(cls, data)


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


_SUMMARY: dict[str, Callable[[list[JSON]], JSON]] = {
    _CHAT: _chat_stream,
    _RESPONSES: _responses_stream,
}


def _rebuild(api: str, recorded: JSON, stream: bool) -> Any:
    """The SDK objects the recorded JSON was dumped from (a stream: its chunks, in order)."""
    if not stream:
        cls: type[BaseModel] = ChatCompletion if api == _CHAT else Response
        return _build(cls, recorded)
    if api == _CHAT:
        return [_build(ChatCompletionChunk, c) for c in recorded["stream"]]
    return [_event(e) for e in recorded["stream"]]


# -- the wrapped resources ---------------------------------------------------------------------
class _Create:
    """``create`` of one resource (chat.completions, responses) of a sync client."""

    def __init__(self, api: str, resource: Any, edges: Edges) -> None:
        self._api, self._resource, self._edges = api, resource, edges

    def create(self, **kwargs: Any) -> Any:
        sent = sendable(kwargs, _OMITTED)
        api, stream = self._api, bool(sent.get("stream"))

        def live() -> JSON:
            result = self._resource.create(**sent)
            if not stream:
                return _dump(result)
            try:
                return _SUMMARY[api]([_dump(c) for c in result])
            finally:
                result.close()

        recorded = model_call(self._edges, request_json("openai", api, sent), sent, live)
        rebuilt = _rebuild(api, recorded, stream)
        return ReplayedStream(rebuilt, recorded) if stream else rebuilt

    def __getattr__(self, name: str) -> Any:
        return getattr(self._resource, name)


class _ACreate(_Create):
    """``create`` of one resource of an async client."""

    async def create(self, **kwargs: Any) -> Any:
        sent = sendable(kwargs, _OMITTED)
        api, stream = self._api, bool(sent.get("stream"))

        async def live() -> JSON:
            result = await self._resource.create(**sent)
            if not stream:
                return _dump(result)
            try:
                return _SUMMARY[api]([_dump(c) async for c in result])
            finally:
                await result.close()

        recorded = await amodel_call(self._edges, request_json("openai", api, sent), sent, live)
        rebuilt = _rebuild(api, recorded, stream)
        return AsyncReplayedStream(rebuilt, recorded) if stream else rebuilt


class _Chat:
    def __init__(self, chat: Any, completions: _Create) -> None:
        self._chat = chat
        self.completions = completions

    def __getattr__(self, name: str) -> Any:
        return getattr(self._chat, name)


class WrappedOpenAI:
    """An ``openai.OpenAI`` whose Chat Completions and Responses calls cross ``edges``."""

    _create: type[_Create] = _Create

    def __init__(self, client: Any, edges: Edges) -> None:
        self._client = client
        self.edges = edges
        self.chat = _Chat(client.chat, self._create(_CHAT, client.chat.completions, edges))
        self.responses = self._create(_RESPONSES, client.responses, edges)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


class WrappedAsyncOpenAI(WrappedOpenAI):
    """An ``openai.AsyncOpenAI`` whose Chat Completions and Responses calls cross ``edges``."""

    _create = _ACreate


def wrap(client: openai.OpenAI | openai.AsyncOpenAI, edges: Edges) -> Any:
    """``client`` with its model calls recorded live and served from the record under replay.

    Typed ``Any`` so the agent keeps the SDK's own method signatures in its editor.
    """
    if isinstance(client, openai.AsyncOpenAI):
        return WrappedAsyncOpenAI(client, edges)
    if isinstance(client, openai.OpenAI):
        return WrappedOpenAI(client, edges)
    raise ConfigError(f"wrap(client, edges) needs an openai.OpenAI or AsyncOpenAI, got {client!r}")
