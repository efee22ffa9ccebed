"""diff_runs: where two recorded runs first differ."""

from __future__ import annotations

from tests.replayer import agents
from tests.replayer.conftest import recorded
from tests.replayer.recording import record
from tracevault.replayer import diff_runs


def _run(agent, run_id: str, question: str = agents.INPUT["question"]):
    return record(agent, {"question": question}, run_id=run_id, model_fn=agents.fake_model,
                  tools=agents.TOOLS, states=agents.STATES)  # fmt: skip


def test_two_runs_of_the_same_agent_on_the_same_input_are_the_same() -> None:
    d = diff_runs(recorded("a"), recorded("b"))
    assert d.same and d.a.count == d.b.count == 11 and d.a.models == ("gpt-4o-2024-08-06",)


def test_a_different_input_diverges_at_seq_0() -> None:
    d = diff_runs(recorded("a"), _run(agents.research_agent, "b", "At sea level?"))
    assert d.divergence is not None and d.divergence.seq == 0
    assert d.divergence.diff[0].startswith("$.request.input.question: expected")


def test_an_extra_tool_call_diverges_where_it_happens() -> None:
    d = diff_runs(recorded("a"), _run(agents.extra_tool_agent, "b"))
    assert d.divergence is not None and d.divergence.seq == 6
    assert (d.divergence.expected, d.divergence.actual) == ("EXTERNAL_STATE", "TOOL_CALL")
    assert d.to_json()["b"]["kinds"]["TOOL_CALL"] == 3


def test_a_shorter_run_diverges_where_it_ends() -> None:
    a = recorded("a")
    d = diff_runs(a, a[:7])
    assert d.divergence is not None and d.divergence.seq == 7 and d.divergence.actual is None
