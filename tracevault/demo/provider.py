"""A local stand-in for the OpenAI (Chat Completions, Responses) and Anthropic (Messages) HTTP
APIs, JSON and SSE streaming: the README example, the adapter tests and the overhead benchmark
drive the real SDKs over real sockets with it, offline and deterministically.

Deterministic answers: with tools offered and no tool result yet, the model asks for the
first tool with ``{"city": "Paris"}`` (every tool offered, in parallel, when a message says
``[parallel]``: Chat Completions, streamed or not; a Chat Completions tool that takes an
``agent_name`` from a list, a framework's transfer to a sub-agent, is asked for the first
agent listed); otherwise it answers ``"echo: <last text>"``. A
request whose messages contain ``429`` is refused with HTTP 429 (rate limited). A requested
model in ``BUILDS`` is answered with its dated build; any other is echoed (so a request for
``"x-latest"`` comes back naming the alias). Every request is kept in
``server.requests`` and every accepted connection counted in ``server.connections``, so a test
can assert that replay sent none and opened none. Besides the model APIs it answers
embeddings, ``GET /v1/models``, ``GET /v1/files`` and Anthropic token counting; a
``response_format`` JSON schema (``.parse()``, streamed or not) is answered with
``{"answer": <text>}``.
"""

from __future__ import annotations

import base64
import json
import struct
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["BUILDS", "ProviderServer", "Seen", "provider_server"]

BUILDS = {
    "gpt-4o-mini": "gpt-4o-mini-2024-07-18",
    "claude-haiku-4-5": "claude-haiku-4-5-20251001",
}
CREATED = 1_790_000_000
ARGS = '{"city": "Paris"}'


@dataclass
class Seen:
    path: str
    body: dict[str, Any]


@dataclass
class ProviderServer:
    url: str
    requests: list[Seen] = field(default_factory=list)
    connections: int = 0
    chunk_delay: float = 0.0
    """Seconds between the events of a stream (a paced stream, as a real model streams)."""


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text") or p.get("content") or "" for p in content if isinstance(p, dict)]
        return " ".join(str(p) for p in parts if isinstance(p, str))
    return ""


def _usage_words(text: str) -> int:
    return max(1, len(text.split()))


# -- OpenAI Chat Completions -----------------------------------------------------------------
def _chat_args(tool: dict[str, Any]) -> str:
    """``ARGS``, or for a transfer tool (an ``agent_name`` from a list) the first agent."""
    props = ((tool.get("function") or {}).get("parameters") or {}).get("properties") or {}
    agents = (props.get("agent_name") or {}).get("enum")
    return json.dumps({"agent_name": agents[0]}) if agents else ARGS


def _chat_answer(body: dict[str, Any]) -> tuple[str | None, str]:
    msgs = body.get("messages") or []
    if body.get("tools") and not any(m.get("role") == "tool" for m in msgs):
        return body["tools"][0]["function"]["name"], _chat_args(body["tools"][0])
    return None, "echo: " + _text(msgs[-1].get("content") if msgs else "")


def _chat_text(body: dict[str, Any], tool: str | None, text: str) -> str:
    """The answer's text: a ``response_format`` JSON schema is answered as ``{"answer": ...}``."""
    if (body.get("response_format") or {}).get("type") == "json_schema" and not tool:
        return json.dumps({"answer": text})
    return text


def _chat_tools(body: dict[str, Any], tool: str) -> list[str]:
    """The tools asked for: the first, or every one offered when a message says [parallel]."""
    if "[parallel]" in json.dumps(body.get("messages") or []):
        return [t["function"]["name"] for t in body["tools"]]
    return [tool]


def chat(body: dict[str, Any]) -> dict[str, Any]:
    tool, text = _chat_answer(body)
    text = _chat_text(body, tool, text)
    message: dict[str, Any] = {"role": "assistant", "content": None if tool else text}
    if tool:
        message["tool_calls"] = [
            {"id": f"call_{i}", "type": "function", "function": {"name": n, "arguments": text}}
            for i, n in enumerate(_chat_tools(body, tool), 1)
        ]
    n = _usage_words(text)
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": CREATED,
        "model": BUILDS.get(body["model"], body["model"]),
        "system_fingerprint": "fp_local",
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": "tool_calls" if tool else "stop",
            }
        ],
        "usage": {"prompt_tokens": 7, "completion_tokens": n, "total_tokens": 7 + n},
    }


