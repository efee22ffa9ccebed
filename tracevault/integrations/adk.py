"""Record and replay a Google ADK agent: ``InMemoryRunner(agent=root, app_name=...)`` becomes
``InMemoryRunner(agent=root, app_name=..., plugins=[recorded(edges, client=AsyncOpenAI())])``.

Why ADK (and not CrewAI) is the third framework (docs/integrations.md): ``google-adk`` 2.13
needs pydantic 2.12+, ``httpx<1`` and the packages we already hold; CrewAI 1.15 needs
``openai<3``, ``mcp<2``, ``pydantic<2.13`` and ``httpx~=0.28``, all below our pins. ADK talks to
an OpenAI-compatible model through its own ``LiteLlm`` wrapper, so its model requests pass the
same recorded door as :mod:`tracevault.integrations.litellm`.

The recording is one ADK plugin, ADK's own seam for what every agent of a runner does
(sub-agents included: an ``AgentTool``'s runner inherits its parent's plugins, an agent
transferred to runs in the same invocation), put first in the runner's plugins:

- **model calls**: an agent of an invocation whose plugins hold this one resolves its model
  (``LlmAgent.canonical_model_async``, which ADK documents as the per-invocation resolution)
  to a copy of its ``LiteLlm`` (same model, same arguments) whose ``client=`` is the OpenAI
  client given here, wrapped by :func:`tracevault.integrations.openai.wrap`; ADK's own flow
  then calls it as it would the agent's model, streamed or not: one MODEL_CALL per request,
  served under replay with no socket. With ``RunConfig(streaming_mode=StreamingMode.SSE)`` the
  request is streamed, recorded as the chunks the provider sent and served as the same stream,
  so ADK yields the same partial events, live and replayed (reassembled, the partials would
  be lost). The agents' own model callbacks run as they do unrecorded. An agent whose model is
  not a ``LiteLlm`` (a Gemini model by name) is refused with a ``ConfigError``: its calls
  would not pass the door;
- **tools**: ``before_tool_callback`` makes every tool call (function tools, ``AgentTool``
  sub-agents, toolsets) one TOOL_CALL ``{"tool": name, "args": <the model's arguments>}``:
  live the tool runs inside the crossing, under replay the recorded result answers the call
  and the tool never runs. An ``AgentTool``'s sub-agent runs inside it, its crossings nested
  in the TOOL_CALL, so replay serves the sub-agent's answer and runs none of them. Parallel
  calls carry their function-call id, by which replay matches them, and are sited at the
  tool's own function. A result is recorded as JSON (a non-dict result as ``{"result":
  value}``, as ADK gives it to the model). ``transfer_to_agent`` is recorded too, and its
  effect (the transfer, an action on ADK's tool context, not on the world) is applied from
  the recorded arguments under replay as well, so the agent transferred to runs in both.

Because the plugin answers the tool call, the agents' own ``before_tool_callback``s do not
run (live or replayed); ``after_tool_callback``s still do. Live runs (``run_live``,
``streaming_mode=BIDI``) are not recorded. Needs the ``adk`` extra: ``pip install
'tracevault[adk]'``.
"""

from __future__ import annotations

import os

# ADK imports litellm, which fetches its model price map from the network unless told not to
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from typing import Any

from tracevault.errors import ConfigError, missing_extra

try:
    import openai
    from google.adk.agents import LlmAgent
    from google.adk.agents.readonly_context import ReadonlyContext
    from google.adk.models.base_llm import BaseLlm
    from google.adk.models.lite_llm import LiteLlm, LiteLLMClient
    from google.adk.plugins.base_plugin import BasePlugin
    from google.adk.tools.base_tool import BaseTool
    from google.adk.tools.tool_context import ToolContext
    from google.adk.tools.transfer_to_agent_tool import TransferToAgentTool, transfer_to_agent
except ImportError as exc:  # the extra is not installed: say which one
    raise missing_extra("adk", exc) from exc

from tracevault.callsite import add_harness_module, call_site, called, entered
from tracevault.edges import JSON, Edges
from tracevault.integrations import openai as openai_adapter
from tracevault.integrations._tools import atool, jsonable

__all__ = ["RecordedPlugin", "recorded"]

add_harness_module("google.adk")
add_harness_module("google.genai")
add_harness_module("litellm")


