"""A verified run as OpenTelemetry GenAI spans: OTLP/HTTP protobuf to a collector, or OTLP JSON.

The span tree follows the OpenTelemetry GenAI semantic conventions (development status, as
of semconv 1.37+):

- one root ``invoke_agent {agent}`` span per run (RUN_STARTED to RUN_FINISHED);
- ``chat {model}`` (CLIENT) per MODEL_CALL with ``gen_ai.provider.name``,
  ``gen_ai.request.model``, ``gen_ai.response.model`` (the exact build recorded),
  ``gen_ai.request.seed``, ``gen_ai.usage.input_tokens``/``output_tokens``,
  ``gen_ai.response.id``, ``gen_ai.response.finish_reasons``;
- ``execute_tool {tool}`` per TOOL_CALL with ``gen_ai.tool.name`` and ``gen_ai.tool.type``;
- CLOCK, RANDOM, EXTERNAL_STATE, DECISION and GAP as ``tracevault.<kind> {name}`` spans whose
  attributes are under ``tracevault.*`` (no GenAI convention covers them);
- on every span ``tracevault.run_id``, ``tracevault.seq`` and ``tracevault.chain.hash`` (the
  sealed chain hash of that event, hex), so a span can be checked against the record.

A nested crossing (``parent_seq``) is a child of its parent's span.

Sub-agents make one trace, as the GenAI agent-span conventions nest an agent invoked as a tool:
a child run's root ``invoke_agent`` span is a child of the parent's ``execute_tool
subagent:{name}`` span and shares the parent's trace id (the top run's, when the parent is in
the same export; else the parent run's). Both spans also carry a span link to the other, for
backends that show links rather than nesting. ``replay export --otel`` adds each exported run's
sub-agent runs, so exporting the top run exports the whole tree (docs/otel.md).

The root span also carries the OpenInference ``openinference.span.kind`` (``AGENT``) and, with
``content=True``, ``input.value``/``output.value`` with their ``*.mime_type`` (what Phoenix
shows as a trace's input and output) next to ``tracevault.run.input``/``output``. Message
content (inputs,
outputs, tool arguments and results, state values, decision choices) is exported only with
``content=True`` (``gen_ai.input.messages``, ``gen_ai.output.messages``,
``gen_ai.tool.call.arguments``, ``gen_ai.tool.call.result``, ``tracevault.*.value``): traces
often go to systems with weaker access control than the archive.

Trace and span ids are derived from the run id and seq (SHA-256), so exporting a run twice
gives the same ids. Needs the ``otel`` extra (``opentelemetry-proto``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tracevault.errors import missing_extra

try:
    from google.protobuf.json_format import MessageToDict
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
    from opentelemetry.proto.resource.v1.resource_pb2 import Resource
    from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, Status
except ImportError as exc:  # the extra is not installed: say which one
    raise missing_extra("otel", exc) from exc

from tracevault import __version__
from tracevault.errors import ConfigError, ServiceUnavailableError
from tracevault.links import PARENT_RUN, PARENT_SEQ, SUBAGENT_RUN, link_of
from tracevault.schemas import EventKind, TraceEvent

__all__ = ["ExportedRun", "child_runs", "otlp_json", "otlp_request", "send_otlp"]

log = logging.getLogger(__name__)

_TRACES_PATH = "/v1/traces"
_SCOPE = "tracevault"
_INSTANT_NS = 1_000  # a crossing without a duration (clock, random, decision) lasts 1 µs


@dataclass(frozen=True, slots=True)
class ExportedRun:
    """A run that verified: its events in seq order and each seq's sealed chain hash."""

    run_id: str
    events: Sequence[TraceEvent]
    hashes: Mapping[int, bytes]
    head: str
    status: str


# -- attribute values ------------------------------------------------------------------------
def _value(v: Any) -> AnyValue:
    if isinstance(v, bool):
        return AnyValue(bool_value=v)
    if isinstance(v, int):
        return AnyValue(int_value=v)
    if isinstance(v, float):
        return AnyValue(double_value=v)
    if isinstance(v, list | tuple):
        out = AnyValue()
        out.array_value.values.extend(_value(x) for x in v)
        return out
    return AnyValue(string_value=str(v))


def _attrs(values: Mapping[str, Any]) -> list[KeyValue]:
    return [KeyValue(key=k, value=_value(v)) for k, v in values.items() if v is not None]


