"""Bad input fails in the agent, before anything is published, naming the offending field."""

from __future__ import annotations

import datetime
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.producer.conftest import read_partition
from tracevault.config import Settings
from tracevault.edges import JSON
from tracevault.errors import ConfigError, PayloadError
from tracevault.producer import Publisher, Recorder

MODEL = "gpt-4o-2024-08-06"


@pytest.fixture
def publisher(settings_factory: Callable[..., Settings]) -> Iterator[Publisher]:
    # Refused input never reaches the publisher (the assertions below count what was
    # published); what a test does publish goes to a real broker and its own topics, so
    # close() proves it was delivered, wherever CI's broker runs.
    pub = Publisher(settings_factory(partitions=1, max_payload_bytes=1000))
    yield pub
    assert pub.close(timeout=5).ok


class Calls:
    def __init__(self) -> None:
        self.model = 0
        self.tool = 0

    def call_model(self, request: JSON, *, model: str, seed: int | None) -> JSON:
        self.model += 1
        return request.get("reply", "ok")

    def echo(self, args: JSON) -> JSON:
        self.tool += 1
        return args.get("reply", "ok")


def started(publisher: Publisher, calls: Calls) -> Recorder:
    rec = Recorder(
        publisher=publisher, agent_id="a", agent_version="1", model=calls.call_model,
        tools={"echo": calls.echo}, input=None,
    )  # fmt: skip
    # Enter without publishing RUN_STARTED: these tests look only at the crossing under test.
    rec._started = True
    return rec


def refused(exc: pytest.ExceptionInfo[PayloadError], path: str) -> None:
    assert exc.value.path == path
    assert path in str(exc.value)


@pytest.mark.parametrize(
    ("request_", "path"),
    [
        ({"messages": [{"role": "user", "content": object()}]}, "$.request.messages[0].content"),
        ({"messages": [{"content": datetime.date(2026, 1, 1)}]}, "$.request.messages[0].content"),
        ({"temperature": float("nan")}, "$.request.temperature"),
        ({"stop": {1: "x", "b": 2}}, "$.request.stop"),
        ({"big": "x" * 2000}, "$.request"),
    ],
)
def test_bad_model_request_names_the_field_and_calls_nothing(
    publisher: Publisher, request_: Any, path: str
) -> None:
    calls = Calls()
    rec = started(publisher, calls)
    with pytest.raises(PayloadError) as exc:
        rec.model(request_, model=MODEL)
    refused(exc, path)
    assert calls.model == 0
    assert publisher.stats().published == 0
    assert rec._next_seq == 0  # no seq taken: the run stays contiguous


@pytest.mark.parametrize(
    ("model", "path_word"),
    [("", "exact model build"), ("gpt-4o-latest", "alias"), ("latest", "alias"),
     (None, "exact model build"), (" gpt-4o ", "white space"),
     ("gpt-4o-2024-08-06\udc80", "UTF-8")],
)  # fmt: skip
def test_invalid_model_id_is_refused(publisher: Publisher, model: Any, path_word: str) -> None:
    calls = Calls()
    rec = started(publisher, calls)
    with pytest.raises(PayloadError, match=path_word) as exc:
        rec.model({"q": 1}, model=model)
    refused(exc, "$.model")
    assert calls.model == 0 and publisher.stats().published == 0


@pytest.mark.parametrize("seed", [True, 1.5, 2**63, "7"])
def test_bad_seed_is_refused(publisher: Publisher, seed: Any) -> None:
    rec = started(publisher, Calls())
    with pytest.raises(PayloadError) as exc:
        rec.model({"q": 1}, model=MODEL, seed=seed)
    refused(exc, "$.seed")
    with pytest.raises(PayloadError) as exc:
        rec.random("rng", seed=seed)
    refused(exc, "$.seed")
    assert publisher.stats().published == 0


@pytest.mark.parametrize(
    ("args", "path"),
    [({"when": datetime.datetime(2026, 1, 1)}, "$.request.args.when"),
     ({"ids": [1, 2, {3}]}, "$.request.args.ids[2]"),
     ({"blob": "y" * 5000}, "$.request")],
)  # fmt: skip
def test_bad_tool_args_name_the_field(publisher: Publisher, args: Any, path: str) -> None:
    calls = Calls()
    rec = started(publisher, calls)
    with pytest.raises(PayloadError) as exc:
        rec.tool("echo", args)
    refused(exc, path)
    assert calls.tool == 0 and publisher.stats().published == 0


