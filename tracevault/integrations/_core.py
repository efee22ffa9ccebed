"""What the provider adapters record per model API: the answer's envelope and its errors.

A model call of a wrapped client (``tracevault.integrations._door``) records the provider's
answer as ``{"asked_tools", "model", "response"}`` (a stream: ``{"asked_tools", "model",
"stream", "tool_calls", "usage"}``): the JSON the provider sent, whole. The event's ``model``
is the build the provider answered with (``model=None`` crossing, see
``tracevault.edges.model_call_crossing``); an alias there is refused by the Recorder, the
answer kept in the record with the error. An error the record holds is raised again under
replay as the SDK's own exception class (:meth:`Api.sdk_error`).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx2

from tracevault.edges import JSON

__all__ = ["Api", "no_tool_calls", "plain_stream"]


def _seed(sent: Mapping[str, Any]) -> int | None:
    seed = sent.get("seed")
    return seed if isinstance(seed, int) and not isinstance(seed, bool) else None


def no_tool_calls(_response: JSON) -> list[JSON]:
    """The tool calls of an API that has none (embeddings, moderations)."""
    return []


def plain_stream(chunks: list[JSON]) -> JSON:
    """A stream of an API without tool calls, summed up: its build and last usage."""
    model = next((c.get("model") for c in chunks if isinstance(c, dict) and c.get("model")), None)
    usage = next(
        (c["usage"] for c in reversed(chunks) if isinstance(c, dict) and c.get("usage")), None
    )
    return {"model": model, "stream": chunks, "tool_calls": [], "usage": usage}


@dataclass(frozen=True, slots=True)
class Api:
    """One recorded model API (``chat.completions``, ``messages``): what its answers record."""

    summarize: Callable[[list[JSON]], JSON]
    """A stream's events as the recorded JSON: ``{"model", "stream", "tool_calls", "usage"}``."""
    tool_calls: Callable[[JSON], list[JSON]]
    """The tool calls a (non-stream) response asks for, as ``{"id", "name", "arguments"}``."""
    status_error: type[Exception]
    """The SDK's ``APIStatusError``: rebuilt under replay from a recorded error."""
    connection_error: type[Exception]
    """The SDK's ``APIConnectionError`` (``APITimeoutError`` under it)."""

    def sdk_error(self, recorded_type: str, message: str, url: str) -> Exception | None:
        """The SDK's own exception for an error the record says the call raised, or None.

        The record keeps the type and message; the SDK's constructors want an HTTP response
        or request, which are rebuilt (status from the message, no body) without a socket,
        so the agent's ``except openai.RateLimitError:`` takes the branch it took live.
        """
        module, _, name = recorded_type.rpartition(".")
        cls: Any = getattr(sys.modules.get(module), name, None)
        if not isinstance(cls, type):
            return None
        request = httpx2.Request("POST", url)
        made: Exception | None = None
        make: Any = cls  # the SDKs' constructors take keyword arguments Exception does not
        if issubclass(cls, self.status_error):
            status = _STATUS.match(message)
            if status is not None:
                response = httpx2.Response(int(status.group(1)), request=request)
                made = make(message, response=response, body=None)
        elif issubclass(cls, self.connection_error):
            try:
                made = make(message=message, request=request)
            except TypeError:  # APITimeoutError(request): its message is fixed
                made = make(request=request)
        return made

    def record(self, response: JSON) -> JSON:
        """What a non-stream call records: the response, the build, and the tools asked for."""
        model = response.get("model") if isinstance(response, dict) else None
        return _envelope({"model": model, "response": response}, self.tool_calls(response))

    def record_stream(self, chunks: list[JSON]) -> JSON:
        summary = self.summarize(chunks)
        return _envelope(summary, summary["tool_calls"])


_STATUS = re.compile(r"Error code: (\d{3})\b")


def _envelope(recorded: dict[str, Any], calls: list[JSON]) -> JSON:
    """Add ``asked_tools``: one ``name(arguments)`` string per tool call the model asked for.

    Its key sorts first in canonical JSON, so the short response shown by ``replay show`` on
    the timeline starts with the tools the model asked for.
    """
    asked = [f"{c.get('name')}({c.get('arguments') or ''})" for c in calls]
    return {"asked_tools": asked, **recorded}
