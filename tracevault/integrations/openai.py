"""Record and replay an agent written against the OpenAI SDK: ``client = wrap(OpenAI(), edges)``.

The wrapped client is the SDK's own (a copy of ``client``), with one recorded door: its HTTP
client (``tracevault.integrations._door``). Every call it makes, whatever made it
(``chat.completions.create``/``parse``/``stream``, ``beta.chat.completions.parse``,
``responses.*``, ``embeddings.create``, ``with_options(...)``, ``with_raw_response``), is a
MODEL_CALL crossing (``chat/completions``, ``completions``, ``responses``, ``embeddings``,
``moderations``) or a recorded read (``GET``: ``models.list``, ``files.list``, retrievals);
anything else (uploads, deletes, batches, audio, binary answers) and the WebSocket APIs
(``realtime``, ``responses.connect``) raise a ``ConfigError`` naming the method before any
socket opens. Under replay the SDK parses the recorded answer as it parsed it live, and no
request leaves the process.

Recorded per model call: the request as sent (the JSON body), the full response (a stream as
its chunks), the exact build in the event's ``model`` (``response.model``; an alias there is
refused: embedding models have no dated builds, allow their exact id with
``TRACEVAULT_MODEL_ALLOW``), the ``seed``, the token usage, and the tool calls the model asked
for (summed up as ``tool_calls`` for a stream).

Needs the ``openai`` extra: ``pip install 'tracevault[openai]'``.
"""

from __future__ import annotations

from typing import Any

from tracevault.errors import missing_extra

try:
    import openai
except ImportError as exc:  # the extra is not installed: say which one
    raise missing_extra("openai", exc) from exc

from tracevault.callsite import add_harness_module
from tracevault.edges import JSON, Edges
from tracevault.errors import ConfigError
from tracevault.integrations._client import AsyncRecorded, Recorded, wrap_client
from tracevault.integrations._core import Api, no_tool_calls, plain_stream
from tracevault.integrations._door import Sdk

__all__ = ["WrappedAsyncOpenAI", "WrappedOpenAI", "wrap"]

# The crossing's call site is the agent's line, not the SDK's.
for _module in ("openai", "httpx2"):
    add_harness_module(_module)


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


def _api(summarize: Any = plain_stream, tool_calls: Any = no_tool_calls) -> Api:
    return Api(summarize, tool_calls, openai.APIStatusError, openai.APIConnectionError)


_APIS = {
    "chat.completions": _api(_chat_stream, _chat_tool_calls),
    "responses": _api(_responses_stream, _responses_tool_calls),
    "completions": _api(),
    "embeddings": _api(),
    "moderations": _api(),
}
SDK = Sdk(
    "openai",
    _APIS,
    openai.OpenAIError,
    _APIS["chat.completions"],
    frozenset({"responses.input_tokens"}),
)


def _no_websocket(self: Any, *_args: Any, **_kwargs: Any) -> Any:
    raise ConfigError(
        "openai WebSocket APIs (realtime, responses.connect) are not recorded by tracevault: "
        "they do not pass the wrapped client's HTTP door, so a replay could not serve them. "
        "Use the HTTP APIs (chat.completions, responses) in a recorded agent"
    )


class WrappedOpenAI(Recorded):
    """Mixed in before the class of a wrapped ``openai.OpenAI``: no unrecorded WebSocket."""

    __slots__ = ()

    _websocket_query_params = _no_websocket
    _websocket_query_params_fallback = _no_websocket


class WrappedAsyncOpenAI(AsyncRecorded):
    """:class:`WrappedOpenAI` for ``openai.AsyncOpenAI``."""

    __slots__ = ()

    _websocket_query_params = _no_websocket
    _websocket_query_params_fallback = _no_websocket


def wrap(
    client: openai.OpenAI | openai.AsyncOpenAI, edges: Edges, *, stream_timing: bool = False
) -> Any:
    """``client`` with its provider calls recorded live and served from the record under replay.

    ``stream_timing=True`` records when each chunk of a stream arrived and, under replay,
    serves a stream recorded so with the recorded gaps between its chunks (without it, or for
    a stream recorded without it, the chunks come at once). Typed ``Any`` so the agent keeps
    the SDK's own method signatures in its editor.
    """
    if isinstance(client, openai.AsyncOpenAI):
        return wrap_client(
            client, edges, SDK, WrappedAsyncOpenAI, True, stream_timing=stream_timing
        )
    if isinstance(client, openai.OpenAI):
        return wrap_client(client, edges, SDK, WrappedOpenAI, False, stream_timing=stream_timing)
    raise ConfigError(f"wrap(client, edges) needs an openai.OpenAI or AsyncOpenAI, got {client!r}")
