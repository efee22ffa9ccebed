"""Record and replay a LangGraph / LangChain agent: ``model = chat_model(ChatOpenAI(...), edges)``.

Three seams of the framework, each one line (docs/langgraph.md):

- :func:`chat_model` wraps any LangChain ``BaseChatModel`` (``ChatOpenAI``, ``ChatAnthropic``,
  …) in a ``BaseChatModel`` of its own. Each ``invoke``/``ainvoke`` (and ``batch``, and
  ``stream``, which a wrapped model answers in one chunk) is one MODEL_CALL crossing: live the
  wrapped model's own ``_generate``/``_agenerate`` runs; under replay the recorded answer is
  rebuilt as the same ``AIMessage`` and the wrapped model is never called, so no socket opens.
  ``bind_tools`` is the wrapped model's (its own tool format), bound to the wrapper, so the
  tools the model is offered are part of what is recorded; ``with_structured_output`` is
  LangChain's default (a tool call, through that ``bind_tools``).
- :func:`tool` / :func:`tools` wrap LangChain tools (``@tool``, ``BaseTool``) for a
  ``ToolNode``: each call is a TOOL_CALL crossing (``{"tool": name, "args": args}``), the
  tool run live and its result served under replay. Each call carries the model's tool-call
  id (``tracevault.call_id``), by which replay matches ``ToolNode``'s concurrent calls (sync
  tools run in a thread pool) whatever order they arrive in, and, called from a worker thread
  whose stack holds no agent frame, the tool's own definition as its call site. A tool named
  in ``side_effects`` is
  recorded as tracevault's side effect (``Tool(fn, side_effect=True)``): it gets an
  idempotency key (:func:`idempotency_key` inside the tool), and a fork does not run it again.
- :func:`checkpointer` wraps a LangGraph checkpointer (``InMemorySaver``, a database saver):
  the checkpoint a graph loads when it starts or resumes a thread is read from outside the
  run, so each ``get_tuple`` is an EXTERNAL_STATE read (``langgraph checkpoint <thread>``)
  and served under replay; checkpoints the graph writes are derived from what it read and
  did, so they are written through live and not written under replay.

The request recorded is the canonical JSON of what the model was asked::

    {"framework": "langchain", "chat_model": <_llm_type>, "model": <model id asked for>,
     "params": <ls_* params>, "messages": [...], "options": <bound kwargs: tools, ...>,
     "stop": [...]}

Messages are recorded without their ``id`` (LangGraph gives each new message a random one),
so a changed prompt diverges at ``$.request.messages[i].content``, a changed tool at
``$.request.options.tools[i]``. The response is the model's ``ChatResult`` as JSON, with the
build that answered in ``model`` (``response_metadata["model_name"]``, else the requested id):
the Recorder applies its exact-build policy to it (an alias is refused; allow an id with
``TRACEVAULT_MODEL_ALLOW``).

Needs the ``langgraph`` extra: ``pip install 'tracevault[langgraph]'``.
"""

from __future__ import annotations

import base64
import contextvars
import json
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from typing import Any

from tracevault.errors import missing_extra

try:
    from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
    from langchain_core.language_models import BaseChatModel, LanguageModelInput
    from langchain_core.messages import AIMessage, BaseMessage, messages_from_dict
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langchain_core.runnables import Runnable, RunnableConfig
    from langchain_core.tools import BaseTool
    from langgraph.checkpoint.base import (
        BaseCheckpointSaver,
        ChannelVersions,
        Checkpoint,
        CheckpointMetadata,
        CheckpointTuple,
    )
except ImportError as exc:  # the extra is not installed: say which one
    raise missing_extra("langgraph", exc) from exc
from pydantic import BaseModel, ConfigDict

from tracevault.callsite import add_harness_module, called
from tracevault.edges import JSON, Edges
from tracevault.errors import ConfigError, PayloadError
from tracevault.producer import Recorder, Tool

__all__ = [
    "RecordedChatModel",
    "RecordedCheckpointer",
    "RecordedTool",
    "chat_model",
    "checkpointer",
    "idempotency_key",
    "tool",
    "tools",
]