def chat_stream(body: dict[str, Any]) -> Iterator[tuple[str | None, str]]:
    tool, text = _chat_answer(body)
    text = _chat_text(body, tool, text)
    base = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": CREATED,
        "model": BUILDS.get(body["model"], body["model"]),
    }

    def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return json.dumps({**base, "choices": [choice]})

    yield None, chunk({"role": "assistant", "content": ""})
    if tool:
        for i, name in enumerate(_chat_tools(body, tool)):
            start = {
                "index": i,
                "id": f"call_{i + 1}",
                "type": "function",
                "function": {"name": name, "arguments": ""},
            }
            yield None, chunk({"tool_calls": [start]})
            for piece in (text[:6], text[6:]):
                yield None, chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]})
    else:
        for word in text.split(" "):
            yield None, chunk({"content": word + " "})
    yield None, chunk({}, "tool_calls" if tool else "stop")
    if (body.get("stream_options") or {}).get("include_usage"):
        n = _usage_words(text)
        usage = {"prompt_tokens": 7, "completion_tokens": n, "total_tokens": 7 + n}
        yield None, json.dumps({**base, "choices": [], "usage": usage})
    yield None, "[DONE]"


# -- OpenAI Responses --------------------------------------------------------------------------
def _responses_answer(body: dict[str, Any]) -> tuple[str | None, str]:
    inp = body.get("input")
    items = inp if isinstance(inp, list) else [{"role": "user", "content": inp or ""}]
    if body.get("tools") and not any(i.get("type") == "function_call_output" for i in items):
        return body["tools"][0]["name"], ARGS
    last = items[-1]
    return None, "echo: " + _text(last.get("content") or last.get("output") or "")


def _response_obj(body: dict[str, Any], status: str, output: list[Any]) -> dict[str, Any]:
    text = (
        "".join(c["text"] for o in output if o["type"] == "message" for c in o["content"]) or ARGS
    )
    n = _usage_words(text)
    return {
        "id": "resp_1",
        "object": "response",
        "created_at": CREATED,
        "model": BUILDS.get(body["model"], body["model"]),
        "status": status,
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": body.get("tools") or [],
        "usage": {
            "input_tokens": 7,
            "output_tokens": n,
            "total_tokens": 7 + n,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        },
    }


def _responses_output(body: dict[str, Any]) -> list[dict[str, Any]]:
    tool, text = _responses_answer(body)
    if tool:
        return [
            {
                "type": "function_call",
                "id": "fc_1",
                "call_id": "call_1",
                "name": tool,
                "arguments": text,
                "status": "completed",
            }
        ]
    return [
        {
            "type": "message",
            "id": "msg_1",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        }
    ]


def responses(body: dict[str, Any]) -> dict[str, Any]:
    return _response_obj(body, "completed", _responses_output(body))


def responses_stream(body: dict[str, Any]) -> Iterator[tuple[str | None, str]]:
    output = _responses_output(body)
    seq = iter(range(1000))

    def ev(kind: str, **fields: Any) -> tuple[str, str]:
        return kind, json.dumps({"type": kind, "sequence_number": next(seq), **fields})

    yield ev("response.created", response=_response_obj(body, "in_progress", []))
    item = output[0]
    if item["type"] == "message":
        for word in item["content"][0]["text"].split(" "):
            yield ev(
                "response.output_text.delta",
                item_id="msg_1",
                output_index=0,
                content_index=0,
                delta=word + " ",
                logprobs=[],
            )
    yield ev("response.output_item.done", output_index=0, item=item)
    yield ev("response.completed", response=_response_obj(body, "completed", output))


# -- Anthropic Messages ------------------------------------------------------------------------
def _messages_answer(body: dict[str, Any]) -> tuple[str | None, str]:
    msgs = body.get("messages") or []

    def has_result(m: dict[str, Any]) -> bool:
        c = m.get("content")
        return isinstance(c, list) and any(b.get("type") == "tool_result" for b in c)

    if body.get("tools") and not any(has_result(m) for m in msgs):
        return body["tools"][0]["name"], ARGS
    return None, "echo: " + _text(msgs[-1].get("content") if msgs else "")


def _message_obj(body: dict[str, Any], content: list[Any], stop: str | None) -> dict[str, Any]:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": BUILDS.get(body["model"], body["model"]),
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": 7, "output_tokens": 0 if stop is None else 5},
    }


def messages(body: dict[str, Any]) -> dict[str, Any]:
    tool, text = _messages_answer(body)
    if tool:
        block = {"type": "tool_use", "id": "toolu_1", "name": tool, "input": json.loads(text)}
        return _message_obj(body, [block], "tool_use")
    return _message_obj(body, [{"type": "text", "text": text}], "end_turn")