def _site(tool: BaseTool) -> str | None:
    """``module:function:line`` of a function tool: ADK runs parallel calls in tasks of their
    own, whose stacks hold no frame of the agent."""
    fn = getattr(tool, "func", None)
    code = getattr(fn, "__code__", None)
    if fn is None or code is None:
        return None
    return f"{fn.__module__}:{fn.__qualname__}:{code.co_firstlineno}"


class _SitedClient(LiteLLMClient):
    """LiteLLM's client for a recorded model: its requests are sited at the line that made
    the plugin (ADK runs the flow in tasks of its own, whose stacks hold no agent frame)."""

    def __init__(self, site: str | None) -> None:
        super().__init__()
        self.site = site

    async def acompletion(self, model: Any, messages: Any, tools: Any, **kwargs: Any) -> Any:
        # a stream is read to its end inside this call (the wrapped client), so the
        # MODEL_CALL is made here, not while ADK iterates the chunks
        with entered(self.site):
            return await super().acompletion(model, messages, tools, **kwargs)


class RecordedPlugin(BasePlugin):
    """Every model request and tool call of a runner's agents, recorded or served."""

    def __init__(self, edges: Edges, client: openai.AsyncOpenAI, site: str | None) -> None:
        super().__init__(name="tracevault")
        self.edges = edges
        self.site = site
        self.client = openai_adapter.wrap(client, edges)
        self._models: dict[int, LiteLlm] = {}

    def _model(self, given: Any, agent: str) -> LiteLlm:
        if not isinstance(given, LiteLlm):
            raise ConfigError(
                f"ADK agent {agent!r} runs model {given!r}, whose calls tracevault cannot "
                "record: give it LiteLlm(model='openai/<name>', api_base=...) over an "
                "OpenAI-compatible endpoint"
            )
        made = self._models.get(id(given))
        if made is None:
            args = {**given._additional_args, "client": self.client}
            made = LiteLlm(model=given.model, llm_client=_SitedClient(self.site), **args)
            self._models[id(given)] = made
        return made

    async def before_tool_callback(
        self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext
    ) -> dict[str, Any] | None:
        async def live(_given: JSON) -> JSON:
            result = await tool.run_async(args=tool_args, tool_context=tool_context)
            return jsonable(result)

        with entered(self.site), called(tool_context.function_call_id, _site(tool)):
            got = await atool(self.edges, tool.name, jsonable(tool_args), live)
        if isinstance(tool, TransferToAgentTool):  # ADK's control flow: transfer under replay too
            reason = str(tool_args.get("transfer_reason") or "")
            transfer_to_agent(str(tool_args["agent_name"]), tool_context, transfer_reason=reason)
        return got if isinstance(got, dict) else {"result": got}


def _plugin(ctx: ReadonlyContext) -> RecordedPlugin | None:
    plugins = ctx._invocation_context.plugin_manager.plugins
    return next((p for p in plugins if isinstance(p, RecordedPlugin)), None)


_resolve = LlmAgent.canonical_model_async


async def _recorded_model(self: LlmAgent, ctx: ReadonlyContext) -> BaseLlm:
    """ADK's per-invocation model resolution: an agent run by a runner holding a
    :class:`RecordedPlugin` gets that plugin's recorded copy of its model; any other run
    (no plugin) gets its model, as before."""
    model = await _resolve(self, ctx)
    plugin = _plugin(ctx)
    return model if plugin is None else plugin._model(model, self.name)


# A plugin callback can answer a model call with one response only, which would drop an SSE
# stream's partial events; the resolution is where ADK picks the model it then streams from.
LlmAgent.canonical_model_async = _recorded_model  # type: ignore[method-assign]


def recorded(edges: Edges, /, *, client: openai.AsyncOpenAI) -> RecordedPlugin:
    """The plugin to put first in a runner's ``plugins=``: its agents' model calls go through
    ``client`` (wrapped), its tools through ``edges``. A crossing whose stack holds no frame
    of the agent (ADK runs its flow in tasks of its own) is sited at the line that called
    this."""
    if not isinstance(client, openai.AsyncOpenAI):
        raise ConfigError(f"recorded(edges, client=) needs an openai.AsyncOpenAI, got {client!r}")
    return RecordedPlugin(edges, client, call_site())
