"""The edges hook the adapters stand on: ``edges.model(..., call=fn)`` and ``model=None``,
through the real Recorder, broker and sequencer, and the replay edges."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integrations.pipeline import Pipeline
from tracevault.edges import Edges
from tracevault.errors import PayloadError
from tracevault.replayer import replay
from tracevault.schemas import EventKind

calls: list[str] = []


def provider(request: Any, *, model: str | None, seed: int | None) -> Any:
    calls.append(request["q"])
    return {"model": "m-build-2026-01-15", "a": request["q"].upper()}


def agent(task: Any, edges: Edges) -> Any:
    with pytest.raises(PayloadError, match=r"\$\.model"):
        edges.model({"q": "no build, no callee"}, model=None)  # refused in the agent
    named = edges.model({"q": "named"}, model="m-named-2026-01-15", seed=3, call=provider)
    reported = edges.model({"q": "reported"}, model=None, call=provider)
    return [named["a"], reported["a"]]


def test_a_per_call_callee_and_the_build_the_response_names(pipeline: Pipeline) -> None:
    calls.clear()
    run = pipeline.record(agent, None)
    assert run.output == ["NAMED", "REPORTED"]
    assert calls == ["named", "reported"]
    named, reported = [e for e in run.events if e.kind is EventKind.MODEL_CALL]
    assert (named.model, named.seed) == ("m-named-2026-01-15", 3)  # as given
    assert reported.model == "m-build-2026-01-15"  # as the response named it

    def never(request: Any, **_: Any) -> Any:
        raise AssertionError("replay called the callee")

    def replayed(task: Any, edges: Edges) -> Any:
        with pytest.raises(PayloadError, match=r"\$\.model"):
            edges.model({"q": "no build, no callee"}, model=None)
        named = edges.model({"q": "named"}, model="m-named-2026-01-15", seed=3, call=never)
        reported = edges.model({"q": "reported"}, model=None, call=never)
        return [named["a"], reported["a"]]

    assert replay(run.events, replayed).output == run.output
