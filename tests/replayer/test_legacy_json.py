"""Runs recorded before RFC 8785 (tracevault 0.1 wrote CPython's json.dumps form) still
verify and replay: the chain covers their bytes, and replay matches a re-run against a
record in the form the record was written in (docs/design.md, "The event")."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.replayer import recording
from tests.replayer.recording import record, seal
from tracevault.errors import PayloadError, ReplayDivergence
from tracevault.replayer import LoadedRun, replay, verify
from tracevault.schemas import canonical_json

# Values whose legacy bytes differ from their RFC 8785 bytes: floats, an int past 2**53 that
# a double does not hold, and keys that sort differently by UTF-16 than by code point.
ARGS = {"t": 1.0, "eps": 1e-07, "big": 2**60, "large": 1e16, "\U0001f600": 1, "\ufb33": 2}


def _legacy(value: Any, *, field: str = "payload") -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def agent(agent_input: Any, edges: Any) -> Any:
    first = edges.tool("measure", dict(ARGS))
    second = edges.tool("measure", {"again": first["t"], "n": first["big"]})
    return {"first": first, "second": second}


def measure(args: Any) -> Any:
    return {**args, "t": 2.0, "tiny": 5e-05} if "again" not in args else {"ok": args["again"]}


def _no_model(request: Any, *, model: str, seed: int | None) -> Any:
    raise AssertionError("the agent calls no model")


def _legacy_record(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    with monkeypatch.context() as m:
        m.setattr(recording, "canonical_json", _legacy)
        events = record(
            agent, {"x": 0.5}, run_id="legacy-run", model_fn=_no_model, tools={"measure": measure}
        )
    return events


def test_the_legacy_record_really_differs_from_rfc8785(monkeypatch: pytest.MonkeyPatch) -> None:
    events = _legacy_record(monkeypatch)
    tool_call = events[1]
    assert tool_call.request == _legacy({"tool": "measure", "args": ARGS})
    with pytest.raises(PayloadError, match="cannot be recorded"):
        canonical_json({"tool": "measure", "args": ARGS})  # 2**60: refused from now on


def test_a_legacy_run_verifies_and_replays(monkeypatch: pytest.MonkeyPatch) -> None:
    events = _legacy_record(monkeypatch)
    report = verify(LoadedRun.of(seal(events), run_id="legacy-run"), require_finished=True)
    assert report.finished and report.count == len(events)
    result = replay(report.events, agent)
    assert result.matched and result.steps == len(events)
    assert result.output["first"]["t"] == 2.0


def test_a_legacy_run_still_diverges_on_a_real_change(monkeypatch: pytest.MonkeyPatch) -> None:
    events = _legacy_record(monkeypatch)

    def changed(agent_input: Any, edges: Any) -> Any:
        edges.tool("measure", {**ARGS, "eps": 2e-07, "big": 2**50})

    with pytest.raises(ReplayDivergence) as info:
        replay(events, changed)
    assert info.value.seq == 1
    assert set(info.value.diff) == {
        "$.request.args.big: expected 1152921504606846976, got 1125899906842624",
        "$.request.args.eps: expected 1e-07, got 2e-07",
    }
