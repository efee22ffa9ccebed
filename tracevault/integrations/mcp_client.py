"""Record and replay an agent's MCP client calls: ``session = RecordedSession(edges, "weather",
open=...)``, used like ``mcp.ClientSession``.

An MCP server is the agent's tools and context; replay must not need it. Each call is one
crossing, named by the server (``server=``, the name the agent knows it by):

- ``call_tool(name, arguments)``: a TOOL_CALL ``{"tool": "mcp:<server>/<name>", "args":
  arguments}``, its response the ``CallToolResult`` (``isError`` results included) as the
  protocol's JSON;
- ``read_resource(uri)``: an EXTERNAL_STATE read ``mcp:<server> resource <uri>``;
- ``get_prompt(name, arguments)``: an EXTERNAL_STATE read ``mcp:<server> prompt <name>
  <arguments as JSON>``;
- ``initialize()``, ``list_tools()``, ``list_resources()``, ``list_resource_templates()``,
  ``list_prompts()``: EXTERNAL_STATE reads ``mcp:<server> <method>`` (an agent that picks its
  tools from the list depends on it).

Every result is handed to the agent as the SDK's own pydantic type rebuilt from the recorded
JSON, live and under replay alike. The session is opened lazily, by the first call that runs
live: ``open`` is a function returning an async context manager that yields a ready
``mcp.ClientSession`` (or pass ``session=`` one you opened). Under replay no call runs live,
so ``open`` is never called: no subprocess is started and no connection made. Any other
method of ``ClientSession`` is refused with a ``ConfigError`` naming it (it could not be served
under replay). Open and close the recorded session on one task (``async with``), as the MCP
transports require. Needs the ``mcp`` extra: ``pip install 'tracevault[mcp]'``.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from typing import Any, TypeVar

from tracevault.errors import missing_extra

try:
    from mcp import ClientSession, types
except ImportError as exc:  # the extra is not installed: say which one
    raise missing_extra("mcp", exc) from exc
from pydantic import BaseModel

from tracevault.callsite import add_harness_module
from tracevault.edges import JSON, Edges
from tracevault.errors import ConfigError
from tracevault.integrations._tools import atool

__all__ = ["RecordedSession"]

add_harness_module("mcp")

M = TypeVar("M", bound=BaseModel)


def _dump(result: BaseModel) -> JSON:
    return result.model_dump(mode="json", by_alias=True, exclude_none=True)


class RecordedSession:
    """An MCP client session whose calls are recorded (see the module docstring)."""

    def __init__(
        self,
        edges: Edges,
        server: str,
        *,
        open: Callable[[], contextlib.AbstractAsyncContextManager[ClientSession]] | None = None,
        session: ClientSession | None = None,
    ) -> None:
        if not server or "/" in str(server):
            raise ConfigError(
                f"RecordedSession(server=...) must be a name without '/', got {server!r}"
            )
        if (open is None) == (session is None):
            raise ConfigError("RecordedSession needs exactly one of open= or session=")
        self.edges, self.server = edges, server
        self._open, self._session = open, session
        self._stack = contextlib.AsyncExitStack()
        self._initialized: types.InitializeResult | None = None

    async def __aenter__(self) -> RecordedSession:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._stack.aclose()

    async def _live(self) -> ClientSession:
        """The real session, opened (and initialized) on the first live call."""
        if self._session is None:
            assert self._open is not None
            self._session = await self._stack.enter_async_context(self._open())
            self._initialized = await self._session.initialize()
        return self._session

    async def _state(self, name: str, kind: type[M], read: Callable[[ClientSession], Any]) -> M:
        async def live() -> JSON:
            return _dump(await read(await self._live()))

        recorded = await self.edges.astate(f"mcp:{self.server} {name}", live)
        return kind.model_validate(recorded)

    # -- the recorded calls ---------------------------------------------------------------
    async def initialize(self) -> types.InitializeResult:
        async def read(session: ClientSession) -> types.InitializeResult:
            if self._initialized is not None:
                return self._initialized
            self._initialized = await session.initialize()
            return self._initialized

        return await self._state("initialize", types.InitializeResult, read)

    async def call_tool(
        self, name: str, arguments: dict[str, Any] | None = None, **options: Any
    ) -> types.CallToolResult:
        """``ClientSession.call_tool``, one TOOL_CALL; ``options`` pass to it live only."""

        async def live(args: JSON) -> JSON:
            session = await self._live()
            return _dump(await session.call_tool(name, args, **options))

        tool = f"mcp:{self.server}/{name}"
        recorded = await atool(self.edges, tool, arguments or {}, live)
        return types.CallToolResult.model_validate(recorded)

    async def read_resource(self, uri: str) -> types.ReadResourceResult:
        return await self._state(
            f"resource {uri}", types.ReadResourceResult, lambda s: s.read_resource(str(uri))
        )

    async def get_prompt(
        self, name: str, arguments: dict[str, str] | None = None
    ) -> types.GetPromptResult:
        shown = json.dumps(arguments or {}, sort_keys=True, separators=(",", ":"))
        return await self._state(
            f"prompt {name} {shown}", types.GetPromptResult, lambda s: s.get_prompt(name, arguments)
        )

    async def list_tools(self) -> types.ListToolsResult:
        return await self._state("list_tools", types.ListToolsResult, lambda s: s.list_tools())

    async def list_resources(self) -> types.ListResourcesResult:
        return await self._state(
            "list_resources", types.ListResourcesResult, lambda s: s.list_resources()
        )

    async def list_resource_templates(self) -> types.ListResourceTemplatesResult:
        return await self._state(
            "list_resource_templates",
            types.ListResourceTemplatesResult,
            lambda s: s.list_resource_templates(),
        )

    async def list_prompts(self) -> types.ListPromptsResult:
        return await self._state(
            "list_prompts", types.ListPromptsResult, lambda s: s.list_prompts()
        )

    def __getattr__(self, name: str) -> Any:
        if hasattr(ClientSession, name):
            raise ConfigError(
                f"ClientSession.{name} is not recorded by tracevault: a replay could not serve "
                "it without the server. Recorded: initialize, call_tool, read_resource, "
                "get_prompt, list_tools, list_resources, list_resource_templates, list_prompts"
            )
        raise AttributeError(name)