def test_unknown_tool_and_bad_names_are_refused(publisher: Publisher) -> None:
    rec = started(publisher, Calls())
    with pytest.raises(PayloadError, match="known: echo") as exc:
        rec.tool("nope", {})
    refused(exc, "$.request.tool")
    with pytest.raises(PayloadError) as exc:
        rec.tool(None, {})  # type: ignore[arg-type]
    refused(exc, "$.request.tool")
    with pytest.raises(PayloadError) as exc:
        rec.state("", read=lambda: 1)
    refused(exc, "$.request.name")
    with pytest.raises(PayloadError) as exc:
        rec.decision("route", {"at": datetime.time(1)})
    refused(exc, "$.request.choice.at")
    assert publisher.stats().published == 0


@pytest.mark.parametrize(
    ("reply", "path"),
    [({"a": [object()]}, "$.response.a[0]"), ("z" * 5000, "$.response")],
)
def test_bad_response_names_the_field_and_the_call_is_recorded_as_refused(
    settings_factory: Callable[..., Settings], reply: Any, path: str
) -> None:
    """The callee already ran, so its crossing is recorded, with the refusal as its error."""
    settings = settings_factory(partitions=1, max_payload_bytes=1000)
    with Publisher(settings) as publisher:
        rec = Recorder(
            publisher=publisher, agent_id="a", agent_version="1",
            model=lambda request, *, model, seed: reply, tools={"give": lambda args: reply},
        )  # fmt: skip

        def agent(task: JSON, edges: Any) -> JSON:
            with pytest.raises(PayloadError) as exc:
                edges.model({"q": 1}, model=MODEL)
            refused(exc, path)
            with pytest.raises(PayloadError) as exc:
                edges.tool("give", {})
            refused(exc, path)
            return "handled"

        rec.run(agent, None)
        assert publisher.flush(30)
    evs = [ev for _, ev in read_partition(settings, 0, 4)]
    assert [e.seq for e in evs] == [0, 1, 2, 3]
    for ev in evs[1:3]:
        assert ev.error is not None and ev.error.type == "tracevault.errors.PayloadError"
        assert path in ev.error.message and ev.response == b"null"


def test_unrecordable_input_and_output_of_a_run(publisher: Publisher) -> None:
    def agent(task: JSON, edges: Any) -> JSON:
        return {"when": datetime.date(2026, 1, 1)}

    rec = Recorder(publisher=publisher, agent_id="a", agent_version="1")
    with pytest.raises(PayloadError) as exc:
        rec.run(agent, {"file": open})
    refused(exc, "$.request.input.file")
    assert publisher.stats().published == 0
    with (
        pytest.raises(PayloadError) as exc,
        Recorder(publisher=publisher, agent_id="a", agent_version="1", input=1) as edges,
    ):
        edges.finish({"when": datetime.date(2026, 1, 1)})
    refused(exc, "$.response.output.when")


def test_configuration_mistakes_are_config_errors(publisher: Publisher) -> None:
    with pytest.raises(ConfigError, match="agent_id"):
        Recorder(publisher=publisher, agent_id="", agent_version="1")
    with pytest.raises(ConfigError, match="attributes"):
        Recorder(publisher=publisher, agent_id="a", agent_version="1", attributes={"a": 1})  # type: ignore[dict-item]
    with (
        pytest.raises(ConfigError, match="input"),
        Recorder(publisher=publisher, agent_id="a", agent_version="1"),
    ):
        pass
    rec = started(publisher, Calls())
    with pytest.raises(ConfigError, match="read="):
        rec.state("price")

    async def async_tool(args: JSON) -> JSON:
        return 1

    rec2 = Recorder(
        publisher=publisher, agent_id="a", agent_version="1", tools={"t": async_tool}, input=1
    )
    rec2._started = True
    with pytest.raises(ConfigError, match="atool"):
        rec2.tool("t", {})


def _cycle() -> dict[str, Any]:
    loop: dict[str, Any] = {"name": "loop"}
    loop["self"] = {"back": loop}
    return {"graph": loop}


