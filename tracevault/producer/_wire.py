"""A direct Avro writer for TraceEvent v2, for the agent's hot path.

fastavro's generic ``schemaless_writer`` costs ~16 µs per 1.5 KB event; the issue's budget
for the whole recorded call is 25 µs. The TraceEvent layout is fixed per published version,
so this module writes the same single-object bytes directly (a few µs): the per-run prefix
(header, run id) and the agent record are encoded once per Recorder.

Safety: the encoder is used only when the current TraceEvent schema is the exact version it
was written for (checked by fingerprint); otherwise it falls back to
``tracevault.schemas.encode_event``. ``tests/producer/test_wire.py`` proves byte equality
with fastavro for every field combination.

Where the C extension ``_cwire`` is built (and ``TRACEVAULT_NO_C`` is unset), ``encode_fields``
is that C: 0.3-0.5 µs on the Publisher's thread against 3.4-4.4 µs for the Python below, per
event with two 1.5 KB payloads (docs/design.md, "The Recorder's encoder").
``encode_fields_python`` stays the reference it is pinned to (``tests/producer/test_cwire.py``)
and runs for whatever the C does not write exactly.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping

from tracevault import native
from tracevault.schemas import (
    MAGIC,
    AgentInfo,
    ErrorInfo,
    EventKind,
    Interleave,
    TraceEvent,
    avro_long,
    default_schemas,
    encode_event,
    read_long,
)

__all__ = ["EventEncoder", "EventFields", "avro_long", "read_run_seq"]

#: seq, kind, at, request, response, model, seed, error, idempotency_key, parent_seq,
#: attributes or just the call's duration in µs, and interleave: one event as the agent thread
#: hands it over (a tuple is the cheapest record to build).
EventFields = tuple[
    int,
    EventKind,
    int,
    bytes,
    bytes,
    "str | None",
    "int | None",
    "ErrorInfo | None",
    "str | None",
    "int | None",
    "int | Mapping[str, str] | None",
    "tuple[int | None, int, int] | None",
]

_KINDS = [
    "RUN_STARTED",
    "MODEL_CALL",
    "TOOL_CALL",
    "DECISION",
    "CLOCK",
    "RANDOM",
    "EXTERNAL_STATE",
    "ERROR",
    "RUN_FINISHED",
    "GAP",
]


def read_run_seq(value: bytes) -> tuple[str, int]:
    """The run id and seq at the front of an encoded TraceEvent (no full decode)."""
    n, pos = read_long(value, 10)
    run_id = value[pos : pos + n].decode("utf-8")
    seq, _ = read_long(value, pos + n)
    return run_id, seq


def _string(s: str) -> bytes:
    b = s.encode("utf-8")
    return avro_long(len(b)) + b


_KIND_BYTES = {EventKind(k): avro_long(i) for i, k in enumerate(_KINDS)}
_KIND_ORDER = tuple(EventKind(k) for k in _KINDS)  # the C finds a kind's index by identity
_cwire = native.load("tracevault.producer._cwire")
_NULL = b"\x00"  # union branch 0 = null
_SOME = b"\x02"  # union branch 1
_EMPTY_MAP = b"\x00"


def _expected_layout_fingerprint() -> bytes:
    """Fingerprint of the v2 schema this writer mirrors (the published file, never edited)."""
    return default_schemas().get("TraceEvent", 2).fingerprint


class EventEncoder:
    """Encodes the events of one run: ``encode(...)`` returns the Kafka message value."""

    __slots__ = ("_agent", "_agent_bytes", "_fast", "_prefix", "encode_fields", "run_id")

    #: ``encode`` from one tuple, for deferred encoding off the agent thread: the C
    #: (``_cwire.encode``, bound once here, no Python frame per event) on the fast path where
    #: it is built, else ``encode_fields_python``; the same bytes either way.
    encode_fields: Callable[[EventFields], bytes]

    def __init__(self, run_id: str, agent: AgentInfo) -> None:
        current = default_schemas().get("TraceEvent")
        self._fast = current.fingerprint == _expected_layout_fingerprint()
        self.run_id = run_id
        self._agent = agent
        self._prefix = MAGIC + current.fingerprint + _string(run_id)
        self._agent_bytes = b"".join(
            _string(s)
            for s in (
                agent.agent_id,
                agent.agent_version,
                agent.host,
                agent.harness,
                agent.sdk_version,
            )
        )
        if self._fast and _cwire is not None:
            layout = (_KIND_ORDER, ErrorInfo, self.encode_fields_python)
            self.encode_fields = functools.partial(
                _cwire.encode, self._prefix, self._agent_bytes, layout
            )
        else:
            self.encode_fields = self.encode_fields_python

    def encode_fields_python(self, fields: EventFields) -> bytes:
        """``encode`` from one tuple: the reference the C is pinned to."""
        seq, kind, at, request, response, model, seed, error, key, parent, extra, il = fields
        return self.encode(
            seq,
            kind,
            at,
            request,
            response,
            model=model,
            seed=seed,
            error=error,
            idempotency_key=key,
            parent_seq=parent,
            attributes={"duration_us": str(extra)} if isinstance(extra, int) else extra,
            interleave=None if il is None else Interleave(*il),
        )

    def encode(
        self,
        seq: int,
        kind: EventKind,
        at: int,
        request: bytes,
        response: bytes,
        *,
        model: str | None = None,
        seed: int | None = None,
        error: ErrorInfo | None = None,
        idempotency_key: str | None = None,
        parent_seq: int | None = None,
        attributes: Mapping[str, str] | None = None,
        interleave: Interleave | None = None,
    ) -> bytes:
        if not self._fast:
            return encode_event(
                TraceEvent(
                    run_id=self.run_id,
                    seq=seq,
                    kind=kind,
                    at=at,
                    agent=self._agent,
                    request=request,
                    response=response,
                    model=model,
                    seed=seed,
                    error=error,
                    idempotency_key=idempotency_key,
                    parent_seq=parent_seq,
                    attributes=dict(attributes or {}),
                    interleave=interleave,
                )
            )
        parts = [
            self._prefix,
            avro_long(seq),
            _KIND_BYTES[kind],
            avro_long(at),
            self._agent_bytes,
            _NULL if model is None else _SOME + _string(model),
            _NULL if seed is None else _SOME + avro_long(seed),
            avro_long(len(request)),
            request,
            avro_long(len(response)),
            response,
        ]
        if error is None:
            parts.append(_NULL)
        else:
            parts += (_SOME, _string(error.type), _string(error.message))
        parts.append(_NULL if idempotency_key is None else _SOME + _string(idempotency_key))
        parts.append(_NULL if parent_seq is None else _SOME + avro_long(parent_seq))
        if attributes:
            parts.append(avro_long(len(attributes)))
            for k, v in attributes.items():
                parts += (_string(k), _string(v))
        parts.append(_EMPTY_MAP)
        if interleave is None:
            parts.append(_NULL)
        else:
            prev = interleave.branch_prev
            parts += (
                _SOME,
                _NULL if prev is None else _SOME + avro_long(prev),
                avro_long(interleave.started_at_done),
                avro_long(interleave.done_order),
            )
        return b"".join(parts)
