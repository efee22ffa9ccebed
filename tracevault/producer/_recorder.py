"""The Recorder: one recorded agent run, and the live :class:`~tracevault.edges.Edges`.

Every edge call follows the same steps, on the agent's own thread, so bad input fails in
the agent and nothing on the path waits on the network:

1. build the crossing with the shared ``*_crossing`` function (model ids, names checked);
2. turn the request into canonical JSON and check its size: a failure here raises
   :class:`PayloadError` naming the field, and nothing is published or called;
3. take the next seq of the run (seq is taken *before* the call, so a side-effecting tool
   gets its idempotency key ``<run_id>:<seq>`` and nested crossings sort after their parent);
4. call the real thing (model, tool, state reader); an exception it raises is recorded in
   the event's ``error`` and raised again to the agent;
5. canonical JSON of the response, encode the event, hand it to the Publisher in seq order
   (a crossing that finishes before an earlier one waits in a small per-run buffer); the
   event's ``interleave`` says where the crossing completed among the run's concurrent ones
   (asyncio tasks, threads) and which crossing of its branch came before it, so replay can
   hand results back in the same interleaving (docs/design.md, "Concurrency inside a run");
6. return the *recorded* response (parsed back from its canonical JSON) to the agent, so the
   agent sees live exactly what replay will serve.

This module is the run's life: the Recorder's checks of what it is given, the run forms
(``run``, ``arun``, ``with``), the run's boundaries and sub-agents. The steps above are
``_crossing``'s, the edge methods ``_edges``'s; both are base classes of :class:`Recorder`.
"""

from __future__ import annotations

import inspect
import socket
import threading
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from tracevault import __version__
from tracevault.callsite import call_site, sited
from tracevault.edges import JSON
from tracevault.errors import ConfigError, PayloadError, TraceVaultError
from tracevault.links import PARENT_RUN, PARENT_SEQ, SUBAGENT_RUN, subagent_crossing
from tracevault.producer._attest import attested
from tracevault.producer._content import confidential
from tracevault.producer._crossing import _NULL, _error_info, _now_us, _Open, _with_site
from tracevault.producer._edges import LiveEdges, _is_text
from tracevault.producer._publisher import Publisher
from tracevault.producer._tool import Tool
from tracevault.producer._wire import EventEncoder, EventFields
from tracevault.runid import check_run_id
from tracevault.schemas import AgentInfo, EventKind

if TYPE_CHECKING:  # the signer's module is loaded only when a run has one (_attest)
    from tracevault.transparency import NoteSigner

__all__ = ["Recorder"]

_MISSING: Any = object()
_EMPTY = b"{}"
_NONE6 = (None, None, None, None, None, None)
_MAX_ATTRIBUTE_BYTES = 8_192
_HOST = socket.gethostname()


def _allow_list(ids: Iterable[str] | None) -> frozenset[str]:
    if ids is None:
        return frozenset()
    if isinstance(ids, str):  # "a,b" as TRACEVAULT_MODEL_ALLOW takes it, not its letters
        ids = ids.split(",")
    # Callers are typed, deployments' glue code is not: check what the annotation promises.
    given: list[object] = list(ids)
    out: set[str] = set()
    for i in given:
        model = i.strip() if isinstance(i, str) else ""
        if not model or not _is_text(model) or any(c.isspace() for c in model):
            raise ConfigError(
                "Recorder(model_allow=...) must list model ids (str without white space), "
                f"e.g. model_allow=['my-local-model'], got {i!r}"
            )
        out.add(model)
    return frozenset(out)


def _tool_table(tools: Mapping[str, Callable[..., Any] | Tool] | None) -> dict[str, Tool]:
    """``Recorder(tools=...)`` checked, every entry a :class:`Tool`."""
    out: dict[str, Tool] = {}
    for name, fn in (tools or {}).items():
        if not _is_text(name) or not name:
            raise ConfigError(f"tool names must be non-empty strings, got {name!r}")
        if not isinstance(fn, Tool) and not callable(fn):
            raise ConfigError(
                f"Recorder(tools={{{name!r}: ...}}) must be the tool's function or a "
                f"Tool(fn, side_effect=...), got a {type(fn).__name__}: {fn!r:.80}"
            )
        out[name] = fn if isinstance(fn, Tool) else Tool(fn)
    return out


