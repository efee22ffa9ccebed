"""Record and replay a Google ADK agent: ``InMemoryRunner(agent=root, app_name=...)`` becomes
``InMemoryRunner(agent=root, app_name=..., plugins=[recorded(edges, client=AsyncOpenAI())])``.

Why ADK (and not CrewAI) is the third framework (docs/integrations.md): ``google-adk`` 2.13
needs pydantic 2.12+, ``httpx<1`` and the packages we already hold; CrewAI 1.15 needs
``openai<3``, ``mcp<2``, ``pydantic<2.13`` and ``httpx~=0.28``, all below our pins. ADK talks to
an OpenAI-compatible model through its own ``LiteLlm`` wrapper, so its model requests pass the
same recorded door as :mod:`tracevault.integrations.litellm`.

The recording is one ADK plugin, ADK's own seam for what every agent of a runner does
(sub-agents included), put first in the runner's plugins so that it answers before any other:

- **model calls**: ``before_model_callback`` sends the agent's request through a copy of its
  ``LiteLlm`` (same model, same arguments) whose ``client=`` is the OpenAI client given here,
  wrapped by :func:`tracevault.integrations.openai.wrap`, and answers the call with its
  response, so ADK's own model never sends: one MODEL_CALL per request, served under replay
  with no socket. An agent whose model is not a ``LiteLlm`` (a Gemini model by name) is
  refused with a ``ConfigError``: its calls would not pass the door;
- **tools**: ``before_tool_callback`` makes every tool call (function tools, ``AgentTool``
  sub-agents, toolsets) one TOOL_CALL ``{"tool": name, "args": <the model's arguments>}``:
  live the tool runs inside the crossing, under replay the recorded result answers the call
  and the tool never runs. Parallel calls carry their function-call id, by which replay
  matches them, and are sited at the tool's own function. A result is recorded as JSON (a
  non-dict result as ``{"result": value}``, as ADK gives it to the model).

Because the plugin answers the tool call, the agents' own ``before_tool_callback``s do not
run (live or replayed); ``after_tool_callback``s still do. Streaming (``RunConfig``
``streaming_mode``) and live (``run_live``) runs are not recorded yet. Needs the ``adk``
extra: ``pip install 'tracevault[adk]'``.
"""

from __future__ import annotations

import os

# ADK imports litellm, which fetches its model price map from the network unless told not to
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from typing import Any

from tracevault.errors import ConfigError, missing_extra

try:
    import openai
    from google.adk.agents.callback_context import CallbackContext
    from google.adk.models.lite_llm import LiteLlm
    from google.adk.models.llm_request import LlmRequest
    from google.adk.models.llm_response import LlmResponse
    from google.adk.plugins.base_plugin import BasePlugin
    from google.adk.tools.base_tool import BaseTool
    from google.adk.tools.tool_context import ToolContext
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
            made = self._models[id(given)] = LiteLlm(model=given.model, **args)
        return made

    async def before_model_callback(
        self, *, callback_context: CallbackContext, llm_request: LlmRequest
    ) -> LlmResponse | None:
        agent = callback_context._invocation_context.agent
        name = str(getattr(agent, "name", "?"))
        model = self._model(getattr(agent, "canonical_model", None), name)
        answer: LlmResponse | None = None
        with entered(self.site):  # ADK runs the flow in tasks of its own: site it at the agent
            async for part in model.generate_content_async(llm_request, stream=False):
                answer = part
        return answer

    async def before_tool_callback(
        self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext
    ) -> dict[str, Any] | None:
        async def live(_given: JSON) -> JSON:
            result = await tool.run_async(args=tool_args, tool_context=tool_context)
            return jsonable(result)

        with entered(self.site), called(tool_context.function_call_id, _site(tool)):
            got = await atool(self.edges, tool.name, jsonable(tool_args), live)
        return got if isinstance(got, dict) else {"result": got}


def recorded(edges: Edges, /, *, client: openai.AsyncOpenAI) -> RecordedPlugin:
    """The plugin to put first in a runner's ``plugins=``: its agents' model calls go through
    ``client`` (wrapped), its tools through ``edges``. A crossing whose stack holds no frame
    of the agent (ADK runs its flow in tasks of its own) is sited at the line that called
    this."""
    if not isinstance(client, openai.AsyncOpenAI):
        raise ConfigError(f"recorded(edges, client=) needs an openai.AsyncOpenAI, got {client!r}")
    return RecordedPlugin(edges, client, call_site())