def _json_text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def _loads(data: bytes) -> Any:
    return json.loads(data) if data else None


def _span_id(run_id: str, seq: int | str) -> bytes:
    return hashlib.sha256(f"tracevault-span\0{run_id}\0{seq}".encode()).digest()[:8]


def _trace_id(run_id: str) -> bytes:
    return hashlib.sha256(f"tracevault-trace\0{run_id}".encode()).digest()[:16]


def _parent_of(run: ExportedRun) -> tuple[str, int] | None:
    """``(parent run, parent seq)`` when ``run`` is a sub-agent's run, from its RUN_STARTED."""
    return link_of(run.events[0].attributes, PARENT_RUN, PARENT_SEQ) if run.events else None


def child_runs(events: Iterable[TraceEvent]) -> list[str]:
    """The run ids of the sub-agent runs these events started, in seq order."""
    return [ev.attributes[SUBAGENT_RUN] for ev in events if SUBAGENT_RUN in ev.attributes]


def _trace_ids(runs: Sequence[ExportedRun]) -> dict[str, bytes]:
    """Each run's trace id: its top ancestor's among ``runs``, so a run tree is one trace."""
    by_id = {r.run_id: r for r in runs}
    out: dict[str, bytes] = {}

    def top(run_id: str, seen: frozenset[str]) -> str:
        run = by_id.get(run_id)
        link = _parent_of(run) if run is not None else None
        if link is None or link[0] in seen:  # a top run (or a cycle: never follow it)
            return run_id
        if link[0] not in by_id:  # the parent was not exported: its trace, as it would be
            return link[0]
        return top(link[0], seen | {run_id})

    for run in runs:
        out[run.run_id] = _trace_id(top(run.run_id, frozenset()))
    return out


def _io(value: Any) -> tuple[str, str]:
    """OpenInference ``*.value`` and ``*.mime_type``: text as itself, anything else as JSON."""
    if isinstance(value, str):
        return value, "text/plain"
    return _json_text(value), "application/json"


# -- what each kind of crossing says ---------------------------------------------------------
def _usage(response: Any) -> dict[str, Any]:
    usage = response.get("usage") if isinstance(response, dict) else None
    if not isinstance(usage, dict):
        return {}
    return {
        "gen_ai.usage.input_tokens": usage.get("input_tokens", usage.get("prompt_tokens")),
        "gen_ai.usage.output_tokens": usage.get("output_tokens", usage.get("completion_tokens")),
    }


def _finish_reasons(response: dict[str, Any]) -> list[str] | None:
    reasons = [c.get("finish_reason") for c in response.get("choices") or () if isinstance(c, dict)]
    if response.get("stop_reason"):
        reasons.append(response["stop_reason"])
    if response.get("status") and response.get("object") == "response":
        reasons.append(response["status"])
    out = [r for r in reasons if isinstance(r, str)]
    return out or None


def _asked_tools(response: dict[str, Any]) -> list[str] | None:
    names: list[str] = []
    for choice in response.get("choices") or ():
        for tc in ((choice or {}).get("message") or {}).get("tool_calls") or ():
            names.append((tc.get("function") or {}).get("name", ""))
    for block in response.get("content") or ():
        if isinstance(block, dict) and block.get("type") == "tool_use":
            names.append(block.get("name", ""))
    for item in response.get("output") or ():
        if isinstance(item, dict) and item.get("type") == "function_call":
            names.append(item.get("name", ""))
    for tc in response.get("tool_calls") or ():  # a stream's summary
        if isinstance(tc, dict):
            names.append(tc.get("name") or "")
    return names or None


def _output_messages(response: dict[str, Any]) -> Any:
    if "choices" in response:
        return [c.get("message") or c.get("delta") for c in response["choices"]]
    if "content" in response:
        return [{"role": response.get("role", "assistant"), "content": response["content"]}]
    if "output" in response:
        return response["output"]
    return response


