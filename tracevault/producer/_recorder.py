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
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import inspect
import json
import random
import secrets
import socket
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from tracevault import __version__
from tracevault.callsite import SITE_ATTRIBUTE, call_site, sited
from tracevault.edges import (
    CANCELLED_ATTRIBUTE,
    JSON,
    Crossing,
    clock_crossing,
    decision_crossing,
    model_call_crossing,
    random_crossing,
    reported_model,
    state_crossing,
    tool_crossing,
)
from tracevault.errors import ConfigError, PayloadError, TraceVaultError
from tracevault.links import PARENT_RUN, PARENT_SEQ, SUBAGENT_RUN, subagent_crossing
from tracevault.log import NoteSigner
from tracevault.model_ids import check_model_id
from tracevault.producer._attest import attested
from tracevault.producer._content import confidential
from tracevault.producer._publisher import Publisher
from tracevault.producer._tool import Tool
from tracevault.producer._wire import EventEncoder, EventFields
from tracevault.runid import check_run_id
from tracevault.schemas import (
    AgentInfo,
    ErrorInfo,
    EventKind,
    canonical_json,
    canonical_json_plain,
)

__all__ = ["Recorder"]

_MISSING: Any = object()
_NULL = b"null"
_EMPTY = b"{}"
_NONE6 = (None, None, None, None, None, None)
_MAX_ERROR_CHARS = 16_384
_MAX_ATTRIBUTE_BYTES = 8_192
_INT64 = (-(1 << 63), (1 << 63) - 1)
# RFC 8785 holds integers exactly up to here; the RANDOM response carries the seed as JSON.
_SAFE_INT = (1 << 53) - 1
_HOST = socket.gethostname()

# (recorder identity, seq) of the crossing whose callee is running: gives nested crossings
# their parent_seq, per thread and per asyncio task.
_CURRENT: contextvars.ContextVar[tuple[int, int] | None] = contextvars.ContextVar(
    "tracevault_current_crossing", default=None
)
# (recorder identity, seq) of the crossing this branch completed last: a new asyncio task
# copies its creator's context, so its first crossing names the creator's last one.
_BRANCH: contextvars.ContextVar[tuple[int, int] | None] = contextvars.ContextVar(
    "tracevault_branch_last", default=None
)


@dataclass(slots=True)
class _Open:
    """A crossing whose callee is running: what its event needs once it returns."""

    seq: int
    crossing: Crossing
    request: bytes
    key: str | None
    parent: int | None
    at: int
    t0: int
    prev: int | None


def _error_info(exc: BaseException) -> ErrorInfo:
    cls = type(exc)
    mod = cls.__module__
    name = cls.__qualname__ if mod == "builtins" else f"{mod}.{cls.__qualname__}"
    try:
        message = str(exc)
    except Exception:  # a broken __str__ must not hide the exception being recorded
        message = f"<unprintable {cls.__qualname__}>"
    # Lone surrogates cannot be UTF-8 (Avro strings): keep them visible as escapes.
    message = message[:_MAX_ERROR_CHARS].encode("utf-8", "backslashreplace").decode("utf-8")
    return ErrorInfo(name, message)


def _is_text(value: object) -> bool:
    """A str that UTF-8 can encode (no lone surrogates): the Avro strings must be."""
    # Callers are typed, agents are not: runtime checks for what annotations promise.
    if not isinstance(value, str):
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


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


def _check_seed(seed: object, path: str = "$.seed") -> None:
    if seed is None:
        return
    if isinstance(seed, bool) or not isinstance(seed, int) or not _INT64[0] <= seed <= _INT64[1]:
        raise PayloadError(f"{path} must be an int in the 64-bit range or None, got {seed!r}", path)


