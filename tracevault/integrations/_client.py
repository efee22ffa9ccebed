"""The wrapped SDK client: the SDK's own client class, with a :class:`~._door.Door` as its
HTTP client and three holes closed.

``wrap(client, edges)`` returns a copy of the client (same options) whose class is a subclass
of the client's own (so ``isinstance``, ``with``, every resource and helper are the SDK's):

- ``request`` raises a tracevault exception the door carried through the SDK as itself (a
  ``ReplayDivergence``, a refusal, an alias refused by the Recorder), not as the SDK's
  connection error;
- ``copy`` / ``with_options`` keep the door: an ``http_client=`` given there is put behind a
  door of its own, so no copy of a wrapped client talks to the provider unrecorded;
- ``edges`` is the edges the client records through;
- ``_make_status_error_from_response`` gives, for an error response a door handed the SDK,
  the exception the crossing recorded (``tracevault.integrations._door.ERROR_KEY``), so the
  SDK's retry loop runs as unwrapped and the agent gets the recorded error.

``wrap(client, edges, stream_timing=True)`` keeps a stream's chunk timing: live, each event's
arrival is recorded with the stream; under replay the events are served with the recorded
gaps (sync and async). Records without timing, or a client wrapped without it, replay a
stream at once.

The OpenAI adapter adds its WebSocket entry points (realtime), which open sockets without
the HTTP client: refused by name.
"""

from __future__ import annotations

from typing import Any

import httpx2

from tracevault.edges import Edges
from tracevault.errors import ConfigError
from tracevault.integrations._door import ERROR_KEY, AsyncDoor, Door, Sdk, carried

__all__ = ["AsyncRecorded", "Recorded", "wrap_client"]


class Recorded:
    """Mixed in before a sync SDK client class (see the module docstring)."""

    __slots__ = ()
    _client: Any

    @property
    def edges(self) -> Edges:
        edges: Edges = self._client.edges
        return edges

    def request(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().request(*args, **kwargs)  # type: ignore[misc]
        except Exception as exc:
            original = carried(exc)
            if original is None:
                raise
            raise original from None

    def _make_status_error_from_response(self, response: Any) -> Any:
        made = response.extensions.get(ERROR_KEY)
        if made is not None:
            return made
        return super()._make_status_error_from_response(response)  # type: ignore[misc]

    def copy(self, **kwargs: Any) -> Any:
        given = kwargs.get("http_client")
        if given is not None and not isinstance(given, Door | AsyncDoor):
            door = self._client
            kwargs["http_client"] = type(door)(
                door.sdk, door.edges, given, door.status_error, door.stream_timing
            )
        return super().copy(**kwargs)  # type: ignore[misc]

    with_options = copy


class AsyncRecorded(Recorded):
    """:class:`Recorded` for the async SDK clients."""

    __slots__ = ()

    async def request(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super(Recorded, self).request(*args, **kwargs)  # type: ignore[misc]
        except Exception as exc:
            original = carried(exc)
            if original is None:
                raise
            raise original from None


_CLASSES: dict[tuple[type, type], type] = {}


def _recorded_class(cls: type, mixin: type) -> type:
    made = _CLASSES.get((cls, mixin))
    if made is None:
        made = _CLASSES[(cls, mixin)] = type(
            f"Recorded{cls.__name__}", (mixin, cls), {"__slots__": ()}
        )
    return made


def wrap_client(
    client: Any, edges: Edges, sdk: Sdk, mixin: type, is_async: bool, *, stream_timing: bool
) -> Any:
    """``client`` copied with a door as its HTTP client, as the recorded subclass of its class.

    ``stream_timing``: record each stream event's arrival and serve recorded streams paced
    (``tracevault.integrations._door.CHUNK_OFFSETS``)."""
    if isinstance(client._client, Door | AsyncDoor):
        raise ConfigError(f"{client!r} is already wrapped: wrap the SDK's own client once")
    door_cls: Any = AsyncDoor if is_async else Door
    expected = httpx2.AsyncClient if is_async else httpx2.Client
    if not isinstance(client._client, expected):
        raise ConfigError(
            f"wrap(client, edges) holds the SDK's HTTP client, which must be an "
            f"{expected.__module__}.{expected.__name__}; this client has a "
            f"{type(client._client).__module__}.{type(client._client).__name__}"
        )
    status_error = client._make_status_error_from_response
    door = door_cls(sdk, edges, client._client, status_error, stream_timing)
    # The SDK's ``copy`` builds ``self.__class__(...)`` from the options it holds: a bare
    # instance of the recorded class holding the same options makes the copy recorded.
    cls = _recorded_class(type(client), mixin)
    template: Any = object.__new__(cls)
    template.__dict__.update(vars(client))
    return template.copy(http_client=door)
