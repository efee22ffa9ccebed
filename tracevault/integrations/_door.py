"""The one door of a wrapped SDK client: its HTTP client, where every provider call passes.

The SDKs send every call, whatever resource or option made it (``with_options``,
``with_raw_response``, ``.parse()``, ``.stream()``, pagination, methods not written yet),
through ``client._client.send(request)``. A wrapped client's ``_client`` is a :class:`Door`
over the HTTP client it had, so each request is classified before anything leaves the
process (:meth:`Sdk.plan`):

- a model endpoint (``POST`` with a JSON body to ``chat/completions``, ``responses``,
  ``embeddings``, ``messages``, …) is one ``MODEL_CALL`` crossing: live the request is sent
  through the original HTTP client and its answer (a stream read to its end) recorded as
  ``{"asked_tools", "model", "response"}`` (a stream: ``{"asked_tools", "model", "stream",
  "tool_calls", "usage"}``); the request recorded is ``{"provider", "api", "params"}``, the
  JSON body as sent, so records made by the earlier method-level adapter replay unchanged;
- a read (``GET``, and token counting) is one ``EXTERNAL_STATE`` read named by the method,
  path, query and body (``openai GET models``), the answer's JSON recorded;
- anything else (uploads, deletes, batch jobs, binary answers) is refused with a
  :class:`~tracevault.errors.ConfigError` naming the method and path: it could not be served
  under replay.

Both ways the SDK gets an HTTP response rebuilt from the record (JSON, or server-sent events),
so it parses live exactly what replay will serve, and under replay no socket is opened. A door
made with ``stream_timing`` (``wrap(client, edges, stream_timing=True)``) also records, with a
stream, each event's arrival in seconds from the response's headers (:data:`CHUNK_OFFSETS`),
and serves such a record paced: each event the recorded gap after the one before it (the
first its offset after the SDK starts reading; ``time.sleep`` sync, ``asyncio.sleep`` async).
Gaps, not a schedule: an event served late does not shorten the next gap to catch up.
Without the key, or without the option, a stream is served at once, as before.

A provider error status is raised as the SDK's own exception inside the crossing (so the
record holds its type and message, as before), then handed to the SDK as the error response
it is (:data:`ERROR_KEY` carries the exception), so the SDK's own retry loop runs as it does
unwrapped: a retried 429 or 5xx is one recorded crossing per attempt, and the exception the
agent finally gets is the recorded one (docs/design.md, the wrapped clients). Under replay the
rebuilt response says ``retry-after-ms: 1``: the SDK retries where the record says it did,
without waiting. Exceptions of tracevault (a divergence, a refusal) are carried through the
SDK's own error handling (:class:`Sdk.carrier`) and raised as themselves by the wrapped
client's ``request`` (:mod:`tracevault.integrations._client`).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx
import httpx2

from tracevault.edges import JSON, Edges
from tracevault.errors import ConfigError
from tracevault.integrations._core import Api, _seed
from tracevault.recorded_error import recorded_type

__all__ = [
    "CHUNK_OFFSETS",
    "ERROR_KEY",
    "AsyncDoor",
    "Door",
    "Plan",
    "Sdk",
    "carried",
    "sse_events",
]

CHUNK_OFFSETS = "chunk_offsets"
"""Key of a stream record (``stream_timing=True``): each event's arrival, in seconds from the
response's headers, one per ``stream`` event. Records without it replay instantly."""

ERROR_KEY = "tracevault.error"
"""Extension of an error response a door hands the SDK: the SDK error the crossing raised
(live) or the record holds (replay), returned by the wrapped client's
``_make_status_error_from_response``."""

_JSON_TYPES = ("application/json", "text/json")


def _timeout(given: Any, kind: Any = httpx2.Timeout) -> Any:
    """``given`` (an httpx2 or a legacy httpx ``Timeout``) as a ``kind`` one: the SDK gives
    its HTTP client httpx2's, a legacy ``httpx.Client`` (``with_options(http_client=...)``)
    reads another as one number for all four and fails to connect."""
    if isinstance(given, kind) or not isinstance(given, httpx2.Timeout | httpx.Timeout):
        return given
    parts = ("connect", "read", "write", "pool")
    return kind(**{p: getattr(given, p) for p in parts})