def _chat(ev: TraceEvent, content: bool) -> tuple[str, int, dict[str, Any]]:
    request = _loads(ev.request)
    response = _loads(ev.response)
    adapter = isinstance(request, dict) and "provider" in request and "params" in request
    params = request["params"] if adapter else (request if isinstance(request, dict) else {})
    requested = params.get("model") if isinstance(params, dict) else None
    resp = response if isinstance(response, dict) else {}
    if adapter and isinstance(resp.get("response"), dict):
        resp = resp["response"]  # the provider's own response inside the adapter's record
    attrs: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": request["provider"] if adapter else None,
        "gen_ai.request.model": requested if isinstance(requested, str) else ev.model,
        "gen_ai.response.model": ev.model,
        "gen_ai.request.seed": ev.seed,
        "gen_ai.request.temperature": params.get("temperature"),
        "gen_ai.request.max_tokens": params.get("max_tokens", params.get("max_output_tokens")),
        "gen_ai.response.id": resp.get("id") if isinstance(resp.get("id"), str) else None,
        "gen_ai.response.finish_reasons": _finish_reasons(resp),
        "tracevault.model.tool_calls": _asked_tools(resp),
        "tracevault.api": request.get("api") if adapter else None,
        **_usage(resp),
    }
    if content:
        inputs = params.get("messages", params.get("input")) if adapter else request
        attrs["gen_ai.input.messages"] = _json_text(inputs)
        if adapter and params.get("system") is not None:
            attrs["gen_ai.system_instructions"] = _json_text(params["system"])
        attrs["gen_ai.output.messages"] = _json_text(_output_messages(resp) if resp else response)
    name = attrs["gen_ai.request.model"] or "model"
    return f"chat {name}", Span.SpanKind.SPAN_KIND_CLIENT, attrs


def _tool(ev: TraceEvent, content: bool) -> tuple[str, int, dict[str, Any]]:
    request = _loads(ev.request) or {}
    name = request.get("tool", "tool")
    attrs: dict[str, Any] = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": name,
        "gen_ai.tool.type": "function",
        "tracevault.idempotency_key": ev.idempotency_key,
    }
    if content:
        attrs["gen_ai.tool.call.arguments"] = _json_text(request.get("args"))
        attrs["gen_ai.tool.call.result"] = _json_text(_loads(ev.response))
    return f"execute_tool {name}", Span.SpanKind.SPAN_KIND_INTERNAL, attrs


def _own(ev: TraceEvent, content: bool) -> tuple[str, int, dict[str, Any]]:
    """CLOCK, RANDOM, EXTERNAL_STATE, DECISION, GAP: tracevault's own crossings."""
    request = _loads(ev.request) or {}
    response = _loads(ev.response)
    kind = {
        EventKind.CLOCK: "clock",
        EventKind.RANDOM: "random",
        EventKind.EXTERNAL_STATE: "state",
        EventKind.DECISION: "decision",
        EventKind.GAP: "gap",
    }[ev.kind]
    name = request.get("name") if isinstance(request, dict) else None
    attrs: dict[str, Any] = {f"tracevault.{kind}.name": name}
    if ev.kind is EventKind.CLOCK and isinstance(response, dict):
        attrs["tracevault.clock.time"] = response.get("time")
    elif ev.kind is EventKind.RANDOM:
        attrs["tracevault.random.seed"] = ev.seed
    elif ev.kind is EventKind.GAP:
        attrs["tracevault.gap.missing_from"] = request.get("missing_from")
        attrs["tracevault.gap.missing_to"] = request.get("missing_to")
    elif content and ev.kind is EventKind.EXTERNAL_STATE:
        attrs["tracevault.state.value"] = _json_text(response)
    elif content and ev.kind is EventKind.DECISION:
        attrs["tracevault.decision.choice"] = _json_text(request.get("choice"))
        attrs["tracevault.decision.options"] = _json_text(request.get("options"))
    return f"tracevault.{kind} {name or ''}".rstrip(), Span.SpanKind.SPAN_KIND_INTERNAL, attrs


_KINDS = {
    EventKind.MODEL_CALL: _chat,
    EventKind.TOOL_CALL: _tool,
    EventKind.CLOCK: _own,
    EventKind.RANDOM: _own,
    EventKind.EXTERNAL_STATE: _own,
    EventKind.DECISION: _own,
    EventKind.GAP: _own,
}


# -- one run ---------------------------------------------------------------------------------
def _end_ns(ev: TraceEvent) -> int:
    duration = ev.attributes.get("duration_us")
    micros = int(duration) if duration is not None and duration.isdigit() else 0
    return ev.at * 1000 + max(micros * 1000, _INSTANT_NS)


def _status(ev: TraceEvent) -> Status:
    if ev.error is None:
        return Status(code=Status.StatusCode.STATUS_CODE_UNSET)
    return Status(code=Status.StatusCode.STATUS_CODE_ERROR, message=ev.error.message)