class Recorder(LiveEdges):
    """Record one agent run: ``RUN_STARTED`` … crossings … ``RUN_FINISHED``.

    Three ways to run, all producing the same record::

        output = Recorder(publisher=pub, agent_id="triage-bot", agent_version="1.2.0",
                          model=call_model, tools={"search": search}).run(agent, task)
        output = await Recorder(...).arun(async_agent, task)
        with Recorder(..., input=task) as edges:      # or: async with
            edges.finish(my_loop(task, edges))

    ``model`` is ``call_model(request, *, model, seed)`` (plain or ``async def``); the
    ``model=`` id of each call must name a dated or versioned build unless listed in
    ``model_allow`` or ``TRACEVAULT_MODEL_ALLOW`` (``tracevault.model_ids``); ``tools``
    maps names to callables ``fn(args)`` or :class:`Tool` (side effects get
    ``idempotency_key=``). When the agent raises, ``ERROR`` and then ``RUN_FINISHED`` with the
    same error are recorded and the exception propagates. ``clock(name)``, when given, is
    the time source ``edges.clock`` records (seconds since the epoch; default: the wall clock).
    ``edges.subagent(name, agent, input)`` records another agent's run as a child of this one
    (``tracevault.links``).

    ``run_id`` (default: a new UUID, as for each sub-agent and fork) must fit the run-id
    grammar: 1 to 128 characters of ``A-Z a-z 0-9 . _ : -``, not ``.`` or ``..``
    (``tracevault.runid``, docs/design.md "Run ids"); any other id raises ``ConfigError``
    here, in the agent, before anything is published.

    ``agent_key`` (default: the deployment's ``agent_key_file`` or ``TRACEVAULT_AGENT_KEY``,
    if set) is the agent's signer: the run's chain is then signed in RUN_STARTED, every
    ``agent_attest_every`` events or ``agent_attest_interval_s`` seconds, and in
    RUN_FINISHED, so verify can tell every event this agent wrote (docs/identity.md).
    Sub-agent runs sign with the same key: list it for their agent ids too.

    With a key provider configured (``TRACEVAULT_KEY_PROVIDER``), every content field is
    encrypted under a data key of this run, wrapped by the key of ``tenant`` (default
    ``TRACEVAULT_TENANT``) or of the data ``subject`` the agent names; metadata stays in clear
    (docs/confidentiality.md). ``redact`` rules (``"card"``, ``"email"``, ``"path:$.request..."``,
    ``"regex:..."``) replace matched values with a keyed fingerprint before anything is
    recorded, the agent included in what it is handed back.
    """

    def __init__(
        self,
        *,
        publisher: Publisher,
        agent_id: str,
        agent_version: str,
        model: Callable[..., Any] | None = None,
        tools: Mapping[str, Callable[..., Any] | Tool] | None = None,
        run_id: str | None = None,
        harness: str = "python",
        attributes: Mapping[str, str] | None = None,
        max_payload_bytes: int | None = None,
        model_allow: Iterable[str] | None = None,
        input: JSON = _MISSING,
        clock: Callable[[str], float] | None = None,
        tenant: str | None = None,
        subject: str | None = None,
        redact: Iterable[str] | None = None,
        agent_key: NoteSigner | None = None,
    ) -> None:
        if not isinstance(publisher, Publisher):
            raise ConfigError(f"Recorder(publisher=...) must be a Publisher, got {publisher!r}")
        named = (("agent_id", agent_id), ("agent_version", agent_version), ("harness", harness))
        for field, value in named:
            if not _is_text(value) or not value.strip():
                raise ConfigError(f"Recorder({field}=...) must be a non-empty UTF-8 string")
        run_id = check_run_id(
            str(uuid.uuid4()) if run_id is None else run_id, what="Recorder(run_id=...)"
        )
        self._tools = _tool_table(tools)
        if model is not None and not callable(model):
            raise ConfigError("Recorder(model=...) must be callable")
        self._model_allow = publisher.settings.allowed_models | _allow_list(model_allow)
        # Ids this Recorder already accepted: an agent names the same few builds on every
        # call, and the policy's regexes need not run again on the agent's hot path.
        self._models_ok: set[str] = set()
        attrs = dict(attributes or {})
        if any(not _is_text(k) or not _is_text(v) for k, v in attrs.items()):
            raise ConfigError("Recorder(attributes=...) must map str to str (UTF-8)")
        if sum(len(k) + len(v) for k, v in attrs.items()) > _MAX_ATTRIBUTE_BYTES:
            raise ConfigError(
                f"Recorder(attributes=...) is over {_MAX_ATTRIBUTE_BYTES} characters; keep "
                "attributes small and put data in the run's input"
            )
        self._publisher = publisher
        self._model_fn = model
        self._run_id = run_id
        self._key = run_id.encode("utf-8")
        self._attributes = attrs
        self._max = max_payload_bytes or publisher.settings.max_payload_bytes
        self._enc = EventEncoder(
            run_id, AgentInfo(agent_id, agent_version, _HOST, harness, __version__)
        )
        self._encode, self._content, self._redactor = confidential(
            publisher.settings, self._enc, attrs, tenant=tenant, subject=subject, redact=redact
        )
        # Agent identity (docs/identity.md): the attestor wraps the final encoder (it signs
        # the exact bytes published, ciphertext included), on the Publisher's thread.
        self._encode, self.attestor, self._agent_key = attested(
            publisher.settings, run_id, self._encode, agent_key
        )
        self._ident = id(self)
        self._lock = threading.Lock()
        self._next_seq = 0
        self._done = 0  # crossings completed: the next one's interleave.done_order
        self._last_started = 0
        self._tick = None
        self._next_emit = 0
        self._waiting: dict[int, EventFields] = {}
        self._started = False
        self._finished = False
        self._input = input
        self._clock = clock
        self._agent_version = agent_version
        # seq -> attributes of a crossing whose callee runs: its call site (taken in the edge,
        # one frame up, before any harness frame is in between), a sub-agent's run
        self._attrs: dict[int, dict[str, str]] = {}
        self._output: JSON = None
        self._output_set = False

    # -- identity ---------------------------------------------------------------------------
    @property
    def run_id(self) -> str:
        return self._run_id

    @property
    def finished(self) -> bool:
        return self._finished

    # -- run forms --------------------------------------------------------------------------
    def run(self, agent: Callable[[JSON, Recorder], JSON], input: JSON) -> JSON:
        """Record ``agent(input, edges)``; returns its output."""
        if inspect.iscoroutinefunction(agent):
            raise ConfigError("the agent is async: use `await recorder.arun(agent, input)`")
        self._start(input)
        try:
            output = agent(input, self)
        except BaseException as exc:
            self._fail(exc)
            raise
        self._finish(output)
        return output

    async def arun(
        self, agent: Callable[[JSON, Recorder], Awaitable[JSON] | JSON], input: JSON
    ) -> JSON:
        """Record ``await agent(input, edges)`` (a plain function works too)."""
        self._start(input)
        try:
            output = agent(input, self)
            if inspect.isawaitable(output):
                output = await output
        except BaseException as exc:
            self._fail(exc)
            raise
        self._finish(output)
        return output

    def finish(self, output: JSON) -> None:
        """Set the run's output in the ``with`` form; RUN_FINISHED carries it on exit."""
        if self._output_set:
            raise TraceVaultError(f"run {self._run_id}: finish() was already called")
        self._payload({"output": output}, "response")  # fail here, in the agent, if unrecordable
        self._output = output
        self._output_set = True

    def __enter__(self) -> Recorder:
        if self._input is _MISSING:
            raise ConfigError(
                "the `with Recorder(...)` form needs the agent's input: Recorder(..., input=task)"
            )
        self._start(self._input)
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        if exc is not None:
            self._fail(exc)
        else:
            self._finish(self._output)

    async def __aenter__(self) -> Recorder:
        return self.__enter__()

    async def __aexit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        self.__exit__(exc_type, exc, tb)

    # -- run boundaries ---------------------------------------------------------------------
    def _start(self, input: JSON) -> None:
        with self._lock:
            if self._started:
                raise TraceVaultError(
                    f"run {self._run_id} was already started: a Recorder records one run, "
                    "create a new Recorder for the next"
                )
        request = self._payload({"input": input}, "request")
        with self._lock:
            self._started = True
        seq = self._alloc()
        self._emit(
            seq,
            (
                seq,
                EventKind.RUN_STARTED,
                _now_us(),
                request,
                _NULL,
                None,
                None,
                None,
                None,
                None,
                self._attributes,
            ),
            None,
        )

    def _finish(self, output: JSON) -> None:
        try:
            response = self._payload({"output": output}, "response")
        except PayloadError as exc:
            self._fail(exc)
            raise
        prev = self._branch_prev()
        seq = self._alloc(final=True)
        self._emit(seq, (seq, EventKind.RUN_FINISHED, _now_us(), _EMPTY, response, *_NONE6), prev)

    def _fail(self, exc: BaseException) -> None:
        if self._finished:
            return
        err = _error_info(exc)
        prev = self._branch_prev()
        seq = self._alloc()
        self._emit(
            seq,
            (seq, EventKind.ERROR, _now_us(), _EMPTY, _NULL, None, None, err, None, None, None),
            prev,
        )
        seq = self._alloc(final=True)
        self._emit(
            seq,
            (
                seq,
                EventKind.RUN_FINISHED,
                _now_us(),
                _EMPTY,
                b'{"output":null}',
                None,
                None,
                err,
                None,
                None,
                None,
            ),
            seq - 1,
        )

    # -- sub-agents (tracevault.links) ------------------------------------------------------
    def _child(self, name: str, input: JSON, version: str | None) -> tuple[_Open, Recorder]:
        """The parent's crossing, opened, and the child's Recorder linked to it both ways."""
        op = self._open(subagent_crossing(name, input), False)
        child_id = str(uuid.uuid4())
        self._attrs[op.seq] = _with_site(call_site(3), {SUBAGENT_RUN: child_id})
        child = Recorder(
            publisher=self._publisher,
            agent_id=name,
            agent_version=version or self._agent_version,
            model=self._model_fn,
            tools=self._tools,
            run_id=child_id,
            attributes={PARENT_RUN: self._run_id, PARENT_SEQ: str(op.seq)},
            model_allow=self._model_allow,
            clock=self._clock,
            tenant=None if self._content is None else self._content.tenant,
            subject=None if self._content is None else self._content.subject,
            redact=None if self._redactor is None else self._redactor.rules,
            agent_key=self._agent_key,
        )
        return op, child

    def subagent(
        self,
        name: str,
        agent: Callable[..., JSON],
        input: JSON,
        *,
        agent_version: str | None = None,
    ) -> JSON:
        """Run ``agent(input, edges)`` as a child run of this one; returns its output.

        One TOOL_CALL ``subagent:<name>`` here (its response the child's output), one whole
        run there, linked both ways in attributes; the child uses this run's model and tools.
        """
        op, child = self._child(name, input, agent_version)
        try:
            output = child.run(agent, input)
        except BaseException as exc:
            self._record(op, _NULL, _error_info(exc))
            raise
        return self._respond(op, output)

    @sited
    async def asubagent(
        self, name: str, agent: Callable[..., Any], input: JSON, *, agent_version: str | None = None
    ) -> JSON:
        """:meth:`subagent` for async agents."""
        op, child = self._child(name, input, agent_version)
        try:
            output = await child.arun(agent, input)
        except BaseException as exc:
            self._record(op, _NULL, self._abandoned(op, exc))
            raise
        return self._respond(op, output)
