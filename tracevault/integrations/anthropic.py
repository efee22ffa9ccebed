"""Record and replay an agent written against the Anthropic SDK: ``wrap(Anthropic(), edges)``.

The wrapped client is the SDK's own (a copy of ``client``), with one recorded door: its HTTP
client (``tracevault.integrations._door``). ``messages.create`` (sync, async,
``stream=True``), the ``messages.stream()`` helper, ``beta.messages``, ``with_options(...)``
and raw responses are MODEL_CALL crossings; ``messages.count_tokens`` and ``GET`` calls
(``models.list``) are recorded reads; anything else (batches, files) raises a ``ConfigError``
naming the method before any socket opens. Under replay the SDK parses the recorded answer as
it parsed it live, and no request leaves the process.

Recorded per call: the request as sent (the JSON body), the full response (a stream as its
events), the exact build in the event's ``model`` (``message.model``; an alias is refused),
the token usage, and the ``tool_use`` blocks the model asked for (summed up as
``tool_calls`` for a stream). The Messages API has no sampling seed, so ``seed`` stays empty.

Needs the ``anthropic`` extra: ``pip install 'tracevault[anthropic]'``.
"""

from __future__ import annotations

import json
from typing import Any

from tracevault.errors import missing_extra

try:
    import anthropic
except ImportError as exc:  # the extra is not installed: say which one
    raise missing_extra("anthropic", exc) from exc

from tracevault.callsite import add_harness_module
from tracevault.edges import JSON, Edges
from tracevault.errors import ConfigError
from tracevault.integrations._client import AsyncRecorded, Recorded, wrap_client
from tracevault.integrations._core import Api
from tracevault.integrations._door import Sdk

__all__ = ["WrappedAnthropic", "WrappedAsyncAnthropic", "wrap"]

# The crossing's call site is the agent's line, not the SDK's.
for _module in ("anthropic", "httpx2"):
    add_harness_module(_module)


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


_API = Api(_stream, _tool_calls, anthropic.APIStatusError, anthropic.APIConnectionError)
SDK = Sdk(
    "anthropic",
    {"messages": _API},
    anthropic.AnthropicError,
    _API,
    frozenset({"messages.count_tokens"}),
)


class WrappedAnthropic(Recorded):
    """Mixed in before the class of a wrapped ``anthropic.Anthropic``."""

    __slots__ = ()


class WrappedAsyncAnthropic(AsyncRecorded):
    """:class:`WrappedAnthropic` for ``anthropic.AsyncAnthropic``."""

    __slots__ = ()


def wrap(
    client: anthropic.Anthropic | anthropic.AsyncAnthropic,
    edges: Edges,
    *,
    stream_timing: bool = False,
) -> Any:
    """``client`` with its provider calls recorded live and served from the record under replay.

    ``stream_timing=True`` records when each chunk of a stream arrived and, under replay,
    serves a stream recorded so with the recorded gaps between its chunks (without it, or for
    a stream recorded without it, the chunks come at once). Typed ``Any`` so the agent keeps
    the SDK's own method signatures in its editor.
    """
    if isinstance(client, anthropic.AsyncAnthropic):
        return wrap_client(
            client, edges, SDK, WrappedAsyncAnthropic, True, stream_timing=stream_timing
        )
    if isinstance(client, anthropic.Anthropic):
        return wrap_client(client, edges, SDK, WrappedAnthropic, False, stream_timing=stream_timing)
    raise ConfigError(
        f"wrap(client, edges) needs an anthropic.Anthropic or AsyncAnthropic, got {client!r}"
    )
