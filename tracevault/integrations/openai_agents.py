"""Record and replay an OpenAI Agents SDK agent: ``await run(agent, input, edges, client)``.

``run`` is ``agents.Runner.run`` and :func:`run_streamed` is ``agents.Runner.run_streamed``
(its ``stream_events()`` as the SDK's own, the model's stream served from the record), with
the run's crossings recorded (live) or served from the record (under replay), through the
SDK's own runner:

- **model calls**: every agent's model is the SDK's own ``OpenAIChatCompletionsModel`` or
  ``OpenAIResponsesModel`` (``use_responses=``) over ``client`` wrapped by
  ``tracevault.integrations.openai.wrap``: one MODEL_CALL per request, served under replay
  with no socket. Agents name their model (``model="gpt-4o-mini"``) or take the default; an
  agent holding a ``Model`` object of its own is refused (its calls would not be recorded);
- **function tools**: each ``FunctionTool`` of each agent is one TOOL_CALL ``{"tool": name,
  "args": <the model's arguments>}``; live the SDK's own ``on_invoke_tool`` runs (with the
  run context), under replay the recorded result is served. A result is recorded as JSON:
  a string or JSON value as is, a Pydantic model dumped, anything else as ``str()`` (which is
  what the SDK shows the model);
- **handoffs**: a handoff is a sub-agent (``edges.asubagent``): the rest of the run, the target
  agent answering the handed-off history, is a child run linked to the parent's TOOL_CALL
  ``subagent:<agent name>``, and its final output is the parent's. Under replay the child's
  output is served (``replay run --recurse`` replays the child too). A child's structured
  output is recorded as JSON and parsed again by the SDK into the agent's ``output_type``;
- **tracing**: the run's SDK tracing is disabled (``RunConfig.tracing_disabled``). The SDK
  exports traces to OpenAI by default, which a replay must not do; the recorded run is the
  trace, exported with ``tracevault replay export --otel`` (docs/design.md, "Agent frameworks").

Not recorded, so refused or left out: an agent's ``mcp_servers`` (wrap the MCP session with
``tracevault.integrations.mcp_client`` and give the agent function tools), hosted tools
(web search, code interpreter: they run at OpenAI, their results arrive in the model's
answer, which is recorded). Needs the ``agents`` extra: ``pip install 'tracevault[agents]'``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator
from typing import Any

from tracevault.errors import missing_extra

try:
    import openai
    from agents import Agent, AgentsException, Handoff, RunConfig, Runner, RunResult, handoff
    from agents.items import ModelResponse
    from agents.models.interface import Model, ModelProvider
    from agents.models.openai_chatcompletions import OpenAIChatCompletionsModel
    from agents.models.openai_responses import OpenAIResponsesModel
    from agents.result import RunResultStreaming
    from agents.tool import FunctionTool
    from agents.usage import Usage
    from openai.types.responses import (
        Response,
        ResponseCompletedEvent,
        ResponseOutputMessage,
        ResponseOutputText,
    )
except ImportError as exc:  # the extra is not installed: say which one
    raise missing_extra("agents", exc) from exc

from tracevault.callsite import add_harness_module, call_site, entered
from tracevault.edges import JSON, Edges
from tracevault.errors import ConfigError, TraceVaultError
from tracevault.integrations import openai as openai_adapter
from tracevault.integrations._tools import atool, jsonable

__all__ = ["DEFAULT_MODEL", "RecordedProvider", "run", "run_streamed"]

add_harness_module("agents")

DEFAULT_MODEL = "gpt-4o-mini"
"""The model of an agent that names none (the SDK's own default may change between releases,
and a record must name what the agent asked for)."""


class RecordedProvider(ModelProvider):
    """The SDK's OpenAI models over a wrapped client: each agent's model calls are recorded."""

    def __init__(self, client: Any, use_responses: bool) -> None:
        self.client = client
        self.use_responses = use_responses

    def get_model(self, model_name: str | None) -> Model:
        name = model_name or DEFAULT_MODEL
        if self.use_responses:
            return OpenAIResponsesModel(model=name, openai_client=self.client)
        return OpenAIChatCompletionsModel(model=name, openai_client=self.client)


@dataclasses.dataclass(frozen=True)
class _Run:
    """What every agent of one recorded run shares: its edges and how to call the model."""

    edges: Edges
    client: openai.AsyncOpenAI
    use_responses: bool
    run_config: RunConfig
    max_turns: int

    def config(self) -> RunConfig:
        wrapped = openai_adapter.wrap(self.client, self.edges)
        return dataclasses.replace(
            self.run_config,
            model_provider=RecordedProvider(wrapped, self.use_responses),
            tracing_disabled=True,
        )

    def child(self, edges: Edges) -> _Run:
        return dataclasses.replace(self, edges=edges)

    def agent(self, agent: Agent[Any]) -> Agent[Any]:
        """``agent`` with its function tools recorded and its handoffs made sub-agents."""
        if isinstance(agent.model, Model):
            raise ConfigError(
                f"agent {agent.name!r} holds a Model object ({type(agent.model).__name__}), "
                "whose calls tracevault cannot record: name the model (model='gpt-4o-mini') "
                "and pass the OpenAI client to run(..., client=)"
            )
        if agent.mcp_servers:
            raise ConfigError(
                f"agent {agent.name!r} has mcp_servers, whose calls tracevault does not record: "
                "use tracevault.integrations.mcp_client and function tools instead"
            )
        tools = [self._tool(t) if isinstance(t, FunctionTool) else t for t in agent.tools]
        handoffs = [
            self._handoff(h if isinstance(h, Handoff) else handoff(h)) for h in agent.handoffs
        ]
        return agent.clone(tools=tools, handoffs=handoffs)

    def _tool(self, tool: FunctionTool) -> FunctionTool:
        invoke = tool.on_invoke_tool
        edges = self.edges

        async def recorded(ctx: Any, arguments: str) -> Any:
            args = json.loads(arguments) if arguments.strip() else {}

            async def live(given: JSON) -> JSON:
                return jsonable(await invoke(ctx, json.dumps(given)))

            return await atool(edges, tool.name, args, live)

        return dataclasses.replace(tool, on_invoke_tool=recorded)

    def _handoff(self, given: Handoff[Any, Any]) -> Handoff[Any, Any]:
        invoke = given.on_invoke_handoff

        async def to_subagent(ctx: Any, arguments: str) -> Agent[Any]:
            target: Agent[Any] = await invoke(ctx, arguments)
            return target.clone(
                model=_SubRun(self, target, ctx.context),
                tools=[],
                handoffs=[],
                mcp_servers=[],
                input_guardrails=[],
                output_guardrails=[],
            )

        return dataclasses.replace(given, on_invoke_handoff=to_subagent)


class _SubRun(Model):
    """The model of a handed-off agent in its parent: the child run, as one sub-agent crossing.

    The runner asks it once, with the handed-off history; it runs the target agent on that
    history as a child run (``edges.asubagent``) and answers with the child's final output, so
    the parent's runner ends with it.
    """

    def __init__(self, run: _Run, target: Agent[Any], context: Any) -> None:
        self.run, self.target, self.context = run, target, context

    async def _output(self, input: Any) -> ResponseOutputMessage:
        """The child run (one sub-agent crossing), its final output as the answer."""

        async def child(history: JSON, edges: Edges) -> JSON:
            sub = self.run.child(edges)
            result = await Runner.run(
                sub.agent(self.target),
                history,
                context=self.context,
                max_turns=sub.max_turns,
                run_config=sub.config(),
            )
            return jsonable(result.final_output)

        output = await self.run.edges.asubagent(self.target.name, child, jsonable(input))
        text = output if isinstance(output, str) else json.dumps(output)
        return ResponseOutputMessage(
            id="tracevault-subagent",
            type="message",
            role="assistant",
            status="completed",
            content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
        )

    async def get_response(self, system_instructions: Any, input: Any, *_a: Any, **_k: Any) -> Any:
        message = await self._output(input)
        return ModelResponse(output=[message], usage=Usage(), response_id=None)

    async def stream_response(
        self, system_instructions: Any, input: Any, *_a: Any, **_k: Any
    ) -> AsyncIterator[Any]:
        """Under ``run_streamed``: the child's output as one completed response event."""
        message = await self._output(input)
        response = Response.model_construct(
            id="tracevault-subagent", object="response", output=[message], usage=None
        )
        yield ResponseCompletedEvent.model_construct(
            type="response.completed", response=response, sequence_number=0
        )


