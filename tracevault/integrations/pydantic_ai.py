"""Record and replay a Pydantic AI agent: ``await run(agent, prompt, edges, client=client)``.

One door for each of the agent's own: ``run`` is ``agent.run``, :func:`run_sync` is
``agent.run_sync``, :func:`run_stream` is ``agent.run_stream`` (``async with run_stream(agent,
prompt, edges, client=client) as result``, streamed text or structured output, the tools the
model calls before its final answer run in between), :func:`run_stream_sync` is
``agent.run_stream_sync`` (``with run_stream_sync(...) as result``, the same, read without
``await``), :func:`run_stream_events` is ``agent.run_stream_events`` (``async with
run_stream_events(...) as events``, every event of the run, model deltas and tool calls, then
the result) and :func:`iter` is ``agent.iter`` (``async with iter(...) as agent_run``, node by
node, each node's events streamed with ``node.stream(agent_run.ctx)``), the same keyword
arguments, through Pydantic AI's own agent graph, with the run's crossings recorded (live) or
served from the record (under replay):

- **model calls**: the run's model is Pydantic AI's own ``OpenAIChatModel`` over ``client``
  wrapped by ``tracevault.integrations.openai.wrap``: one MODEL_CALL per request, served
  under replay with no socket. A streamed request is recorded as the chunks the provider sent
  and served as the same stream, not reassembled into one answer: Pydantic AI turns each chunk
  into the deltas the agent sees (``stream_text``, a ``PartDeltaEvent`` of
  ``run_stream_events``), so only the provider's own chunking replays those alike. The
  agent names an OpenAI chat model (``"openai:gpt-4o-mini"``, ``"gpt-4o-mini"``) or holds an
  ``OpenAIChatModel``, whose name is kept; any other model is refused, since its calls would
  not pass the recorded door;
- **tools**: every tool call the agent graph executes (function tools, ``@agent.tool`` and
  ``@agent.tool_plain``, toolsets) is one TOOL_CALL ``{"tool": name, "args": <the model's
  arguments>}``, made at Pydantic AI's own seam for it, a capability's ``wrap_tool_execute``,
  outermost, so under replay neither the tool nor another capability's tool hooks run: the
  recorded result is served. Concurrent tool calls (Pydantic AI runs a turn's calls in
  parallel) carry their tool-call id, by which replay matches them, not by arrival order;
  their call site is the tool's own function when the stack holds no agent frame. A result is
  recorded as JSON: a string or JSON value as is, a Pydantic model dumped, anything else as
  ``str()``.

Every door gives the run the same two things (``_options``: the recorded model, the tools'
capability) and marks the agent's line that called it (``entered``) while the run is open (for
``run_stream``, ``run_stream_events`` and ``iter``, the agent's whole ``async with`` block; for
``run_stream_sync``, the call, whose event loop task runs the graph up to the final answer's
stream and keeps that mark), so a crossing made in Pydantic AI's own tasks is sited at that
call. A door the agent calls directly
(``agent.run_stream`` unwrapped) has no recorded client: under replay its model request's
connection is refused as a divergence, before any tool could run (docs/integrations.md).

Not recorded, so left to the agent's code: what a tool does besides returning (give it the
side effect through the tool, or ``edges``); the timing of a stream's chunks (served at
once, as the OpenAI adapter serves a stream recorded without ``stream_timing``). Needs the
``pydantic_ai`` extra:
``pip install 'tracevault[pydantic_ai]'``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from tracevault.errors import missing_extra

try:
    import openai
    from pydantic_ai import Agent, AgentRun, RunContext
    from pydantic_ai.agent import AgentRunEvents
    from pydantic_ai.capabilities import AbstractCapability
    from pydantic_ai.messages import ToolCallPart
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider
    from pydantic_ai.result import StreamedRunResult, StreamedRunResultSync
    from pydantic_ai.tools import ToolDefinition
    from pydantic_ai.toolsets import FunctionToolset
except ImportError as exc:  # the extra is not installed: say which one
    raise missing_extra("pydantic_ai", exc) from exc

from tracevault.callsite import add_harness_module, call_site, called, entered
from tracevault.edges import JSON, Edges
from tracevault.errors import ConfigError
from tracevault.integrations import openai as openai_adapter
from tracevault.integrations._tools import atool, jsonable

__all__ = [
    "RecordedTools",
    "iter",
    "run",
    "run_stream",
    "run_stream_events",
    "run_stream_sync",
    "run_sync",
]

add_harness_module("pydantic_ai")
add_harness_module("pydantic_graph")
add_harness_module("anyio")  # Pydantic AI runs a turn's tool calls in anyio task groups

_OPENAI_PREFIXES = ("", "openai", "openai-chat")


def _definition(fn: Any) -> str | None:
    """``module:function:line`` of a tool's function: the site its calls are recorded at when
    Pydantic AI runs them in tasks of their own (no agent frame on the stack)."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return None
    return f"{fn.__module__}:{fn.__qualname__}:{code.co_firstlineno}"


def _sites(agent: Agent[Any, Any]) -> dict[str, str]:
    sites: dict[str, str] = {}
    for toolset in agent.toolsets:
        if isinstance(toolset, FunctionToolset):
            for name, tool in toolset.tools.items():
                site = _definition(tool.function)
                if site is not None:
                    sites[name] = site
    return sites


