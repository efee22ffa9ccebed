"""A recorded exception replays as its own type where its module is loaded (or a module of a
loaded package): an agent that logs ``type(exc).__module__`` or compares types behaves under
replay as it did live. And a gather whose first failure leaves a sibling running replays
without asyncio reporting a divergence at shutdown. The real Recorder, broker and sequencer."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from tests.integrations.pipeline import Pipeline
from tracevault.edges import Edges
from tracevault.replayer import RecordedError, areplay, replay


class LookupFailed(Exception):
    """An agent's own exception class, defined in an importable module."""


class Outer:
    class Nested(Exception):
        pass


def _lookup(args: Any) -> Any:
    raise LookupFailed(f"no order {args['id']}")


def _nested(args: Any) -> Any:
    raise Outer.Nested("deep")


def _value(args: Any) -> Any:
    raise ValueError("bad value")


def _key(args: Any) -> Any:
    raise KeyError("k")  # str() is "'k'", the repr of its argument


class Coded(Exception):
    """Cannot be made from its message: replayed as the recorded stand-in."""

    def __init__(self, code: str, why: str) -> None:
        super().__init__(code, why)
        self.code, self.why = code, why

    def __str__(self) -> str:
        return f"{self.code}: {self.why}"


def _coded(args: Any) -> Any:
    raise Coded("E1", "broken")


TOOLS: dict[str, Any] = {
    "lookup": _lookup, "nested": _nested, "value": _value, "key": _key, "coded": _coded,
}  # fmt: skip
CAUGHT: list[BaseException] = []


def typed_agent(task: Any, edges: Edges) -> list[Any]:
    seen: list[Any] = []
    for name in TOOLS:
        try:
            edges.tool(name, {"id": 7})
        except Exception as exc:
            CAUGHT.append(exc)
            cls = type(exc)
            if name == "coded":
                seen.append([str(exc)])
                continue
            seen.append([cls.__module__, cls.__qualname__, str(exc)])
            seen.append(cls in (LookupFailed, Outer.Nested, ValueError, KeyError))
    return seen


def test_a_recorded_exception_replays_as_its_own_type(pipeline: Pipeline) -> None:
    run = pipeline.record(typed_agent, {}, tools=TOOLS)
    assert run.output == [
        [__name__, "LookupFailed", "no order 7"], True,
        [__name__, "Outer.Nested", "deep"], True,
        ["builtins", "ValueError", "bad value"], True,
        ["builtins", "KeyError", "'k'"], True,
        ["E1: broken"],
    ]  # fmt: skip
    CAUGHT.clear()
    result = replay(run.events, typed_agent)
    assert result.matched, result
    assert result.output == run.output
    assert [type(e) for e in CAUGHT[:4]] == [LookupFailed, Outer.Nested, ValueError, KeyError]
    # A type that cannot be rebuilt from its message alone: the recorded stand-in
    stand_in = CAUGHT[4]
    assert isinstance(stand_in, RecordedError) and not isinstance(stand_in, Coded)
    assert stand_in.recorded_type == f"{__name__}.Coded"


async def _slow(args: Any) -> Any:
    await asyncio.sleep(5)
    return {"never": True}


async def _fails(args: Any) -> Any:
    await asyncio.sleep(0.01)
    raise LookupFailed("first failure")


ASYNC_TOOLS: dict[str, Any] = {"slow": _slow, "fails": _fails}


async def gather_exc_agent(task: Any, edges: Edges) -> Any:
    """gather without return_exceptions: the first failure propagates, the sibling keeps
    running until asyncio.run cancels it at shutdown (live and under replay)."""
    try:
        await asyncio.gather(edges.atool("fails", {}), edges.atool("slow", {}))
    except LookupFailed as exc:
        return {"caught": type(exc).__qualname__}
    return {}


def test_a_matched_gather_with_an_exception_reports_nothing_at_shutdown(
    pipeline: Pipeline, caplog: pytest.LogCaptureFixture
) -> None:
    run = pipeline.record(gather_exc_agent, {}, tools=ASYNC_TOOLS)
    assert run.output == {"caught": "LookupFailed"}
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        result = asyncio.run(areplay(run.events, gather_exc_agent))
    assert result.matched, result
    assert result.output == run.output
    assert not [r for r in caplog.records if r.name == "asyncio"], caplog.text
