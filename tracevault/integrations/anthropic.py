"""Record and replay an agent written against the Anthropic SDK: ``wrap(Anthropic(), edges)``.

``client.messages.create(...)`` (sync, async, ``stream=True``) becomes a MODEL_CALL crossing
(see ``tracevault.integrations._core``); under replay it returns a ``Message``, or a stream of
``RawMessageStreamEvent`` objects, rebuilt from the record, and no request leaves the process.
Other methods of ``client.messages`` (the ``stream()`` helper, ``count_tokens``, batches) raise
rather than reach the provider unrecorded; the rest of the client is the SDK's own.

Recorded per call: the request as sent, the full response (a stream as its events), the exact
build in the event's ``model`` (``message.model``; an alias is refused), the token usage, and
the ``tool_use`` blocks the model asked for (in the response, and summed up as ``tool_calls``
for a stream). The Messages API has no sampling seed, so the event's ``seed`` stays empty.

Needs the ``anthropic`` extra: ``pip install 'tracevault[anthropic]'``.
"""

from __future__ import annotations

import functools
import json
from typing import Any

import anthropic
from anthropic.types import Message, RawMessageStreamEvent

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

__all__ = ["WrappedAnthropic", "WrappedAsyncAnthropic", "wrap"]

_OMITTED: tuple[type, ...] = (anthropic.Omit, anthropic.NotGiven)
_MESSAGES = "messages"


_event = StreamEvents(RawMessageStreamEvent, "Messages", "anthropic", anthropic.__version__)


def _stream(events: list[JSON]) -> JSON:
    model: str | None = None
    usage: dict[str, Any] = {}
    calls: dict[int, dict[str, Any]] = {}
    for ev in events:
        kind = ev.get("type")
        if kind == "message_start":
            message = ev.get("message") or {}
            model = message.get("model")
            usage.update(message.get("usage") or {})
        elif kind == "content_block_start":
            block = ev.get("content_block") or {}
            if block.get("type") == "tool_use":
                calls[ev.get("index", 0)] = {
                    "id": block.get("id"),
                    "name": block.get("name"),
                    "arguments": "",
                }
        elif kind == "content_block_delta":
            delta = ev.get("delta") or {}
            call = calls.get(ev.get("index", 0))
            if call is not None and delta.get("type") == "input_json_delta":
                call["arguments"] += delta.get("partial_json") or ""
        elif kind == "message_delta":
            usage.update({k: v for k, v in (ev.get("usage") or {}).items() if v is not None})
    return {
        "model": model,
        "stream": events,
        "tool_calls": [calls[i] for i in sorted(calls)],
        "usage": usage or None,
    }


def _tool_calls(response: JSON) -> list[JSON]:
    return [
        {
            "id": b.get("id"),
            "name": b.get("name"),
            "arguments": json.dumps(b.get("input"), sort_keys=True),
        }
        for b in response.get("content") or ()
        if isinstance(b, dict) and b.get("type") == "tool_use"
    ]


_API = Api(
    "anthropic",
    _MESSAGES,
    _OMITTED,
    functools.partial(build, Message),
    _event,
    _stream,
    _tool_calls,
    anthropic.APIStatusError,
    anthropic.APIConnectionError,
)


class WrappedAnthropic(ClientProxy):
    """An ``anthropic.Anthropic`` whose Messages calls cross ``edges``."""

    _resource: type[Resource] = Resource

    def __init__(self, client: Any, edges: Edges) -> None:
        super().__init__(client, edges)
        self.messages = self._resource(_API, client.messages, edges, client.base_url)


class WrappedAsyncAnthropic(WrappedAnthropic):
    """An ``anthropic.AsyncAnthropic`` whose Messages calls cross ``edges``."""

    _resource = AsyncResource


def wrap(client: anthropic.Anthropic | anthropic.AsyncAnthropic, edges: Edges) -> Any:
    """``client`` with its Messages calls recorded live and served from the record under replay.

    Typed ``Any`` so the agent keeps the SDK's own method signatures in its editor.
    """
    if isinstance(client, anthropic.AsyncAnthropic):
        return WrappedAsyncAnthropic(client, edges)
    if isinstance(client, anthropic.Anthropic):
        return WrappedAnthropic(client, edges)
    raise ConfigError(
        f"wrap(client, edges) needs an anthropic.Anthropic or AsyncAnthropic, got {client!r}"
    )