def _run_spans(run: ExportedRun, content: bool, traces: Mapping[str, bytes]) -> ResourceSpans:
    """One resource per run: its root span (the run) and a span per event beneath it."""
    events = run.events
    if not events or events[0].kind is not EventKind.RUN_STARTED:
        raise ConfigError(f"run {run.run_id}: no RUN_STARTED at seq 0, nothing to export")
    trace_id = traces[run.run_id]
    spans = [_root_span(run, trace_id, content), *_event_spans(run, trace_id, content)]
    agent = events[0].agent
    resource = Resource(
        attributes=_attrs(
            {
                "service.name": agent.agent_id,
                "service.version": agent.agent_version,
                "host.name": agent.host,
                "tracevault.harness": agent.harness,
                "tracevault.sdk_version": agent.sdk_version,
            }
        )
    )
    scope = InstrumentationScope(name=_SCOPE, version=__version__)
    return ResourceSpans(resource=resource, scope_spans=[ScopeSpans(scope=scope, spans=spans)])


def _common(run: ExportedRun, ev: TraceEvent) -> dict[str, Any]:
    """The attributes every span of ``run`` carries: where its event sits in the chain."""
    chain = run.hashes.get(ev.seq)
    return {
        "tracevault.run_id": run.run_id,
        "tracevault.seq": ev.seq,
        "tracevault.kind": ev.kind.value,
        "tracevault.chain.hash": chain.hex() if chain is not None else None,
    }


def _root_span(run: ExportedRun, trace_id: bytes, content: bool) -> Span:
    """The run's ``invoke_agent`` span: its status, its failure as an exception event, its
    input and output with ``content``, and a link to the parent's span for a sub-agent."""
    events = run.events
    first, last = events[0], events[-1]
    agent = first.agent
    failure = next((ev for ev in events if ev.kind is EventKind.ERROR), None)
    finished = last if last.kind is EventKind.RUN_FINISHED else None
    root_attrs = {
        **_common(run, first),
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": agent.agent_id,
        "gen_ai.agent.id": agent.agent_id,
        "gen_ai.agent.version": agent.agent_version,
        "gen_ai.conversation.id": run.run_id,
        "tracevault.chain.head": run.head,
        "tracevault.run.status": run.status,
        "tracevault.run.last_seq": last.seq,
        "tracevault.run.finished": finished is not None,
        "error.type": failure.error.type if failure and failure.error else None,
        "openinference.span.kind": "AGENT",
    }
    parent = _parent_of(run)
    if parent is not None:
        root_attrs[PARENT_RUN], root_attrs[PARENT_SEQ] = parent
    if content:
        run_input = (_loads(first.request) or {}).get("input")
        root_attrs["tracevault.run.input"] = _json_text(run_input)
        root_attrs["input.value"], root_attrs["input.mime_type"] = _io(run_input)
        if finished is not None:
            output = (_loads(finished.response) or {}).get("output")
            root_attrs["tracevault.run.output"] = _json_text(output)
            root_attrs["output.value"], root_attrs["output.mime_type"] = _io(output)
    root = Span(
        trace_id=trace_id,
        span_id=_span_id(run.run_id, "run"),
        parent_span_id=_span_id(*parent) if parent is not None else b"",
        name=f"invoke_agent {agent.agent_id}",
        kind=Span.SpanKind.SPAN_KIND_INTERNAL,
        start_time_unix_nano=first.at * 1000,
        end_time_unix_nano=max(last.at * 1000 + _INSTANT_NS, first.at * 1000 + _INSTANT_NS),
        attributes=_attrs(root_attrs),
        status=_status(failure) if failure is not None else Status(),
    )
    if failure is not None and failure.error is not None:
        root.events.add(
            time_unix_nano=failure.at * 1000,
            name="exception",
            attributes=_attrs(
                {
                    "exception.type": failure.error.type,
                    "exception.message": failure.error.message,
                    "tracevault.seq": failure.seq,
                }
            ),
        )
    if parent is not None:  # the parent's execute_tool span, in the same trace
        root.links.add(
            trace_id=trace_id,
            span_id=_span_id(*parent),
            attributes=_attrs({"tracevault.link": "parent"}),
        )
    return root