async def run(
    agent: Agent[Any],
    input: Any,
    edges: Edges,
    *,
    client: openai.AsyncOpenAI,
    use_responses: bool = False,
    context: Any = None,
    max_turns: int = 10,
    run_config: RunConfig | None = None,
) -> RunResult:
    """``Runner.run(agent, input)`` recorded through ``edges`` (see the module docstring).

    ``client`` is the SDK's own ``AsyncOpenAI`` (not wrapped: each run, and each sub-agent,
    wraps it with its own edges); ``use_responses`` picks the Responses API over Chat
    Completions for every agent.
    """
    if not isinstance(client, openai.AsyncOpenAI):
        raise ConfigError(f"run(..., client=) needs an openai.AsyncOpenAI, got {client!r}")
    recorded = _Run(edges, client, use_responses, run_config or RunConfig(), max_turns)
    try:
        # the runner makes the first turn's calls in tasks of its own: site them at this call
        with entered(call_site()):
            return await Runner.run(
                recorded.agent(agent),
                input,
                context=context,
                max_turns=max_turns,
                run_config=recorded.config(),
            )
    except AgentsException as exc:
        # The runner wraps what a tool raised ("Error running tool ..."): a divergence or a
        # refusal of tracevault reaches the agent, and the replay, as itself.
        cause = exc.__cause__
        if isinstance(cause, TraceVaultError):
            raise cause from None
        raise


def run_streamed(
    agent: Agent[Any],
    input: Any,
    edges: Edges,
    *,
    client: openai.AsyncOpenAI,
    use_responses: bool = False,
    context: Any = None,
    max_turns: int = 10,
    run_config: RunConfig | None = None,
) -> RunResultStreaming:
    """``Runner.run_streamed(agent, input)`` recorded through ``edges``, as :func:`run`: the
    model's streams, the function tools and the handoffs (sub-agents) are recorded; iterate
    ``stream_events()`` as with the SDK. Under replay no tool runs and no socket opens."""
    if not isinstance(client, openai.AsyncOpenAI):
        raise ConfigError(f"run_streamed(..., client=) needs an openai.AsyncOpenAI, got {client!r}")
    recorded = _Run(edges, client, use_responses, run_config or RunConfig(), max_turns)
    with entered(call_site()):  # the run's task, started here, keeps the entry site
        return Runner.run_streamed(
            recorded.agent(agent),
            input,
            context=context,
            max_turns=max_turns,
            run_config=recorded.config(),
        )
