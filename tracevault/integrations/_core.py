"""What the provider adapters share: the request JSON, the crossing, the replayed streams.

Every wrapped SDK call is one ``MODEL_CALL`` crossing made through ``edges.model`` (or
``edges.amodel``) with a per-call callee (``call=``) and ``model=None``:

- live, the Recorder runs the callee, which makes the real SDK call (a stream is read to its
  end inside the crossing) and returns what is recorded: ``{"asked_tools", "model",
  "response"}`` (a stream: ``{"asked_tools", "model", "stream", "tool_calls", "usage"}``), the
  provider's JSON as it sent it (``model_dump(exclude_unset=True)``). The event's ``model`` is
  the build the provider answered with; an alias there is refused
  (``tracevault.edges.reported_model``), the answer kept in the record with the error;
- under replay, the replay edges compare the request and serve the recorded JSON; the callee
  is never called, so no socket is opened. An error the record holds is raised again as the
  SDK's own exception class (:meth:`Api.sdk_error`).

Both ways the agent gets SDK objects rebuilt from the recorded JSON with the SDK's own
``model_construct``, so it sees live exactly what replay will serve. The request recorded is
``{"provider", "api", "params"}``: the keyword arguments as sent, without the SDK's omitted
sentinels and without transport options (``extra_headers`` may hold credentials, ``timeout``
is not part of what the model was asked). Only ``create`` of a wrapped resource is reachable:
its other methods (``stream()``, ``parse()``, raw responses) would call the provider without
a record and reach the network under replay, so they raise a ``ConfigError`` naming
what is recorded.
"""

from __future__ import annotations

import re
import sys
import types
import typing
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import httpx2
from pydantic import BaseModel

from tracevault.edges import JSON, Edges
from tracevault.errors import ConfigError, PayloadError
from tracevault.replayer import RecordedError

__all__ = [
    "Api",
    "AsyncReplayedStream",
    "AsyncResource",
    "ClientProxy",
    "ReplayedStream",
    "Resource",
    "amodel_call",
    "build",
    "by_type",
    "dump",
    "model_call",
    "request_json",
    "sendable",
]

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)

# Options of the HTTP call, not of the model request.
_TRANSPORT = frozenset({"extra_headers", "extra_query", "timeout"})


def sendable(kwargs: Mapping[str, Any], omitted: tuple[type, ...]) -> dict[str, Any]:
    """The keyword arguments to send: omitted sentinels dropped, one-shot iterables made lists.

    ``messages`` may be a generator (the SDKs accept any iterable): it is read once here so
    the request recorded and the request sent are the same values.
    """
    out: dict[str, Any] = {}
    for key, value in kwargs.items():
        if isinstance(value, omitted):
            continue
        out[key] = list(value) if isinstance(value, Iterator | types.GeneratorType) else value
    return out


def dump(obj: BaseModel) -> JSON:
    """An SDK object as the JSON the provider sent (``exclude_unset``).

    The SDKs build their objects without validation, so a full dump would add nulls where
    their own types do not allow them, and the record would not rebuild.
    """
    return obj.model_dump(mode="json", exclude_unset=True)


def build(cls: type[M], data: JSON) -> M:
    """The SDK's object for recorded JSON, through the SDK's own lenient, recursive
    ``model_construct``: what it would have built from the same bytes off the wire."""
    return cls.model_construct(**data)


def by_type(union: Any) -> dict[str, type[BaseModel]]:
    """Each class of an SDK's discriminated event union by its ``type`` literal."""
    args = typing.get_args(union)
    members = typing.get_args(args[0]) if typing.get_origin(union) is typing.Annotated else args
    out: dict[str, type[BaseModel]] = {}
    for cls in members:
        for name in typing.get_args(cls.model_fields["type"].annotation):
            out[name] = cls
    return out


class StreamEvents:
    """Rebuilds one recorded stream event as the SDK's class for its ``type``.

    The class table is built on first use (walking an SDK's union is slow at import); a type
    this SDK does not know means the record came from another SDK version, which is named.
    """

    def __init__(self, union: Any, what: str, sdk: str, version: str) -> None:
        self._union = union
        self._what = what
        self._sdk = f"{sdk} {version}"
        self._types: dict[str, type[BaseModel]] | None = None

    def __call__(self, data: JSON) -> BaseModel:
        if self._types is None:
            self._types = by_type(self._union)
        kind = data.get("type", "") if isinstance(data, dict) else ""
        cls = self._types.get(kind if isinstance(kind, str) else "")
        if cls is None:
            raise ConfigError(
                f"a recorded {self._what} stream event has type {kind!r}, which this "
                f"{self._sdk} does not know; replay with the SDK that recorded it"
            )
        return build(cls, data)