def _build(inner: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> httpx2.Request:
    """``inner.build_request``, with a timeout of the kind ``inner`` reads."""
    if "timeout" in kwargs:
        legacy = isinstance(inner, httpx.Client | httpx.AsyncClient)
        kwargs["timeout"] = _timeout(kwargs["timeout"], httpx.Timeout if legacy else httpx2.Timeout)
    built: httpx2.Request = inner.build_request(*args, **kwargs)
    return built


@dataclass(frozen=True, slots=True)
class Plan:
    """What one request is: a model call, a state read, or refused (``refusal`` set)."""

    path: str
    method: str
    api: str | None = None
    request: JSON = None
    seed: int | None = None
    state: str | None = None
    refusal: str | None = None


@dataclass(frozen=True)
class Sdk:
    """One provider SDK: its recorded model APIs and how its errors are made and carried."""

    provider: str
    apis: Mapping[str, Api]
    """Model endpoints by name (``chat.completions``): a ``POST`` there is a MODEL_CALL."""
    base_error: type[Exception]
    """The SDK's base exception: raised from the HTTP client, the SDK passes it on as is."""
    errors: Api
    """Any of the APIs: how a recorded error is raised again as the SDK's class."""
    reads: frozenset[str] = field(default_factory=frozenset)
    """``POST`` endpoints that only read (token counting): recorded as state reads."""

    def plan(self, request: httpx2.Request) -> Plan:
        path = _api_path(request.url)
        method = request.method.upper()
        what = f"{self.provider} {method} /{path}"
        name = path.replace("/", ".")
        ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
        content = request.read()
        if content and ctype not in _JSON_TYPES:
            return Plan(path, method, refusal=f"{what} sends a {ctype or 'non-JSON'} body")
        try:
            body = json.loads(content) if content else None
        except ValueError:
            return Plan(path, method, refusal=f"{what} sends a body that is not JSON")
        if method == "POST" and name in self.apis and isinstance(body, dict):
            req = {"provider": self.provider, "api": name, "params": body}
            return Plan(path, method, api=name, request=req, seed=_seed(body))
        if method == "GET" and path.endswith("/content"):
            return Plan(path, method, refusal=f"{what} answers with file bytes, not JSON")
        if method == "GET" or (method == "POST" and name in self.reads):
            query = "&".join(sorted(str(request.url.query.decode()).split("&")))
            state = f"{what}" + (f"?{query}" if query else "")
            if content:
                state += " " + json.dumps(body, sort_keys=True, separators=(",", ":"))
            return Plan(path, method, state=state)
        return Plan(path, method, refusal=what)

    def refuse(self, plan: Plan) -> Exception:
        exc = ConfigError(
            f"{plan.refusal} is not recorded by tracevault: a replay could not serve it, so "
            "the wrapped client refuses it before it leaves the process. Make this call "
            "outside the recorded agent, or behind a tool (edges.tool) whose result is "
            f"recorded. Recorded: model calls ({', '.join(sorted(self.apis))}) and reads (GET)"
        )
        return self.carry(exc)

    def carry(self, exc: Exception) -> Exception:
        """``exc`` inside an SDK error, which the SDK passes on untouched to the wrapped
        client's ``request``, which raises ``exc`` itself (``tracevault.integrations._client``)."""
        made = _carrier(self.base_error)(str(exc))
        made.original = exc  # type: ignore[attr-defined]
        return made


_CARRIERS: dict[type[Exception], type[Exception]] = {}


def _carrier(base: type[Exception]) -> type[Exception]:
    cls = _CARRIERS.get(base)
    if cls is None:
        cls = _CARRIERS[base] = type("TracevaultCarried", (base,), {"original": None})
    return cls


def carried(exc: BaseException) -> BaseException | None:
    """The tracevault exception an SDK error carries, or None."""
    original = getattr(exc, "original", None) if type(exc) in _CARRIERS.values() else None
    return original if isinstance(original, BaseException) else None


def _api_path(url: httpx2.URL) -> str:
    """The path after the API version (``/v1/chat/completions`` -> ``chat/completions``)."""
    path = url.path
    _, sep, rest = path.partition("/v1/")
    return (rest if sep else path).strip("/")


class _Sse:
    """Server-sent events parsed line by line; ``timed``: each event's arrival kept in
    ``offsets`` (seconds from the parser's making), so a live stream records its timing."""

    def __init__(self, *, timed: bool = False) -> None:
        self.start = time.monotonic() if timed else None
        self.data: list[str] = []
        self.events: list[JSON] = []
        self.offsets: list[float] = []

    def line(self, line: str) -> None:
        """One line; a blank line after ``data:`` completes an event (``[DONE]`` dropped)."""
        if line:
            if line.startswith("data:"):
                self.data.append(line[5:].lstrip(" "))
            return
        text, self.data = "\n".join(self.data), []
        if text and text.strip() != "[DONE]":
            self.events.append(json.loads(text))
            if self.start is not None:
                self.offsets.append(round(time.monotonic() - self.start, 6))


def sse_events(lines: Iterable[str]) -> list[JSON]:
    """The JSON ``data`` of each server-sent event (``[DONE]`` dropped), in order."""
    sse = _Sse()
    for line in [*lines, ""]:
        sse.line(line)
    return sse.events


def _sse_event(ev: JSON) -> bytes:
    """One recorded event as the wire carried it: ``event: <type>`` where the event has one."""
    kind = ev.get("type") if isinstance(ev, dict) else None
    head = f"event: {kind}\n" if isinstance(kind, str) else ""
    return f"{head}data: {json.dumps(ev)}\n\n".encode()


class _Pacer:
    """When each recorded stream event is due under replay: its recorded offset after the one
    before, counted from when that one was handed to the SDK. One clock for ``Door`` and
    ``AsyncDoor``, which differ only in how they wait."""

    def __init__(self) -> None:
        self._last, self._previous = time.monotonic(), 0.0

    def due(self, offset: float) -> float:
        """Seconds until the event recorded at ``offset`` is due (none left: <= 0)."""
        return self._last + offset - self._previous - time.monotonic()

    def sent(self, ev: JSON, offset: float) -> bytes:
        """The event's bytes, now handed on: the next one is due from here."""
        self._last, self._previous = time.monotonic(), offset
        return _sse_event(ev)


def _offsets(recorded: JSON) -> list[float] | None:
    """A stream record's chunk offsets, if it has one per event (``stream_timing=True``)."""
    offsets = recorded.get(CHUNK_OFFSETS) if isinstance(recorded, dict) else None
    if not isinstance(offsets, list) or len(offsets) != len(recorded["stream"]):
        return None
    return offsets if all(isinstance(o, int | float) for o in offsets) else None


class _Unused(httpx2.BaseTransport):
    """A door's own transport, which nothing sends through: every request goes through the
    SDK's client (``inner``). Given one, httpx builds no default transport, whose SSL context
    (the CA bundle loaded) cost ~45 ms per wrapped client, so per recorded run; and reads no
    proxy settings, which are the inner client's to honour."""

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        raise ConfigError(f"{request.url}: a recorded door sends through its SDK's own client")


class _AsyncUnused(httpx2.AsyncBaseTransport):
    """:class:`_Unused` for the async doors."""

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        raise ConfigError(f"{request.url}: a recorded door sends through its SDK's own client")


class _Base:
    """What the sync and async doors share: classify, record, rebuild, carry errors."""

    def _setup(
        self,
        sdk: Sdk,
        edges: Edges,
        inner: Any,
        status_error: Callable[..., Any],
        stream_timing: bool,
    ) -> None:
        self.sdk, self.edges, self.inner = sdk, edges, inner
        self.status_error = status_error
        self.stream_timing = stream_timing

    def _timed(self, plan: Plan, response: httpx2.Response) -> bool:
        """Whether this answer is a model stream to read event by event, timing each."""
        ctype = response.headers.get("content-type", "")
        return (
            self.stream_timing
            and plan.api is not None
            and response.status_code < 400
            and ctype.startswith("text/event-stream")
        )

    def _timed_record(self, plan: Plan, sse: _Sse) -> JSON:
        """A stream's record with each event's offset from the response's headers."""
        assert plan.api is not None
        sse.line("")  # the last event, if the stream did not end with a blank line
        recorded = self.sdk.apis[plan.api].record_stream(sse.events)
        recorded[CHUNK_OFFSETS] = sse.offsets
        return recorded

    def _paced(self, events: list[JSON], offsets: list[float]) -> Any:
        raise NotImplementedError

    def _recorded(self, plan: Plan, response: httpx2.Response, content: bytes) -> JSON:
        if response.status_code >= 400:
            raise self.status_error(response)
        ctype = response.headers.get("content-type", "")
        if plan.state is not None:
            if content and not ctype.startswith(_JSON_TYPES):
                raise ConfigError(
                    f"{self.sdk.provider} {plan.method} /{plan.path} answered with {ctype!r}, "
                    "which tracevault cannot record as a read: make this call outside the "
                    "recorded agent"
                )
            return json.loads(content) if content else None
        assert plan.api is not None
        api = self.sdk.apis[plan.api]
        if ctype.startswith("text/event-stream"):
            return api.record_stream(sse_events(content.decode().splitlines()))
        return api.record(json.loads(content))

    def _served(self, plan: Plan, recorded: JSON, request: httpx2.Request) -> httpx2.Response:
        content: Any
        if plan.state is None and isinstance(recorded, dict) and "stream" in recorded:
            events, ctype = recorded["stream"], "text/event-stream"
            offsets = _offsets(recorded) if self.stream_timing else None
            if offsets is None:
                content = b"".join(_sse_event(ev) for ev in events)
            else:
                content = self._paced(events, offsets)
        else:
            body = recorded if plan.state is not None else recorded["response"]
            content, ctype = json.dumps(body).encode(), "application/json"
        return httpx2.Response(
            200, headers={"content-type": ctype}, content=content, request=request
        )

    def _error_response(self, failed: Exception, request: httpx2.Request) -> Any:
        """The error response to hand the SDK for a status error, or None to raise ``failed``.

        Live it is the provider's own response (its retry headers); under replay a rebuild
        with the recorded status and a 1 ms ``retry-after-ms``."""
        if not isinstance(failed, self.sdk.errors.status_error):
            return None
        got: Any = getattr(failed, "response", None)
        if not isinstance(got, httpx2.Response | httpx.Response):
            return None
        if got.request is request:
            got.extensions[ERROR_KEY] = failed
            return got
        return httpx2.Response(
            got.status_code,
            headers={"retry-after-ms": "1", "content-type": "application/json"},
            content=b"{}",
            request=request,
            extensions={ERROR_KEY: failed},
        )

    def _failed(self, exc: Exception, request: httpx2.Request) -> Exception:
        """What the SDK is handed for an exception of the crossing."""
        name = recorded_type(exc)
        if name is not None:
            made = self.sdk.errors.sdk_error(name, str(exc), str(request.url))
            if made is not None:
                return made
            cls: Any = getattr(httpx2, name.rpartition(".")[2], None)
            named = name.startswith("httpx2.") and isinstance(cls, type)
            if named and issubclass(cls, httpx2.RequestError):
                rebuilt: Exception = cls(str(exc), request=request)
                return rebuilt
        if isinstance(exc, httpx2.RequestError | self.sdk.base_error):
            return exc  # the SDK's own: it handles these as it would live
        return self.sdk.carry(exc)


class Door(_Base, httpx2.Client):
    """The HTTP client of a wrapped sync SDK client (see the module docstring)."""

    def __init__(
        self,
        sdk: Sdk,
        edges: Edges,
        inner: httpx2.Client,
        status_error: Callable[..., Any],
        stream_timing: bool = False,
    ) -> None:
        super().__init__(timeout=_timeout(inner.timeout), transport=_Unused())
        self._setup(sdk, edges, inner, status_error, stream_timing)

    def _paced(self, events: list[JSON], offsets: list[float]) -> Iterator[bytes]:
        pacer = _Pacer()
        for ev, offset in zip(events, offsets, strict=True):
            if (wait := pacer.due(offset)) > 0:
                time.sleep(wait)
            yield pacer.sent(ev, offset)

    def build_request(self, *args: Any, **kwargs: Any) -> httpx2.Request:
        return _build(self.inner, args, kwargs)

    def send(self, request: httpx2.Request, **kwargs: Any) -> httpx2.Response:
        plan = self.sdk.plan(request)
        if plan.refusal is not None:
            raise self.sdk.refuse(plan)
        kwargs["stream"] = True

        def live() -> JSON:
            response = self.inner.send(request, **kwargs)
            try:
                if not self._timed(plan, response):
                    return self._recorded(plan, response, response.read())
                sse = _Sse(timed=True)
                for line in response.iter_lines():
                    sse.line(line)
                return self._timed_record(plan, sse)
            finally:
                response.close()

        try:
            if plan.state is not None:
                recorded = self.edges.state(plan.state, live)
            else:
                recorded = self.edges.model(
                    plan.request, model=None, seed=plan.seed, call=lambda _r, **_k: live()
                )
        except Exception as exc:
            failed = self._failed(exc, request)
            if (response := self._error_response(failed, request)) is not None:
                return response  # type: ignore[no-any-return]
            raise failed from None
        return self._served(plan, recorded, request)

    def close(self) -> None:
        self.inner.close()
        super().close()


class AsyncDoor(_Base, httpx2.AsyncClient):
    """:class:`Door` for the async SDK clients."""

    def __init__(
        self,
        sdk: Sdk,
        edges: Edges,
        inner: httpx2.AsyncClient,
        status_error: Callable[..., Any],
        stream_timing: bool = False,
    ) -> None:
        super().__init__(timeout=_timeout(inner.timeout), transport=_AsyncUnused())
        self._setup(sdk, edges, inner, status_error, stream_timing)

    async def _paced(self, events: list[JSON], offsets: list[float]) -> AsyncIterator[bytes]:
        pacer = _Pacer()
        for ev, offset in zip(events, offsets, strict=True):
            if (wait := pacer.due(offset)) > 0:
                await asyncio.sleep(wait)
            yield pacer.sent(ev, offset)

    def build_request(self, *args: Any, **kwargs: Any) -> httpx2.Request:
        return _build(self.inner, args, kwargs)

    async def send(self, request: httpx2.Request, **kwargs: Any) -> httpx2.Response:
        plan = self.sdk.plan(request)
        if plan.refusal is not None:
            raise self.sdk.refuse(plan)
        kwargs["stream"] = True

        async def live() -> JSON:
            response = await self.inner.send(request, **kwargs)
            try:
                if not self._timed(plan, response):
                    return self._recorded(plan, response, await response.aread())
                sse = _Sse(timed=True)
                async for line in response.aiter_lines():
                    sse.line(line)
                return self._timed_record(plan, sse)
            finally:
                await response.aclose()

        try:
            if plan.state is not None:
                recorded = await self.edges.astate(plan.state, live)
            else:
                recorded = await self.edges.amodel(
                    plan.request, model=None, seed=plan.seed, call=lambda _r, **_k: live()
                )
        except Exception as exc:
            failed = self._failed(exc, request)
            if (response := self._error_response(failed, request)) is not None:
                return response  # type: ignore[no-any-return]
            raise failed from None
        return self._served(plan, recorded, request)

    async def aclose(self) -> None:
        await self.inner.aclose()
        await super().aclose()