def _event_spans(run: ExportedRun, trace_id: bytes, content: bool) -> list[Span]:
    """A span per event of ``run`` that has one (``_KINDS``), beneath its parent event's span
    or the root, with a link to a sub-agent's root span."""
    root_id = _span_id(run.run_id, "run")
    by_seq = {ev.seq: _span_id(run.run_id, ev.seq) for ev in run.events}
    spans: list[Span] = []
    for ev in run.events:
        make = _KINDS.get(ev.kind)
        if make is None:  # RUN_STARTED, RUN_FINISHED, ERROR: on the root span
            continue
        name, kind, attrs = make(ev, content)
        if ev.error is not None:
            attrs["error.type"] = ev.error.type
        up = by_seq.get(ev.parent_seq, root_id) if ev.parent_seq is not None else root_id
        child = ev.attributes.get(SUBAGENT_RUN)
        if child is not None:
            attrs[SUBAGENT_RUN] = child
        span = Span(
            trace_id=trace_id,
            span_id=by_seq[ev.seq],
            parent_span_id=up,
            name=name,
            kind=kind,  # type: ignore[arg-type]
            start_time_unix_nano=ev.at * 1000,
            end_time_unix_nano=_end_ns(ev),
            attributes=_attrs({**_common(run, ev), **attrs}),
            status=_status(ev),
        )
        if child is not None:  # the child run's root span: same trace (see the module doc)
            span.links.add(
                trace_id=trace_id,
                span_id=_span_id(child, "run"),
                attributes=_attrs({"tracevault.link": "subagent"}),
            )
        spans.append(span)
    return spans


def otlp_request(
    runs: Iterable[ExportedRun], *, content: bool = False
) -> ExportTraceServiceRequest:
    """One OTLP export request holding every run (one resource per run, one trace per tree)."""
    runs = list(runs)
    traces = _trace_ids(runs)
    return ExportTraceServiceRequest(resource_spans=[_run_spans(r, content, traces) for r in runs])


def otlp_json(request: ExportTraceServiceRequest) -> dict[str, Any]:
    """The OTLP/JSON form: protobuf's JSON mapping, with trace and span ids in hex (OTLP)."""
    data: dict[str, Any] = MessageToDict(request, use_integers_for_enums=True)
    for rs in data.get("resourceSpans", ()):
        for ss in rs.get("scopeSpans", ()):
            for span in ss.get("spans", ()):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = _b64_to_hex(span[key])
                for link in span.get("links", ()):
                    for key in ("traceId", "spanId"):
                        if key in link:
                            link[key] = _b64_to_hex(link[key])
    return data


def _b64_to_hex(value: str) -> str:
    import base64  # noqa: PLC0415 - only the JSON form needs it

    return base64.b64decode(value).hex()


def _traces_url(endpoint: str) -> str:
    parsed = urllib.parse.urlsplit(endpoint)
    if parsed.scheme not in {"http", "https"} or not parsed.netloc:
        raise ConfigError(f"--endpoint must be an http(s) URL, got {endpoint!r}")
    if parsed.path.rstrip("/").endswith(_TRACES_PATH):
        return endpoint
    return endpoint.rstrip("/") + _TRACES_PATH


def send_otlp(request: ExportTraceServiceRequest, endpoint: str, *, timeout: float = 30.0) -> str:
    """POST ``request`` as OTLP/HTTP protobuf; returns the URL it went to.

    ``endpoint`` is a collector's base URL (``http://localhost:4318``, ``/v1/traces`` is added)
    or the full traces URL. A refused request raises, naming the URL and the status.
    """
    url = _traces_url(endpoint)
    body = request.SerializeToString()
    req = urllib.request.Request(  # noqa: S310 - the scheme is checked to be http(s) above
        url, data=body, method="POST", headers={"Content-Type": "application/x-protobuf"}
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310
            resp.read()
    except urllib.error.HTTPError as exc:
        detail = exc.read()[:500].decode("utf-8", "replace")
        raise ServiceUnavailableError(
            f"the OTLP endpoint {url} refused the export: HTTP {exc.code} {detail}"
        ) from exc
    except (urllib.error.URLError, OSError) as exc:
        raise ServiceUnavailableError(f"cannot reach the OTLP endpoint {url}: {exc}") from exc
    log.info("exported %s spans to %s", sum(1 for _ in _spans(request)), url)
    return url


def _spans(request: ExportTraceServiceRequest) -> Iterable[Span]:
    for rs in request.resource_spans:
        for ss in rs.scope_spans:
            yield from ss.spans