def _json(value: Any, path: str) -> JSON:
    if value is None or isinstance(value, str | bool | int | float):
        return value
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", exclude_unset=True)
    if isinstance(value, Mapping):
        out: dict[str, JSON] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise PayloadError(f"{path} has a non-string key {key!r}", path)
            out[key] = _json(item, f"{path}.{key}")
        return out
    if isinstance(value, list | tuple):
        return [_json(item, f"{path}[{i}]") for i, item in enumerate(value)]
    if isinstance(value, Iterable) and not isinstance(value, bytes | bytearray):
        return [_json(item, f"{path}[{i}]") for i, item in enumerate(value)]
    raise PayloadError(
        f"{path} is a {type(value).__name__}, which a record cannot hold as JSON; pass plain "
        "JSON values (dicts, lists, str, numbers) to the wrapped client",
        path,
    )


def request_json(provider: str, api: str, sent: Mapping[str, Any]) -> JSON:
    """What the crossing records as its request (and what replay compares)."""
    params = {k: v for k, v in sent.items() if k not in _TRANSPORT}
    return {"provider": provider, "api": api, "params": _json(params, "$.request.params")}


def _seed(sent: Mapping[str, Any]) -> int | None:
    seed = sent.get("seed")
    return seed if isinstance(seed, int) and not isinstance(seed, bool) else None


def model_call(
    edges: Edges, request: JSON, sent: Mapping[str, Any], live: Callable[[], JSON]
) -> JSON:
    """One MODEL_CALL crossing; ``live()`` runs only when recording."""
    return edges.model(request, model=None, seed=_seed(sent), call=lambda _r, **_kw: live())


async def amodel_call(
    edges: Edges, request: JSON, sent: Mapping[str, Any], live: Callable[[], Awaitable[JSON]]
) -> JSON:
    """:func:`model_call` for the async clients."""
    return await edges.amodel(request, model=None, seed=_seed(sent), call=lambda _r, **_kw: live())


