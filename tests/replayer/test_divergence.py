"""The divergence corpus: each agent variant is reported at the right seq with the right diff.

The honest run is: 0 RUN_STARTED, 1 CLOCK, 2 RANDOM, 3 MODEL_CALL (plan), 4 TOOL_CALL search,
5 TOOL_CALL fetch, 6 EXTERNAL_STATE, 7 DECISION, 8 MODEL_CALL (answer), 9 CLOCK,
10 RUN_FINISHED.
"""

from __future__ import annotations

import pickle

import pytest

from tests.replayer import agents
from tests.replayer.recording import record
from tracevault.errors import ReplayDivergence
from tracevault.replayer import replay
from tracevault.schemas import EventKind


@pytest.fixture(scope="module")
def events():
    ev = record(agents.research_agent, agents.INPUT, run_id="run-div", model_fn=agents.fake_model,
                tools=agents.TOOLS, states=agents.STATES)  # fmt: skip
    assert [e.kind for e in ev] == [
        EventKind.RUN_STARTED, EventKind.CLOCK, EventKind.RANDOM, EventKind.MODEL_CALL,
        EventKind.TOOL_CALL, EventKind.TOOL_CALL, EventKind.EXTERNAL_STATE, EventKind.DECISION,
        EventKind.MODEL_CALL, EventKind.CLOCK, EventKind.RUN_FINISHED,
    ]  # fmt: skip
    return ev


CHANGED = "What is the boiling point of water at 2000 m?"
CORPUS = [
    # (agent, seq, expected kind, actual kind, a diff line that must appear)
    ("changed_prompt_agent", 3, "MODEL_CALL", "MODEL_CALL",
     f'$.request.messages[0].content: expected "plan: {CHANGED}", '
     f'got "plan carefully: {CHANGED}"'),
    ("extra_tool_agent", 6, "EXTERNAL_STATE", "TOOL_CALL",
     '$.request.tool: unexpected "search" (not in the record)'),
    ("missing_call_agent", 5, "TOOL_CALL", "EXTERNAL_STATE",
     '$.request.tool: missing (recorded "fetch")'),
    ("reordered_tools_agent", 4, "TOOL_CALL", "TOOL_CALL",
     '$.request.tool: expected "search", got "fetch"'),
    ("extra_clock_agent", 4, "TOOL_CALL", "CLOCK",
     '$.request.name: unexpected "timeout_check" (not in the record)'),
    ("other_model_agent", 3, "MODEL_CALL", "MODEL_CALL",
     '$.model: expected "gpt-4o-2024-08-06", got "gpt-4o-2024-11-20"'),
    ("other_seed_agent", 3, "MODEL_CALL", "MODEL_CALL", "$.seed: expected 7, got 8"),
]  # fmt: skip


@pytest.mark.parametrize("case", CORPUS, ids=[c[0] for c in CORPUS])
def test_divergence_is_reported_at_the_right_seq(events, case) -> None:
    name, seq, expected, actual, line = case
    agent = getattr(agents, name)
    with pytest.raises(ReplayDivergence) as info:
        replay(events, agent)
    exc = info.value
    assert (exc.seq, exc.expected, exc.actual) == (seq, expected, actual), str(exc)
    assert line in exc.diff, exc.diff
    # the report says what the record had next, starting at the divergent seq
    assert f"seq {seq} {expected}" in str(exc)
    report = replay(events, agent, raise_on_divergence=False).divergence
    assert report is not None and report.next_in_record[0].seq == seq
    assert report.next_in_record[0].kind == expected


def test_divergence_survives_pickling_for_batch_workers(events) -> None:
    with pytest.raises(ReplayDivergence) as info:
        replay(events, agents.other_seed_agent)
    back = pickle.loads(pickle.dumps(info.value))
    assert (back.seq, back.expected, back.actual, back.diff) == (
        info.value.seq, info.value.expected, info.value.actual, info.value.diff,
    )  # fmt: skip


def test_different_final_output_diverges_at_run_finished(events) -> None:
    def agent(agent_input, edges):
        out = agents.research_agent(agent_input, edges)
        return {**out, "answer": "100 °C"}

    with pytest.raises(ReplayDivergence) as info:
        replay(events, agent)
    assert info.value.seq == 10 and info.value.expected == "RUN_FINISHED"
    assert any(d.startswith("$.response.output.answer: expected") for d in info.value.diff)


def test_extra_call_after_the_end_of_an_unfinished_record(events) -> None:
    unfinished = events[:5]  # cut after the search call: no RUN_FINISHED
    with pytest.raises(ReplayDivergence) as info:
        replay(unfinished, agents.research_agent)
    assert info.value.seq == 5 and info.value.expected is None and info.value.actual == "TOOL_CALL"


def test_swapped_tools_are_headlined_by_the_tool_name(events) -> None:
    with pytest.raises(ReplayDivergence) as info:
        replay(events, agents.reordered_tools_agent)
    assert info.value.diff[0] == '$.request.tool: expected "search", got "fetch"', info.value.diff
    assert "differs from the record at $.request.tool" in str(info.value)


def test_a_change_at_the_end_of_a_long_value_shows_where_it_differs() -> None:
    from tracevault.replayer._json_diff import json_diff

    prompt = "You are a careful assistant. " * 20
    (line,) = json_diff(
        {"system": prompt + "Answer in French."}, {"system": prompt + "Answer in German."}
    )
    expected, _, got = line.partition(", got ")
    assert "French" in expected and "German" in got, line
    assert expected.split("expected ")[1] != got.split(" (first")[0]
    assert line.endswith(f"(first difference at character {len(prompt) + 11})"), line
    # short values read as before
    assert json_diff({"a": "x"}, {"a": "y"}) == ('$.a: expected "x", got "y"',)
