"""``tracevault replay export RUN... --otel``: verified runs recorded through the real pipeline,
sent as OTLP/HTTP to a local receiver that decodes the real protobuf request, or written as
OTLP JSON; the span tree and the GenAI attributes are checked."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from tests.integrations.otlp import otlp_receiver
from tests.integrations.pipeline import Pipeline, Recorded
from tests.integrations.test_openai import chat_agent, get_weather
from tests.replayer.pipeline import wait_sealed
from tracevault.cli import tracevault
from tracevault.demo.provider import provider_server
from tracevault.edges import Edges
from tracevault.replayer import load_run


def otel_agent(task: dict[str, Any], edges: Edges) -> str:
    edges.clock()
    edges.random("jitter", seed=7)
    edges.state("inventory", lambda: {"umbrellas": 3})
    edges.decision("route", "weather", options=["weather", "smalltalk"])
    return chat_agent(task, edges)


def _value(v: AnyValue) -> Any:
    which = v.WhichOneof("value")
    if which == "array_value":
        return [_value(x) for x in v.array_value.values]
    return getattr(v, which) if which else None


def attrs(span: Span) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in span.attributes}


def _record_two(pipeline: Pipeline) -> list[Recorded]:
    with provider_server() as server:
        task = {"url": server.url + "/v1", "question": "weather in Paris?"}
        return [
            pipeline.record(otel_agent, task, tools={"get_weather": get_weather}) for _ in range(2)
        ]


def _cli(pipeline: Pipeline, *args: str) -> Any:
    s = pipeline.settings
    argv = ["--bootstrap-servers", s.bootstrap_servers, "--prefix", s.topic_prefix, "replay"]
    return CliRunner().invoke(tracevault, [*argv, "export", *args, "--from", "topic"])


def test_runs_are_sent_as_genai_spans_to_an_otlp_receiver(pipeline: Pipeline) -> None:
    runs = _record_two(pipeline)
    with otlp_receiver() as receiver:
        res = _cli(pipeline, runs[0].run_id, runs[1].run_id, "--otel", "--endpoint", receiver.url)
        assert res.exit_code == 0, res.output
    assert receiver.paths == ["/v1/traces"]
    assert receiver.content_types == ["application/x-protobuf"]
    (request,) = receiver.requests
    assert len(request.resource_spans) == 2  # the batch: one resource (one trace) per run

    for run, rs in zip(runs, request.resource_spans, strict=True):
        resource = {kv.key: _value(kv.value) for kv in rs.resource.attributes}
        assert resource["service.name"] == "sdk-agent"
        spans = list(rs.scope_spans[0].spans)
        assert rs.scope_spans[0].scope.name == "tracevault"
        root = spans[0]
        assert root.name == "invoke_agent sdk-agent"
        assert not root.parent_span_id
        ra = attrs(root)
        assert ra["gen_ai.operation.name"] == "invoke_agent"
        assert ra["gen_ai.agent.name"] == "sdk-agent" and ra["gen_ai.agent.version"] == "1.0.0"
        assert ra["tracevault.run_id"] == run.run_id and ra["tracevault.run.finished"] is True
        assert len({s.trace_id for s in spans}) == 1
        assert all(s.parent_span_id == root.span_id for s in spans[1:])

        # seq and chain hash on every span, equal to the sealed record's.
        sealed = {
            r.seq: r.hash.hex()
            for r in load_run(pipeline.settings, run.run_id, source="topic").records
        }
        for span in spans:
            a = attrs(span)
            assert a["tracevault.chain.hash"] == sealed[a["tracevault.seq"]], span.name

        names = [s.name for s in spans[1:]]
        assert names == [
            "tracevault.clock now",
            "tracevault.random jitter",
            "tracevault.state inventory",
            "tracevault.decision route",
            "chat gpt-4o-mini",
            "execute_tool get_weather",
            "chat gpt-4o-mini",
        ]
        by_name = {s.name: attrs(s) for s in spans}
        chat = next(s for s in spans if s.name.startswith("chat"))
        assert chat.kind == Span.SpanKind.SPAN_KIND_CLIENT
        ca = attrs(chat)
        assert ca["gen_ai.operation.name"] == "chat"
        assert ca["gen_ai.provider.name"] == "openai"
        assert ca["gen_ai.request.model"] == "gpt-4o-mini"
        assert ca["gen_ai.response.model"] == "gpt-4o-mini-2024-07-18"
        assert ca["gen_ai.request.seed"] == 42
        assert ca["gen_ai.usage.input_tokens"] == 7 and ca["gen_ai.usage.output_tokens"] == 2
        assert ca["gen_ai.response.finish_reasons"] == ["tool_calls"]
        assert ca["tracevault.model.tool_calls"] == ["get_weather"]
        assert chat.end_time_unix_nano > chat.start_time_unix_nano
        tool = by_name["execute_tool get_weather"]
        assert tool["gen_ai.operation.name"] == "execute_tool"
        assert tool["gen_ai.tool.name"] == "get_weather"
        assert by_name["tracevault.random jitter"]["tracevault.random.seed"] == 7
        assert isinstance(by_name["tracevault.clock now"]["tracevault.clock.time"], float)
        # No content unless asked for.
        for a in by_name.values():
            assert not any(
                k in a
                for k in (
                    "gen_ai.input.messages",
                    "gen_ai.output.messages",
                    "gen_ai.tool.call.arguments",
                    "tracevault.state.value",
                    "tracevault.decision.choice",
                )
            )


def test_otlp_json_file_with_content(pipeline: Pipeline, tmp_path: Path) -> None:
    (run, _) = _record_two(pipeline)
    out = tmp_path / "run.json"
    res = _cli(pipeline, run.run_id, "--otel", "-o", str(out), "--content", "--json")
    assert res.exit_code == 0, res.output
    summary = json.loads(res.output)
    assert summary["spans"] == 8 and summary["content"] is True
    data = json.loads(out.read_text())
    spans = data["resourceSpans"][0]["scopeSpans"][0]["spans"]
    assert len(spans[0]["traceId"]) == 32 and len(spans[1]["parentSpanId"]) == 16  # hex ids
    assert {s["kind"] for s in spans} == {1, 3}  # OTLP JSON: enums as integers (internal, client)
    by_name = {s["name"]: {a["key"]: a["value"] for a in s["attributes"]} for s in spans}
    chat = by_name["chat gpt-4o-mini"]
    inputs = json.loads(chat["gen_ai.input.messages"]["stringValue"])
    assert inputs[0] == {"content": "weather in Paris?", "role": "user"}
    tool = by_name["execute_tool get_weather"]
    assert json.loads(tool["gen_ai.tool.call.arguments"]["stringValue"]) == {"city": "Paris"}
    state = by_name["tracevault.state inventory"]
    assert json.loads(state["tracevault.state.value"]["stringValue"]) == {"umbrellas": 3}


def test_an_unreachable_endpoint_fails_with_exit_3_naming_the_url(pipeline: Pipeline) -> None:
    (run, _) = _record_two(pipeline)
    with otlp_receiver() as receiver:
        url = receiver.url
    res = _cli(pipeline, run.run_id, "--otel", "--endpoint", url)
    assert res.exit_code == 3, res.output
    assert f"{url}/v1/traces" in res.output


def test_otel_options_need_a_target(pipeline: Pipeline) -> None:
    res = _cli(pipeline, "any-run", "--otel")
    assert res.exit_code == 2 and "--endpoint" in res.output


def test_a_batch_of_archived_runs_by_day(pipeline: Pipeline, tmp_path: Path) -> None:
    from datetime import UTC, datetime

    from tracevault.services.archiver import Archiver

    runs = _record_two(pipeline)
    Archiver(pipeline.settings).run(until_idle=1.0)
    out = tmp_path / "day.json"
    s = pipeline.settings
    today = datetime.now(UTC).date().isoformat()
    res = CliRunner().invoke(
        tracevault,
        [
            "--bootstrap-servers",
            s.bootstrap_servers,
            "--prefix",
            s.topic_prefix,
            "replay",
            "--archive-url",
            s.archive_url,
            "export",
            "--otel",
            "--since",
            today,
            "-o",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    exported = {
        a["value"]["stringValue"]
        for rs in json.loads(out.read_text())["resourceSpans"]
        for a in rs["scopeSpans"][0]["spans"][0]["attributes"]
        if a["key"] == "tracevault.run_id"
    }
    assert {r.run_id for r in runs} <= exported


def _researcher(question: Any, edges: Edges) -> dict[str, Any]:
    edges.clock()
    return {"answer": f"looked up {question}", "tool": edges.tool("get_weather", city="Paris")}


def _lead(task: dict[str, Any], edges: Edges) -> str:
    found = edges.subagent("researcher", _researcher, task["question"])
    edges.decision("done", "yes")
    return f"lead says: {found['answer']}"


def _spans_of(request: Any) -> dict[str, list[Span]]:
    out: dict[str, list[Span]] = {}
    for rs in request.resource_spans:
        spans = list(rs.scope_spans[0].spans)
        out[attrs(spans[0])["tracevault.run_id"]] = spans
    return out


def test_a_sub_agent_run_is_one_trace_under_the_parents_tool_span(pipeline: Pipeline) -> None:
    parent = pipeline.record(
        _lead, {"question": "rain?"}, tools={"get_weather": lambda city: {"city": city}}
    )
    (call,) = [ev for ev in parent.events if ev.attributes.get("tracevault.subagent.run")]
    child_id = call.attributes["tracevault.subagent.run"]
    wait_sealed(pipeline.settings, child_id)
    with otlp_receiver() as receiver:
        # Only the parent is named: its sub-agent run comes with it.
        res = _cli(pipeline, parent.run_id, "--otel", "--endpoint", receiver.url, "--content")
        assert res.exit_code == 0, res.output
    (request,) = receiver.requests
    by_run = _spans_of(request)
    assert set(by_run) == {parent.run_id, child_id}
    top, sub = by_run[parent.run_id], by_run[child_id]
    assert {s.trace_id for s in top + sub} == {top[0].trace_id}  # one trace
    tool_span = next(s for s in top if s.name == "execute_tool subagent:researcher")
    assert attrs(tool_span)["tracevault.seq"] == call.seq
    child_root = sub[0]
    assert child_root.name == "invoke_agent researcher"
    assert child_root.parent_span_id == tool_span.span_id  # nested under the tool span
    assert all(s.parent_span_id == child_root.span_id for s in sub[1:])
    assert [(lk.trace_id, lk.span_id) for lk in tool_span.links] == [
        (child_root.trace_id, child_root.span_id)
    ]
    assert [(lk.trace_id, lk.span_id) for lk in child_root.links] == [
        (tool_span.trace_id, tool_span.span_id)
    ]
    ca = attrs(child_root)
    assert ca["tracevault.parent.run"] == parent.run_id
    assert ca["tracevault.parent.seq"] == call.seq
    assert attrs(tool_span)["tracevault.subagent.run"] == child_id


def test_root_spans_carry_openinference_input_and_output_with_content(pipeline: Pipeline) -> None:
    (run, _) = _record_two(pipeline)
    with otlp_receiver() as receiver:
        res = _cli(pipeline, run.run_id, "--otel", "--endpoint", receiver.url, "--content")
        assert res.exit_code == 0, res.output
        plain = _cli(pipeline, run.run_id, "--otel", "--endpoint", receiver.url)
        assert plain.exit_code == 0, plain.output
    with_content, without = (_spans_of(r)[run.run_id][0] for r in receiver.requests)
    ra = attrs(with_content)
    assert ra["openinference.span.kind"] == "AGENT"
    assert ra["input.mime_type"] == "application/json"
    assert json.loads(ra["input.value"]) == {"question": "weather in Paris?", "url": ANY_URL}
    assert ra["input.value"] == ra["tracevault.run.input"]
    assert ra["output.mime_type"] == "text/plain"
    assert ra["output.value"] == run.output == json.loads(ra["tracevault.run.output"])
    wa = attrs(without)
    assert wa["openinference.span.kind"] == "AGENT"
    for key in ("input.value", "output.value", "input.mime_type", "tracevault.run.input"):
        assert key not in wa, key


class _AnyUrl(str):
    def __eq__(self, other: object) -> bool:
        return isinstance(other, str) and other.startswith("http://127.0.0.1:")

    __hash__ = str.__hash__


ANY_URL = _AnyUrl()