def _deep(levels: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(levels):
        value = [value]
    return value


class Opaque:
    pass


@pytest.mark.parametrize(
    ("args", "path", "cause"),
    [
        ({"name": "na\udcffme"}, "$.request.args.name", "has a lone surrogate \\udcff at index 2"),
        ({"na\udcffme": 1}, '$.request.args["na\\udcffme"]', "the key has a lone surrogate"),
        ({"ids": {1: "a"}}, "$.request.args.ids", "the key 1 has type int, not str"),
        ({"ids": {("a", 1): "a"}}, "$.request.args.ids", "the key ('a', 1) has type tuple"),
        ({"t": float("nan")}, "$.request.args.t", "nan is not a JSON number"),
        ({"t": [float("-inf")]}, "$.request.args.t[0]", "-inf is not a JSON number"),
        ({"id": 2**53 + 1}, "$.request.args.id", "a JSON reader would read 9007199254740992"),
        ({"o": [Opaque()]}, "$.request.args.o[0]", "test_bad_input.Opaque is not a JSON value"),
        (_cycle(), "$.request.args.graph.self.back", "same object as $.request.args.graph"),
        ({"deep": _deep(300)}, "$.request.args.deep" + "[0]" * 198, "nested more than 200"),
        ({"blob": "y" * 5000}, "$.request", "over max_payload_bytes=1000"),
    ],
)  # fmt: skip
def test_every_refused_tool_argument_names_its_path_and_cause(
    publisher: Publisher, args: Any, path: str, cause: str
) -> None:
    calls = Calls()
    rec = started(publisher, calls)
    with pytest.raises(PayloadError) as exc:
        rec.tool("echo", args)
    refused(exc, path)
    message = str(exc.value)
    assert message.startswith(f"{path} cannot be recorded: ") or "$.request is " in message
    assert cause in message and "unknown problem" not in message
    message.encode("utf-8")  # printable: a lone surrogate is shown as an escape
    assert calls.tool == 0 and publisher.stats().published == 0 and rec._next_seq == 0


def test_a_lone_surrogate_deep_in_a_model_request_is_named(publisher: Publisher) -> None:
    calls = Calls()
    rec = started(publisher, calls)
    messages = [{"content": "hi"}, {"content": "ok"}, {"content": "bad \udcff bytes"}]
    with pytest.raises(PayloadError, match="lone surrogate") as exc:
        rec.model({"messages": messages}, model=MODEL)
    refused(exc, "$.request.messages[2].content")
    assert calls.model == 0 and publisher.stats().published == 0


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [({"fn": "send_email"}, "Tool(fn=...) must be the tool's function"),
     ({"fn": None}, "got a NoneType"),
     ({"fn": print, "side_effect": "yes"}, "Tool(side_effect=...) must be True"),
     ({"fn": print, "side_effect": 1}, "or False, got 1")],
)  # fmt: skip
def test_tool_argument_mistakes_are_config_errors_that_say_what_to_pass(
    kwargs: dict[str, Any], words: str
) -> None:
    from tracevault.producer import Tool

    with pytest.raises(ConfigError, match=re.escape(words)):
        Tool(**kwargs)
    with pytest.raises(ConfigError, match="pass the function itself"):
        Tool(Tool(print))  # type: ignore[arg-type]


def test_a_tool_that_is_not_callable_is_named_by_its_registration(publisher: Publisher) -> None:
    with pytest.raises(ConfigError, match=re.escape("Recorder(tools={'search': ...})")):
        Recorder(publisher=publisher, agent_id="a", agent_version="1", tools={"search": 3})  # type: ignore[dict-item]


def test_bytes_that_are_not_an_event_are_spooled_and_the_publisher_goes_on(
    tmp_path: Any,
) -> None:
    """``Publisher.publish`` takes bytes it does not decode. Entering the spool used to read
    each purged event's seq to order them, and bytes that are not an event stopped the
    Publisher's thread there: nothing after them was kept, and close() reported nothing
    lost. They are spooled as they came (the sequencer names them in its DLQ)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    pub = Publisher(Settings(bootstrap_servers=f"127.0.0.1:{dead}", spool_dir=str(tmp_path)))
    pub.publish(b"run-a", b"not an event")
    pub.publish(b"run-a", b"")
    pub.publish(b"run-b", b"\x00\x02")
    report = pub.close(timeout=5)
    assert (report.delivered, report.lost, report.undelivered) == (0, 0, 3), report
    assert report.spool_files, report