class ReplayedStream(Generic[T]):
    """A recorded stream served as the SDK's chunk objects, in order.

    Live the stream was read to its end inside the crossing (so the record holds all of it);
    the agent iterates this object the way it iterates the SDK's ``Stream``. ``recorded`` is
    the JSON the crossing recorded (chunks plus the model, usage and tool calls summed up).
    """

    def __init__(self, items: list[T], recorded: JSON) -> None:
        self._items = iter(items)
        self.recorded = recorded

    def __iter__(self) -> Iterator[T]:
        return self

    def __next__(self) -> T:
        return next(self._items)

    def __enter__(self) -> ReplayedStream[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._items = iter(())


class AsyncReplayedStream(Generic[T]):
    """:class:`ReplayedStream` for the async clients (``async for``, ``async with``)."""

    def __init__(self, items: list[T], recorded: JSON) -> None:
        self._items = iter(items)
        self.recorded = recorded

    def __aiter__(self) -> AsyncIterator[T]:
        return self

    async def __anext__(self) -> T:
        try:
            return next(self._items)
        except StopIteration:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> AsyncReplayedStream[T]:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        self._items = iter(())


@dataclass(frozen=True, slots=True)
class Api:
    """One recorded SDK method (``create`` of a resource) and how its answers are rebuilt."""

    provider: str
    name: str
    omitted: tuple[type, ...]
    rebuild: Callable[[JSON], Any]
    """The SDK object for a recorded (non-stream) response."""
    rebuild_chunk: Callable[[JSON], Any]
    """The SDK object for one recorded stream chunk or event."""
    summarize: Callable[[list[JSON]], JSON]
    """A stream's chunks as the recorded JSON: ``{"model", "stream", "tool_calls", "usage"}``."""
    tool_calls: Callable[[JSON], list[JSON]]
    """The tool calls a (non-stream) response asks for, as ``{"id", "name", "arguments"}``."""
    status_error: type[Exception]
    """The SDK's ``APIStatusError``: rebuilt under replay from a recorded error."""
    connection_error: type[Exception]
    """The SDK's ``APIConnectionError`` (``APITimeoutError`` under it)."""

    def sdk_error(self, recorded: RecordedError, url: str) -> Exception | None:
        """The SDK's own exception for an error the record says the call raised, or None.

        The record keeps the type and message; the SDK's constructors want an HTTP response
        or request, which are rebuilt (status from the message, no body) without a socket,
        so the agent's ``except openai.RateLimitError:`` takes the branch it took live.
        """
        module, _, name = recorded.recorded_type.rpartition(".")
        cls: Any = getattr(sys.modules.get(module), name, None)
        if not isinstance(cls, type):
            return None
        request = httpx2.Request("POST", url)
        made: Exception | None = None
        make: Any = cls  # the SDKs' constructors take keyword arguments Exception does not
        if issubclass(cls, self.status_error):
            status = _STATUS.match(recorded.message)
            if status is not None:
                response = httpx2.Response(int(status.group(1)), request=request)
                made = make(recorded.message, response=response, body=None)
        elif issubclass(cls, self.connection_error):
            try:
                made = make(message=recorded.message, request=request)
            except TypeError:  # APITimeoutError(request): its message is fixed
                made = make(request=request)
        return made

    def record(self, response: JSON) -> JSON:
        """What a non-stream call records: the response, the build, and the tools asked for."""
        return _envelope(
            {"model": response.get("model"), "response": response}, self.tool_calls(response)
        )

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


class Resource:
    """A wrapped SDK resource: ``create`` crosses the edges; nothing else is reachable.

    Other methods of the resource (``stream()``, ``parse()``, raw responses) would call the
    provider without being recorded, and reach the network under replay: they raise instead.
    """

    def __init__(self, api: Api, resource: Any, edges: Edges, base_url: object = "") -> None:
        self._api, self._resource, self._edges = api, resource, edges
        self._url = f"{base_url}{api.name.replace('.', '/')}"

    def _request(self, kwargs: Mapping[str, Any]) -> tuple[dict[str, Any], JSON, bool]:
        sent = sendable(kwargs, self._api.omitted)
        return (
            sent,
            request_json(self._api.provider, self._api.name, sent),
            bool(sent.get("stream")),
        )

    def _rebuilt(self, recorded: JSON, stream: bool) -> Any:
        if not stream:
            return self._api.rebuild(recorded["response"])
        return [self._api.rebuild_chunk(c) for c in recorded["stream"]]

    def _sdk_error(self, exc: RecordedError) -> Exception:
        return self._api.sdk_error(exc, self._url) or exc

    def create(self, **kwargs: Any) -> Any:
        sent, request, stream = self._request(kwargs)

        def live() -> JSON:
            result = self._resource.create(**sent)
            if not stream:
                return self._api.record(dump(result))
            try:
                return self._api.record_stream([dump(c) for c in result])
            finally:
                result.close()

        try:
            recorded = model_call(self._edges, request, sent, live)
        except RecordedError as exc:
            raise self._sdk_error(exc) from None
        rebuilt = self._rebuilt(recorded, stream)
        return ReplayedStream(rebuilt, recorded) if stream else rebuilt

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        raise ConfigError(
            f"{self._api.provider} {self._api.name}.{name} is not recorded by tracevault (only "
            f"{self._api.name}.create(...), stream=True included); under replay it would reach "
            "the network, so the wrapped client does not offer it"
        )


class AsyncResource(Resource):
    """:class:`Resource` of an async client."""

    async def create(self, **kwargs: Any) -> Any:
        sent, request, stream = self._request(kwargs)

        async def live() -> JSON:
            result = await self._resource.create(**sent)
            if not stream:
                return self._api.record(dump(result))
            try:
                return self._api.record_stream([dump(c) async for c in result])
            finally:
                await result.close()

        try:
            recorded = await amodel_call(self._edges, request, sent, live)
        except RecordedError as exc:
            raise self._sdk_error(exc) from None
        rebuilt = self._rebuilt(recorded, stream)
        return AsyncReplayedStream(rebuilt, recorded) if stream else rebuilt


class ClientProxy:
    """The SDK client under the wrapped resources: other attributes are the client's own, and
    ``with`` / ``async with`` close its connections as the SDK's own client does."""

    def __init__(self, client: Any, edges: Edges) -> None:
        self._client = client
        self.edges = edges

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self._client.close()

    async def __aenter__(self) -> Any:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._client.close()