# The crossing's call site is the agent's node, not the framework's plumbing.
for _module in ("langchain_core", "langchain", "langgraph", "langchain_openai", "pydantic"):
    add_harness_module(_module)

_KEY: contextvars.ContextVar[str | None] = contextvars.ContextVar("tracevault_tool_key")
_ASYNC: contextvars.ContextVar[bool] = contextvars.ContextVar("tracevault_tool_async")


def idempotency_key() -> str | None:
    """Inside a side-effecting tool: the key of this call (run id and seq), else None.

    The same key comes back when a retried or resumed run makes the same call, so the tool
    can refuse to act twice (``tracevault.producer.Tool``).
    """
    return _KEY.get(None)


# -- JSON of what crosses ------------------------------------------------------------------------
def _jsonable(value: Any, path: str) -> JSON:
    """``value`` as JSON: pydantic models dumped, pydantic classes as their schema, or refused."""
    if value is None or isinstance(value, str | bool | int | float):
        return value
    if isinstance(value, dict):
        return {str(k): _jsonable(v, f"{path}.{k}") for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v, f"{path}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, BaseModel):
        return _jsonable(value.model_dump(mode="json"), path)
    if isinstance(value, type) and issubclass(value, BaseModel):
        return _jsonable(value.model_json_schema(), path)
    raise PayloadError(
        f"{path} is a {type(value).__name__}, which tracevault cannot record as JSON: bind "
        "JSON values (or pydantic models) to the chat model",
        path,
    )


def _message(m: BaseMessage, path: str) -> JSON:
    """What the model is shown of one message: its role and content, no random id."""
    out: dict[str, Any] = {"role": m.type, "content": _jsonable(m.content, f"{path}.content")}
    if m.name:
        out["name"] = m.name
    calls = getattr(m, "tool_calls", None)
    if calls:
        out["tool_calls"] = [
            {"id": c.get("id"), "name": c["name"], "args": c["args"]} for c in calls
        ]
    call_id = getattr(m, "tool_call_id", None)
    if call_id is not None:
        out["tool_call_id"] = call_id
    extra = {k: v for k, v in m.additional_kwargs.items() if k != "tool_calls"}
    if extra:
        out["additional_kwargs"] = _jsonable(extra, f"{path}.additional_kwargs")
    return out


def _request(
    inner: BaseChatModel,
    messages: list[BaseMessage],
    stop: list[str] | None,
    kwargs: dict[str, Any],
) -> JSON:
    params = {
        k: v
        for k, v in inner._get_ls_params(stop=stop, **kwargs).items()
        if k != "ls_stop" and v is not None
    }
    asked = params.pop("ls_model_name", None) or getattr(inner, "model_name", None)
    return {
        "framework": "langchain",
        "chat_model": inner._llm_type,
        "model": asked,
        "params": _jsonable(params, "$.request.params"),
        "messages": [_message(m, f"$.request.messages[{i}]") for i, m in enumerate(messages)],
        "options": _jsonable(kwargs, "$.request.options"),
        "stop": stop,
    }


def _build(result: ChatResult, asked: JSON) -> str | None:
    """The build that answered: the provider's name for it, else the id the model was asked."""
    llm = result.llm_output or {}
    for source in (llm, *(g.message.response_metadata for g in result.generations)):
        for key in ("model_name", "model"):
            named = source.get(key)
            if isinstance(named, str) and named:
                return named
    return asked if isinstance(asked, str) else None


def _recorded(result: ChatResult, asked: JSON) -> JSON:
    return {
        "model": _build(result, asked),
        "generations": [
            {
                "message": {"type": g.message.type, "data": g.message.model_dump(mode="json")},
                "generation_info": _jsonable(g.generation_info, "$.response.generation_info"),
            }
            for g in result.generations
        ],
        "llm_output": _jsonable(result.llm_output, "$.response.llm_output"),
    }


def _served(recorded: JSON) -> ChatResult:
    gens = recorded["generations"]
    messages = messages_from_dict([g["message"] for g in gens])
    return ChatResult(
        generations=[
            ChatGeneration(message=m, generation_info=g.get("generation_info"))
            for m, g in zip(messages, gens, strict=True)
        ],
        llm_output=recorded.get("llm_output"),
    )


def _seed(inner: BaseChatModel, kwargs: dict[str, Any]) -> int | None:
    seed = kwargs.get("seed", getattr(inner, "seed", None))
    return seed if isinstance(seed, int) and not isinstance(seed, bool) else None


# -- the chat model --------------------------------------------------------------------------
class RecordedChatModel(BaseChatModel):
    """A chat model whose every generation is a recorded crossing (see the module docstring)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    inner: BaseChatModel
    edges: Any  # an Edges (a Protocol: pydantic cannot check it)

    @property
    def _llm_type(self) -> str:
        return f"tracevault:{self.inner._llm_type}"

    def _get_ls_params(self, stop: list[str] | None = None, **kwargs: Any) -> Any:
        return self.inner._get_ls_params(stop=stop, **kwargs)

    def bind_tools(
        self, tools: Sequence[Any], **kwargs: Any
    ) -> Runnable[LanguageModelInput, AIMessage]:
        """The wrapped model's own ``bind_tools`` (its tool format), bound to this wrapper."""
        bound: Any = self.inner.bind_tools(tools, **kwargs)
        return self.bind(**bound.kwargs)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        request = _request(self.inner, messages, stop, kwargs)

        def live(_request: JSON, **_kw: Any) -> JSON:
            result = self.inner._generate(messages, stop=stop, run_manager=run_manager, **kwargs)
            return _recorded(result, request["model"])

        recorded = self.edges.model(request, model=None, seed=_seed(self.inner, kwargs), call=live)
        return _served(recorded)

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        request = _request(self.inner, messages, stop, kwargs)

        async def live() -> JSON:
            result = await self.inner._agenerate(
                messages, stop=stop, run_manager=run_manager, **kwargs
            )
            return _recorded(result, request["model"])

        recorded = await self.edges.amodel(
            request, model=None, seed=_seed(self.inner, kwargs), call=lambda _r, **_k: live()
        )
        return _served(recorded)


def chat_model(model: BaseChatModel, edges: Edges) -> RecordedChatModel:
    """``model`` with each call recorded live and served from the record under replay."""
    if isinstance(model, RecordedChatModel):
        raise ConfigError(f"{model!r} is already recorded: wrap the framework's own model once")
    if not isinstance(model, BaseChatModel):
        raise ConfigError(
            f"chat_model(model, edges) needs a langchain_core BaseChatModel, got {model!r:.80}"
        )
    return RecordedChatModel(inner=model, edges=edges)


# -- tools ---------------------------------------------------------------------------------------
class RecordedTool(BaseTool):
    """A LangChain tool whose each call is a TOOL_CALL crossing (see the module docstring)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    inner: BaseTool
    edges: Any
    side_effect: bool = False

    def _args(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> JSON:
        kwargs.pop("run_manager", None)
        kwargs.pop("config", None)
        if args:
            raise PayloadError(
                f"$.request.args: tool {self.name!r} was given positional input; tracevault "
                "records a tool's named arguments (an args_schema)",
                "$.request.args",
            )
        return _jsonable(kwargs, "$.request.args")

    def run(self, tool_input: Any, *args: Any, **kwargs: Any) -> Any:
        with called(kwargs.get("tool_call_id"), _definition(self.inner)):
            return super().run(tool_input, *args, **kwargs)

    async def arun(self, tool_input: Any, *args: Any, **kwargs: Any) -> Any:
        with called(kwargs.get("tool_call_id"), _definition(self.inner)):
            return await super().arun(tool_input, *args, **kwargs)

    def _run(self, *args: Any, **kwargs: Any) -> Any:
        token = _ASYNC.set(False)
        try:
            return self.edges.tool(self.name, self._args(args, kwargs))
        finally:
            _ASYNC.reset(token)

    async def _arun(self, *args: Any, **kwargs: Any) -> Any:
        token = _ASYNC.set(True)
        try:
            return await self.edges.atool(self.name, self._args(args, kwargs))
        finally:
            _ASYNC.reset(token)

    def call_live(self, args: JSON, idempotency_key: str | None = None) -> Any:
        """The wrapped tool run for real (the Recorder's callee): ``ainvoke`` when the agent
        awaited the call, ``invoke`` otherwise."""
        if _ASYNC.get(False):
            return self._acall_live(args, idempotency_key)
        token = _KEY.set(idempotency_key)
        try:
            return self.inner.invoke(args)
        finally:
            _KEY.reset(token)

    async def _acall_live(self, args: JSON, idempotency_key: str | None) -> Any:
        token = _KEY.set(idempotency_key)
        try:
            return await self.inner.ainvoke(args)
        finally:
            _KEY.reset(token)


def _definition(t: BaseTool) -> str | None:
    """``module:function:line`` of the function behind ``t`` (``@tool``'s, else its ``_run``)."""
    fn: Any = getattr(t, "func", None) or getattr(t, "coroutine", None) or type(t)._run
    code = getattr(fn, "__code__", None)
    if code is None:
        return None
    return f"{fn.__module__}:{fn.__qualname__}:{code.co_firstlineno}"


def _register(recorded: RecordedTool, edges: Edges) -> None:
    """Live, the Recorder dispatches the tool by name: give it this tool unless it has one.

    A Recorder that already knows the name keeps its own (the developer's ``Recorder(tools=)``,
    or a fork's table, which serves side effects from the record). Under replay there is
    nothing to give: the record answers and the tool is never run.
    """
    if isinstance(edges, Recorder):
        table: dict[str, Tool] = edges._tools
        if recorded.name not in table:
            table[recorded.name] = Tool(recorded.call_live, side_effect=recorded.side_effect)


def tool(t: BaseTool, edges: Edges, *, side_effect: bool = False) -> RecordedTool:
    """``t`` recorded as a TOOL_CALL crossing; ``side_effect=True`` for a tool that changes the
    world (it gets an :func:`idempotency_key`; a fork serves it from the record)."""
    if isinstance(t, RecordedTool):
        raise ConfigError(f"tool {t.name!r} is already recorded: wrap the framework's tool once")
    if not isinstance(t, BaseTool):
        raise ConfigError(f"tool(t, edges) needs a langchain_core BaseTool, got {t!r:.80}")
    recorded = RecordedTool(
        name=t.name,
        description=t.description,
        args_schema=t.args_schema,
        return_direct=t.return_direct,
        response_format=t.response_format,
        inner=t,
        edges=edges,
        side_effect=side_effect,
    )
    _register(recorded, edges)
    return recorded


def tools(
    ts: Iterable[BaseTool], edges: Edges, *, side_effects: Iterable[str] = ()
) -> list[RecordedTool]:
    """Each of ``ts`` recorded (:func:`tool`), those named in ``side_effects`` as side effects."""
    effects = set(side_effects)
    out = [tool(t, edges, side_effect=getattr(t, "name", None) in effects) for t in ts]
    unknown = effects - {t.name for t in out}
    if unknown:
        raise ConfigError(f"side_effects names {sorted(unknown)}, not among the tools given")
    return out


# -- LangGraph's checkpointer --------------------------------------------------------------------
def _thread(config: RunnableConfig) -> str:
    conf = config.get("configurable") or {}
    name = f"langgraph checkpoint {conf.get('thread_id')}"
    if conf.get("checkpoint_ns"):
        name += f" ns={conf['checkpoint_ns']}"
    if conf.get("checkpoint_id"):
        name += f" id={conf['checkpoint_id']}"
    return name


def _listing(
    config: RunnableConfig | None,
    filter: dict[str, Any] | None,
    before: RunnableConfig | None,
    limit: int | None,
) -> str:
    """The name of a ``list`` read: the thread and the query, as canonical JSON."""
    query = {"filter": _jsonable(filter, "$.filter"), "before": _config(before), "limit": limit}
    return f"{_thread(config or {})} list " + json.dumps(
        query, sort_keys=True, separators=(",", ":")
    )


def _config(config: RunnableConfig | None) -> JSON:
    """The part of a checkpoint's config that names it (strings only: thread, ns, id)."""
    if config is None:
        return None
    conf = config.get("configurable") or {}
    return {"configurable": {k: v for k, v in conf.items() if isinstance(v, str)}}


class RecordedCheckpointer(BaseCheckpointSaver[Any]):
    """A LangGraph checkpointer whose reads are recorded state (see the module docstring).

    What a graph loads is held as the saver's own typed serialisation (``serde.dumps_typed``,
    base64), so the same ``Checkpoint`` (messages and all) comes back under replay, whatever
    its channels hold. Writes go to the wrapped saver live and nowhere under replay: the
    record already answers every later read of the run.
    """

    def __init__(self, inner: BaseCheckpointSaver[Any], edges: Edges) -> None:
        super().__init__(serde=inner.serde)
        self.inner = inner
        self.edges = edges
        self.live = isinstance(edges, Recorder)

    def _typed(self, value: Any) -> JSON:
        kind, data = self.serde.dumps_typed(value)
        return {"type": kind, "base64": base64.b64encode(data).decode()}

    def _untyped(self, value: JSON) -> Any:
        return self.serde.loads_typed((value["type"], base64.b64decode(value["base64"])))

    def _dump(self, found: CheckpointTuple | None) -> JSON:
        if found is None:
            return None
        return {
            "config": _config(found.config),
            "parent_config": _config(found.parent_config),
            "checkpoint": self._typed(found.checkpoint),
            "metadata": self._typed(found.metadata),
            "pending_writes": [
                [task, channel, self._typed(value)]
                for task, channel, value in found.pending_writes or ()
            ],
        }

    def _load(self, recorded: JSON) -> CheckpointTuple | None:
        if recorded is None:
            return None
        return CheckpointTuple(
            config=recorded["config"],
            checkpoint=self._untyped(recorded["checkpoint"]),
            metadata=self._untyped(recorded["metadata"]),
            parent_config=recorded["parent_config"],
            pending_writes=[(t, c, self._untyped(v)) for t, c, v in recorded["pending_writes"]],
        )

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self._load(
            self.edges.state(_thread(config), lambda: self._dump(self.inner.get_tuple(config)))
        )

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        async def read() -> JSON:
            return self._dump(await self.inner.aget_tuple(config))

        return self._load(await self.edges.astate(_thread(config), read))

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        def read() -> JSON:
            found = self.inner.list(config, filter=filter, before=before, limit=limit)
            return [self._dump(t) for t in found]

        recorded = self.edges.state(_listing(config, filter, before, limit), read)
        yield from self._loaded(recorded)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        async def read() -> JSON:
            found = self.inner.alist(config, filter=filter, before=before, limit=limit)
            return [self._dump(t) async for t in found]

        recorded = await self.edges.astate(_listing(config, filter, before, limit), read)
        for loaded in self._loaded(recorded):
            yield loaded

    def _loaded(self, recorded: JSON) -> Iterator[CheckpointTuple]:
        for one in recorded:
            loaded = self._load(one)
            if loaded is not None:
                yield loaded

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        if self.live:
            return self.inner.put(config, checkpoint, metadata, new_versions)
        return _written(config, checkpoint)

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        if self.live:
            return await self.inner.aput(config, checkpoint, metadata, new_versions)
        return _written(config, checkpoint)

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        if self.live:
            self.inner.put_writes(config, writes, task_id, task_path)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        if self.live:
            await self.inner.aput_writes(config, writes, task_id, task_path)

    def get_next_version(self, current: Any, channel: None) -> Any:
        return self.inner.get_next_version(current, channel)


def _written(config: RunnableConfig, checkpoint: Checkpoint) -> RunnableConfig:
    """What ``put`` returns: the config naming the checkpoint just written."""
    conf = config.get("configurable") or {}
    return {
        "configurable": {
            "thread_id": conf.get("thread_id"),
            "checkpoint_ns": conf.get("checkpoint_ns", ""),
            "checkpoint_id": checkpoint["id"],
        }
    }


def checkpointer(saver: BaseCheckpointSaver[Any], edges: Edges) -> RecordedCheckpointer:
    """``saver`` with what a graph loads from it recorded as state (``compile(checkpointer=)``)."""
    if isinstance(saver, RecordedCheckpointer):
        raise ConfigError("checkpointer(saver, edges) got a recorded saver: wrap the saver once")
    if not isinstance(saver, BaseCheckpointSaver):
        raise ConfigError(
            f"checkpointer(saver, edges) needs a LangGraph BaseCheckpointSaver, got {saver!r:.80}"
        )
    return RecordedCheckpointer(saver, edges)