def messages_stream(body: dict[str, Any]) -> Iterator[tuple[str | None, str]]:
    tool, text = _messages_answer(body)

    def ev(kind: str, **fields: Any) -> tuple[str, str]:
        return kind, json.dumps({"type": kind, **fields})

    yield ev("message_start", message=_message_obj(body, [], None))
    if tool:
        yield ev(
            "content_block_start",
            index=0,
            content_block={"type": "tool_use", "id": "toolu_1", "name": tool, "input": {}},
        )
        for piece in (text[:6], text[6:]):
            yield ev(
                "content_block_delta",
                index=0,
                delta={"type": "input_json_delta", "partial_json": piece},
            )
    else:
        yield ev("content_block_start", index=0, content_block={"type": "text", "text": ""})
        for word in text.split(" "):
            yield ev(
                "content_block_delta", index=0, delta={"type": "text_delta", "text": word + " "}
            )
    yield ev("content_block_stop", index=0)
    yield ev(
        "message_delta",
        delta={"stop_reason": "tool_use" if tool else "end_turn", "stop_sequence": None},
        usage={"output_tokens": 5},
    )
    yield ev("message_stop")


# -- embeddings, listings, token counting ---------------------------------------------------------
def embeddings(body: dict[str, Any]) -> dict[str, Any]:
    inputs = body.get("input")
    texts = [inputs] if isinstance(inputs, str) else list(inputs or [])
    data = []
    for i, text in enumerate(texts):
        vector = [round(len(str(text)) / 10.0, 3), float(i), 0.5]
        value: Any = vector
        if body.get("encoding_format") == "base64":
            value = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
        data.append({"object": "embedding", "index": i, "embedding": value})
    n = sum(_usage_words(str(t)) for t in texts)
    usage = {"prompt_tokens": n, "total_tokens": n}
    return {"object": "list", "data": data, "model": body["model"], "usage": usage}


def count_tokens(body: dict[str, Any]) -> dict[str, Any]:
    return {"input_tokens": 7}


def _models(anthropic: bool) -> dict[str, Any]:
    if anthropic:
        model: dict[str, Any] = {
            "id": BUILDS["claude-haiku-4-5"],
            "type": "model",
            "display_name": "Claude Haiku 4.5",
            "created_at": "2025-10-01T00:00:00Z",
        }
        return {"data": [model], "has_more": False, "first_id": model["id"], "last_id": model["id"]}
    model = {
        "id": BUILDS["gpt-4o-mini"],
        "object": "model",
        "created": CREATED,
        "owned_by": "system",
    }
    return {"object": "list", "data": [model]}


FILES = {
    "object": "list",
    "data": [
        {
            "id": "file-1",
            "object": "file",
            "bytes": 12,
            "created_at": CREATED,
            "filename": "notes.txt",
            "purpose": "assistants",
            "status": "processed",
        }
    ],
    "has_more": False,
}


ROUTES = {
    "/v1/chat/completions": (chat, chat_stream),
    "/v1/responses": (responses, responses_stream),
    "/v1/messages": (messages, messages_stream),
    "/v1/messages/count_tokens": (count_tokens, None),
    "/v1/embeddings": (embeddings, None),
}


def _handler(server: ProviderServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # Headers and body are separate writes: without TCP_NODELAY, Nagle plus the client's
        # delayed ACK adds ~40 ms to a keep-alive call, and the overhead bench measures noise.
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def setup(self) -> None:
            server.connections += 1  # one handler per accepted connection
            super().setup()

        def do_GET(self) -> None:
            path = self.path.split("?")[0]
            server.requests.append(Seen(path, {}))
            if path == "/v1/models":
                self._send(200, _models("anthropic-version" in self.headers))
            elif path == "/v1/files":
                self._send(200, FILES)
            else:
                self._send(404, {"error": {"message": f"no route {path}", "type": "not_found"}})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            path = self.path.split("?")[0]
            server.requests.append(Seen(path, body))
            route = ROUTES.get(path)
            if route is None:
                self._send(404, {"error": {"message": f"no route {path}", "type": "not_found"}})
                return
            answer, stream = route
            if "429" in json.dumps(body.get("messages") or body.get("input") or ""):
                err = {"message": "rate limited: slow down", "type": "rate_limit_error"}
                self._send(429, {"type": "error", "error": err})
                return
            if not body.get("stream") or stream is None:
                self._send(200, answer(body))
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            for n, (event, data) in enumerate(stream(body)):
                if n and server.chunk_delay:
                    time.sleep(server.chunk_delay)
                head = f"event: {event}\n" if event else ""
                self.wfile.write(f"{head}data: {data}\n\n".encode())
                self.wfile.flush()
            self.close_connection = True

        def _send(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler


@contextmanager
def provider_server(chunk_delay: float = 0.0) -> Iterator[ProviderServer]:
    """The server on a free local port, in a thread; shut down (port closed) on exit.

    ``chunk_delay``: seconds between a stream's events (0: sent at once)."""
    state = ProviderServer(url="", chunk_delay=chunk_delay)
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    httpd.daemon_threads = True
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    thread = threading.Thread(target=httpd.serve_forever, name="provider-server", daemon=True)
    thread.start()
    try:
        yield state
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(10)