class RecordedTools(AbstractCapability[Any]):
    """Every tool call of a run as one TOOL_CALL, served from the record under replay."""

    def __init__(self, edges: Edges, sites: dict[str, str] | None = None) -> None:
        super().__init__()
        self.edges = edges
        self.sites = sites or {}

    async def wrap_tool_execute(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: Any,
        handler: Any,
    ) -> Any:
        async def live(_given: JSON) -> JSON:
            return jsonable(await handler(args))

        with called(call.tool_call_id, self.sites.get(call.tool_name)):
            return await atool(self.edges, call.tool_name, call.args_as_dict(), live)


def _model(agent: Agent[Any, Any], given: Any, client: Any, edges: Edges) -> OpenAIChatModel:
    """Pydantic AI's OpenAI chat model of the run's model name, over the wrapped client."""
    model = given if given is not None else agent.model
    if isinstance(model, OpenAIChatModel):
        name = model.model_name
    elif isinstance(model, str) and model.rpartition(":")[0] in _OPENAI_PREFIXES:
        name = model.rpartition(":")[2]
    else:
        raise ConfigError(
            f"agent {agent.name or ''!r} runs model {model!r}, whose calls tracevault cannot "
            "record: name an OpenAI chat model ('openai:gpt-4o-mini') and pass the OpenAI "
            "client to run(..., client=)"
        )
    if not isinstance(client, openai.AsyncOpenAI):
        raise ConfigError(f"run(..., client=) needs an openai.AsyncOpenAI, got {client!r}")
    wrapped = openai_adapter.wrap(client, edges)
    return OpenAIChatModel(name, provider=OpenAIProvider(openai_client=wrapped))


def _options(
    agent: Agent[Any, Any], edges: Edges, client: Any, kwargs: dict[str, Any]
) -> dict[str, Any]:
    recorded = RecordedTools(edges, _sites(agent))
    return {
        **kwargs,
        "model": _model(agent, kwargs.get("model"), client, edges),
        # first: it wraps every other capability's tool hooks, which replay must not run either
        "capabilities": [recorded, *(kwargs.get("capabilities") or ())],
    }


async def run(
    agent: Agent[Any, Any], user_prompt: Any, edges: Edges, /, *, client: Any, **kwargs: Any
) -> Any:
    """``await agent.run(user_prompt, **kwargs)``, recorded live and served under replay."""
    with entered(call_site()):  # the graph runs in tasks of its own: site them at this call
        return await agent.run(user_prompt, **_options(agent, edges, client, kwargs))


def run_sync(
    agent: Agent[Any, Any], user_prompt: Any, edges: Edges, /, *, client: Any, **kwargs: Any
) -> Any:
    """``agent.run_sync(user_prompt, **kwargs)``, recorded live and served under replay."""
    with entered(call_site()):
        return agent.run_sync(user_prompt, **_options(agent, edges, client, kwargs))


@asynccontextmanager
async def run_stream(
    agent: Agent[Any, Any], user_prompt: Any, edges: Edges, /, *, client: Any, **kwargs: Any
) -> AsyncIterator[StreamedRunResult[Any, Any]]:
    """``async with agent.run_stream(user_prompt, **kwargs) as result``, recorded live and
    served under replay: each model request's stream one MODEL_CALL, the tools the model calls
    before its final answer TOOL_CALLs, the final answer streamed from the record."""
    with entered(call_site()):  # held while the agent reads the stream: the run is still open
        async with agent.run_stream(
            user_prompt, **_options(agent, edges, client, kwargs)
        ) as result:
            yield result


def run_stream_sync(
    agent: Agent[Any, Any], user_prompt: Any, edges: Edges, /, *, client: Any, **kwargs: Any
) -> StreamedRunResultSync[Any, Any]:
    """``with agent.run_stream_sync(user_prompt, **kwargs) as result``, recorded live and
    served under replay, as :func:`run_stream`. Pydantic AI enters the stream here, in an
    event loop task that copies this call's context (and so its ``entered`` mark): the model
    requests and tools up to the final answer's stream are made, and sited, at this call."""
    with entered(call_site()):
        return agent.run_stream_sync(user_prompt, **_options(agent, edges, client, kwargs))


@asynccontextmanager
async def run_stream_events(
    agent: Agent[Any, Any], user_prompt: Any, edges: Edges, /, *, client: Any, **kwargs: Any
) -> AsyncIterator[AgentRunEvents[Any]]:
    """``async with agent.run_stream_events(user_prompt, **kwargs) as events``, recorded live
    and served under replay: the run starts in a task of its own at the first ``async for``,
    inside this block, so its crossings are sited at this call."""
    with entered(call_site()):
        async with agent.run_stream_events(
            user_prompt, **_options(agent, edges, client, kwargs)
        ) as events:
            yield events


@asynccontextmanager
async def iter(  # named for the door it records (agent.iter), as run is for agent.run
    agent: Agent[Any, Any], user_prompt: Any, edges: Edges, /, *, client: Any, **kwargs: Any
) -> AsyncIterator[AgentRun[Any, Any]]:
    """``async with agent.iter(user_prompt, **kwargs) as agent_run``, recorded live and served
    under replay, node by node: a node the agent runs (``async for``, ``agent_run.next``) or
    streams (``node.stream(agent_run.ctx)``) makes its crossings through the same seams."""
    with entered(call_site()):
        async with agent.iter(user_prompt, **_options(agent, edges, client, kwargs)) as agent_run:
            yield agent_run