class Recorder:
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

    # -- plumbing ---------------------------------------------------------------------------
    def _payload(self, value: JSON, field: str) -> bytes:
        return self._encoded(value, field)[0]

    def _encoded(self, value: JSON, field: str) -> tuple[bytes, bool]:
        """The canonical bytes, and whether orjson reads them back (``canonical_json_plain``)."""
        if self._redactor is not None:  # before anything is recorded (docs/confidentiality.md)
            value = self._redactor.apply(value, field)
        data, plain = canonical_json_plain(value, field=field)
        if len(data) > self._max:
            raise PayloadError(
                f"$.{field} is {len(data)} bytes of canonical JSON, over max_payload_bytes="
                f"{self._max}; record a reference (an object-store key, a hash) instead of the "
                "bulk, or raise TRACEVAULT_MAX_PAYLOAD_BYTES",
                f"$.{field}",
            )
        return data, plain

    def _alloc(self, final: bool = False) -> int:
        with self._lock:
            if not self._started:
                raise TraceVaultError(
                    "this Recorder's run has not started: call edges inside recorder.run(...), "
                    "await recorder.arun(...) or `with Recorder(..., input=...)`"
                )
            if self._finished:
                raise TraceVaultError(
                    f"run {self._run_id} has finished (RUN_FINISHED was recorded); a crossing "
                    "after the end cannot be recorded: create a new Recorder"
                )
            seq = self._next_seq
            self._next_seq = seq + 1
            if final:
                self._finished = True
            return seq

    def _emit(self, seq: int, fields: Any, prev: int | None) -> None:
        """Complete crossing ``seq`` and publish in seq order (an early one waits for earlier).

        Completing stamps the interleave: how many crossings had started and completed by
        now, under the same lock that hands out seqs. The Avro bytes are made on the
        Publisher's thread (``encode_fields``), off the agent's path; everything in
        ``fields`` is already validated.
        """
        _BRANCH.set((self._ident, seq))
        with self._lock:
            fields = (*fields, (prev, self._next_seq, self._done))
            self._done += 1
            if seq != self._next_emit:
                self._waiting[seq] = fields
                return
            enqueue, key, encode = self._publisher._enqueue, self._key, self._encode
            enqueue(key, encode, (fields,))
            nxt = seq + 1
            waiting = self._waiting
            while nxt in waiting:
                enqueue(key, encode, (waiting.pop(nxt),))
                nxt += 1
            self._next_emit = nxt

    def _branch_prev(self) -> int | None:
        """The seq this task or thread completed last in this run (None: its first)."""
        last = _BRANCH.get()
        return last[1] if last is not None and last[0] == self._ident else None

    def _parent(self) -> int | None:
        cur = _CURRENT.get()
        return cur[1] if cur is not None and cur[0] == self._ident else None

    def _open(self, crossing: Crossing, effect: bool) -> _Open:
        request = self._payload(crossing.request, "request")
        prev = self._branch_prev()
        seq = self._alloc()
        return _Open(
            seq,
            crossing,
            request,
            f"{self._run_id}:{seq}" if effect else None,
            self._parent(),
            _now_us(),
            time.perf_counter_ns(),
            prev,
        )

    def _record(self, op: _Open, response: bytes, error: ErrorInfo | None) -> None:
        duration = (time.perf_counter_ns() - op.t0) // 1000
        c = op.crossing
        self._emit(
            op.seq,
            (
                op.seq,
                c.kind,
                op.at,
                op.request,
                response,
                c.model,
                c.seed,
                error,
                op.key,
                op.parent,
                _with_duration(self._attrs.pop(op.seq, None), duration),
            ),
            op.prev,
        )

    def _respond(self, op: _Open, result: Any) -> Any:
        try:
            response, plain = self._encoded(result, "response")
        except PayloadError as exc:
            # The call happened: record it with the refusal so the seq stays contiguous.
            self._record(op, _NULL, _error_info(exc))
            raise
        if op.crossing.kind is EventKind.MODEL_CALL and op.crossing.model is None:
            # model=None: the build is the one the provider answered with (edges.py).
            try:
                build = check_model_id(
                    reported_model(result), self._model_allow, path="$.response.model"
                )
                op.crossing = dataclasses.replace(op.crossing, model=build)
            except PayloadError as exc:
                self._record(op, response, _error_info(exc))  # refused, the answer kept
                raise
        self._record(op, response, None)
        # Hand the agent the recorded form, not the callee's object: replay can only serve
        # what the record holds (sorted keys, lists for tuples), so live must see the same
        # or an agent that iterates a dict or formats it would diverge under replay.
        # orjson where it reads the bytes as json does (no float, no int past 64 bits): a
        # quarter of json's time for a 1.5 KB answer, on every recorded call.
        return orjson.loads(response) if plain else json.loads(response)

    def _call(self, crossing: Crossing, invoke: Callable[[str | None], Any], effect: bool) -> Any:
        op = self._open(crossing, effect)
        self._attrs[op.seq] = _with_site(call_site(3))
        token = _CURRENT.set((self._ident, op.seq))
        try:
            result = invoke(op.key)
            if inspect.isawaitable(result):
                _close(result)
                raise ConfigError(
                    f"the {crossing.kind.value} callee is async: use the a-prefixed edge "
                    "(amodel, atool, astate) from an async agent"
                )
        except BaseException as exc:
            self._record(op, _NULL, _error_info(exc))
            raise
        finally:
            _CURRENT.reset(token)
        return self._respond(op, result)

    async def _acall(
        self, crossing: Crossing, invoke: Callable[[str | None], Any], effect: bool
    ) -> Any:
        op = self._open(crossing, effect)
        self._attrs[op.seq] = _with_site(call_site(3))
        token = _CURRENT.set((self._ident, op.seq))
        try:
            result = invoke(op.key)
            if inspect.isawaitable(result):
                result = await result
        except BaseException as exc:
            self._record(op, _NULL, self._abandoned(op, exc))
            raise
        finally:
            _CURRENT.reset(token)
        return self._respond(op, result)

    def note_current(self, key: str, value: str) -> None:
        """Add an attribute to the crossing whose callee is running (on its task or thread).

        For a callee that knows more than the Recorder, e.g. a fork's tool answered from the
        record names the recorded call (``tracevault.replayer.investigate.fork``).
        """
        cur = _CURRENT.get()
        if cur is not None and cur[0] == self._ident:
            self._attrs.setdefault(cur[1], {})[key] = value

    def _abandoned(self, op: _Open, exc: BaseException) -> ErrorInfo:
        """The error an async crossing ended with; a cancellation says who cancelled it.

        ``"caller"``: the task had a cancel request pending (a ``wait_for`` timeout,
        ``task.cancel()``, a race's loser, a TaskGroup stopping), so under replay the crossing
        waits for the agent to cancel it again; ``"callee"``: the callee raised it alone.
        """
        if isinstance(exc, asyncio.CancelledError):
            task = asyncio.current_task()
            by = "caller" if task is not None and task.cancelling() else "callee"
            self._attrs.setdefault(op.seq, {})[CANCELLED_ATTRIBUTE] = by
        return _error_info(exc)

    def _instant(self, crossing: Crossing, response: bytes, at: int, seed: int | None) -> None:
        request = self._payload(crossing.request, "request")
        prev = self._branch_prev()
        seq = self._alloc()
        self._emit(
            seq,
            (
                seq,
                crossing.kind,
                at,
                request,
                response,
                None,
                seed,
                None,
                None,
                self._parent(),
                _with_site(call_site(2)),
            ),
            prev,
        )

    # -- the edges --------------------------------------------------------------------------
    def _model_target(
        self, model: str | None, seed: int | None, call: Callable[..., Any] | None
    ) -> Callable[..., Any]:
        if model is not None and not (type(model) is str and model in self._models_ok):
            # None: the build the response names is checked instead, after the call
            if not _is_text(model):
                raise PayloadError(f"$.model {model!r} is not UTF-8 text", "$.model")
            check_model_id(model, self._model_allow)
            self._models_ok.add(model)
        _check_seed(seed)
        if call is not None:
            if not callable(call):
                raise ConfigError(f"edges.model(call=...) must be callable, got {call!r}")
            return call
        fn = self._model_fn
        if fn is None:
            raise ConfigError("this Recorder has no model: pass Recorder(model=call_model)")
        return fn

    def model(
        self,
        request: JSON,
        *,
        model: str | None,
        seed: int | None = None,
        call: Callable[..., Any] | None = None,
    ) -> JSON:
        crossing = model_call_crossing(request, model=model, seed=seed, call=call)
        fn = self._model_target(model, seed, call)
        return self._call(crossing, lambda _k: fn(request, model=model, seed=seed), False)

    @sited
    async def amodel(
        self,
        request: JSON,
        *,
        model: str | None,
        seed: int | None = None,
        call: Callable[..., Any] | None = None,
    ) -> JSON:
        crossing = model_call_crossing(request, model=model, seed=seed, call=call)
        fn = self._model_target(model, seed, call)
        return await self._acall(crossing, lambda _k: fn(request, model=model, seed=seed), False)

    def add_tool(self, name: str, fn: Callable[..., Any] | Tool) -> None:
        """Register tool ``name`` after construction, once: for framework adapters
        (``tracevault.integrations``) that find an agent's tools only when it runs.

        A name already registered with another function is refused: the crossing must call
        one callee, whichever registered it first.
        """
        tool = fn if isinstance(fn, Tool) else Tool(fn)
        had = self._tools.get(name)
        if had is None:
            if not _is_text(name) or not name:
                raise ConfigError(f"tool names must be non-empty strings, got {name!r}")
            self._tools[name] = tool
        elif had.fn is not tool.fn:
            raise ConfigError(
                f"tool {name!r} is already registered in this Recorder with another function"
            )

    def _tool(self, name: str) -> Tool:
        tool = self._tools.get(name)
        if tool is None:
            known = ", ".join(sorted(self._tools)) or "none"
            raise PayloadError(
                f"$.request.tool {name!r} is not a tool of this Recorder (known: {known}); "
                "register it in Recorder(tools={...})",
                "$.request.tool",
            )
        return tool

    @staticmethod
    def _invoker(tool: Tool, args: JSON) -> Callable[[str | None], Any]:
        fn = tool.fn
        if tool.side_effect:
            return lambda key: fn(args, idempotency_key=key)
        return lambda _k: fn(args)

    def tool(self, name: str, args: JSON) -> JSON:
        crossing = tool_crossing(name, args)
        tool = self._tool(name)
        return self._call(crossing, self._invoker(tool, args), tool.side_effect)

    @sited
    async def atool(self, name: str, args: JSON) -> JSON:
        crossing = tool_crossing(name, args)
        tool = self._tool(name)
        return await self._acall(crossing, self._invoker(tool, args), tool.side_effect)

    def clock(self, name: str = "now") -> float:
        if self._clock is not None:  # Recorder(clock=...): e.g. a fork serving recorded reads
            now = self._clock(name)
            self._instant(clock_crossing(name), canonical_json({"time": now}), _now_us(), None)
            return now
        ns = time.time_ns()
        now = ns / 1e9
        self._instant(clock_crossing(name), canonical_json({"time": now}), ns // 1000, None)
        return now

    def random(self, name: str = "rng", *, seed: int | None = None) -> random.Random:
        _check_seed(seed)
        # 53 random bits: the seed stays an exact JSON number in the response (RFC 8785); a
        # larger seed given by the agent is shown there as a string, and replay reads the
        # event's Avro ``seed`` field either way.
        drawn = secrets.randbits(53) if seed is None else seed
        shown: int | str = drawn if -_SAFE_INT <= drawn <= _SAFE_INT else str(drawn)
        self._instant(
            random_crossing(name, seed), canonical_json({"seed": shown}), _now_us(), drawn
        )
        return random.Random(drawn)

    def state(self, name: str, read: Callable[[], JSON] | None = None) -> JSON:
        crossing = state_crossing(name)
        if read is None:
            raise ConfigError(f"state({name!r}) needs read=: live, the value must come from it")
        return self._call(crossing, lambda _k: read(), False)

    @sited
    async def astate(self, name: str, read: Callable[[], Awaitable[JSON]] | None = None) -> JSON:
        crossing = state_crossing(name)
        if read is None:
            raise ConfigError(f"astate({name!r}) needs read=: live, the value must come from it")
        return await self._acall(crossing, lambda _k: read(), False)

    def decision(self, name: str, choice: JSON, *, options: list[JSON] | None = None) -> JSON:
        self._instant(decision_crossing(name, choice, options), _NULL, _now_us(), None)
        return choice

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


def _with_site(site: str | None, attrs: dict[str, str] | None = None) -> dict[str, str]:
    """A crossing's attributes with its call site (``tracevault.callsite``), when known."""
    out = attrs if attrs is not None else {}
    if site is not None:
        out[SITE_ATTRIBUTE] = site
    return out


def _with_duration(attrs: dict[str, str] | None, duration: int) -> dict[str, str] | int:
    if not attrs:
        return duration  # encoded as {"duration_us": ...} off the agent's thread
    attrs["duration_us"] = str(duration)
    return attrs


def _now_us() -> int:
    return time.time_ns() // 1000


def _close(awaitable: Any) -> None:
    close = getattr(awaitable, "close", None)
    if callable(close):
        close()
