"""One crossing's steps, shared by every edge: payload, seq, call, record, publish.

Split from ``_recorder`` so that the Recorder's module reads as a run's life (its checks,
run forms and boundaries, sub-agents) and this one as the path every crossing takes on the
agent's thread (steps 2 to 6 of ``_recorder``'s module doc): canonical JSON with its size
check, the next seq, the callee inside the current-crossing context, the event's fields, and
the hand-off to the Publisher in seq order. :class:`Crossings` is the base class of
:class:`~tracevault.producer.Recorder`, which sets the state declared here; the methods are
the Recorder's own, moved whole (no call is added on the path).
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import inspect
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from tracevault.callsite import CALL_ID_ATTRIBUTE, SITE_ATTRIBUTE, call_site, take_call_id
from tracevault.edges import APART_ATTRIBUTE, CANCELLED_ATTRIBUTE, JSON, Crossing, reported_model
from tracevault.errors import ConfigError, PayloadError, TraceVaultError
from tracevault.model_ids import check_model_id
from tracevault.producer._publisher import Publisher
from tracevault.producer._wire import EventFields
from tracevault.schemas import ErrorInfo, EventKind, canonical_json_plain

if TYPE_CHECKING:  # tracevault.content is loaded only for a run with redaction (_content)
    from tracevault.content import Redactor

__all__ = ["Crossings"]

_NULL = b"null"
_MAX_ERROR_CHARS = 16_384
#: What callees answer with (JSON values): never awaitable. Testing the type first spares
#: every recorded call ``inspect.isawaitable``'s ABC check (~1 µs for a dict).
_PLAIN = frozenset({dict, list, str, int, float, bool, tuple, type(None)})

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


class Crossings:
    """The steps of a crossing, as methods of the Recorder (its base class)."""

    _publisher: Publisher
    _run_id: str
    _key: bytes  # the run id's bytes: every event's Kafka key
    _max: int
    _encode: Callable[[EventFields], bytes]
    _redactor: Redactor | None
    _model_allow: frozenset[str]
    _ident: int
    _lock: threading.Lock
    _next_seq: int
    _done: int
    _next_emit: int
    _waiting: dict[int, EventFields]
    _started: bool
    _finished: bool
    _attrs: dict[int, dict[str, str]]
    _last_started: int  # crossings started when the last one completed
    _tick: asyncio.AbstractEventLoop | None  # a loop iteration with a completion in it

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
            self._last_started = self._next_seq
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
            if type(result) not in _PLAIN and inspect.isawaitable(result):
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
            if type(result) not in _PLAIN and inspect.isawaitable(result):
                result = await result
        except BaseException as exc:
            self._apart(op.seq)
            self._record(op, _NULL, self._abandoned(op, exc))
            raise
        finally:
            _CURRENT.reset(token)
        self._apart(op.seq)
        return self._respond(op, result)

    def _apart(self, seq: int) -> None:
        """Mark an async crossing that overlapped the previous completion yet completed in a
        later loop iteration (``APART_ATTRIBUTE``): live, whatever its task's completion let
        go had run before this result came. Replay needs it to tell two results that arrived
        together (one iteration: a framework sees both done at once) from two that did not.

        An iteration is open from a completion until a ``call_soon`` callback runs, which is
        in the next one. Opened only while other crossings are in flight: a sequential agent
        pays one check.
        """
        loop = _running_loop()
        if loop is None or self._tick is loop:
            return
        if seq < self._last_started:
            self._attrs.setdefault(seq, {})[APART_ATTRIBUTE] = "1"
        if self._next_seq > self._done + 1:
            self._tick = loop
            loop.call_soon(self._tick_over)

    def _tick_over(self) -> None:
        self._tick = None

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


def _with_site(site: str | None, attrs: dict[str, str] | None = None) -> dict[str, str]:
    """A crossing's attributes with its call site (``tracevault.callsite``), when known."""
    out = attrs if attrs is not None else {}
    if site is not None:
        out[SITE_ATTRIBUTE] = site
    identity = take_call_id()
    if identity is not None:
        out[CALL_ID_ATTRIBUTE] = identity
    return out


def _with_duration(attrs: dict[str, str] | None, duration: int) -> dict[str, str] | int:
    if not attrs:
        return duration  # encoded as {"duration_us": ...} off the agent's thread
    attrs["duration_us"] = str(duration)
    return attrs


_running_loop = asyncio.events._get_running_loop  # the C accessor: no error when none runs


def _now_us() -> int:
    return time.time_ns() // 1000


def _close(awaitable: Any) -> None:
    close = getattr(awaitable, "close", None)
    if callable(close):
        close()
