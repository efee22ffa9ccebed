"""``replay diff``: two runs aligned, noise ignored, every difference with its seq in both."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from tests.replayer import agents
from tests.replayer.archiving import write_signed_run
from tests.replayer.conftest import recorded
from tests.replayer.recording import LiveEdges, _begin, _end, record, seal
from tracevault.archive import open_store
from tracevault.cli import tracevault
from tracevault.errors import ConfigError
from tracevault.replayer import align_runs

MOOD = {"route": "answer"}  # read behind the edges' back: the kind of bug a diff must find


def mood_agent(task, edges):
    started = edges.clock()
    rng = edges.random("sampling")
    plan = edges.model({"messages": [{"role": "user", "content": "plan: " + task["question"]}]},
                       model=agents.MODEL, seed=agents.SEED)  # fmt: skip
    for _ in range(3):
        edges.clock("tick")
    edges.decision("route", MOOD["route"], options=["answer", "escalate"])
    found = edges.tool("search", {"q": plan["query"]})
    return {"urls": found["urls"], "pick": rng.randint(0, 9), "took": edges.clock() - started}


def _record(run_id: str, clock0: float, seed: int, route: str):
    MOOD["route"] = route
    edges = LiveEdges(run_id, agents.fake_model, agents.TOOLS)
    edges.clock_values = [clock0 + i * (1 + seed % 3) for i in range(10)]
    real_random = edges.random
    edges.random = lambda name="rng", **_: real_random(name, seed=seed)  # type: ignore[method-assign]
    _begin(edges, agents.INPUT)
    _end(edges, mood_agent(agents.INPUT, edges), None, True)
    return edges.events


@pytest.fixture
def two_runs():
    return _record("mood-a", 1_790_000_000.0, 11, "answer"), _record(
        "mood-b", 1_790_000_500.25, 13, "escalate"
    )


def test_only_the_decision_differs_once_clock_and_random_are_ignored(two_runs) -> None:
    a, b = two_runs
    noisy = align_runs(a, b)
    assert noisy.differences[0].seq_a == 1 and noisy.differences[0].kind == "CLOCK"
    noise = ["$.response.output.took", "$.response.output.pick"]
    quiet = align_runs(a, b, ignore=["clock,random"], ignore_paths=noise)
    assert [(d.seq_a, d.seq_b, d.kind) for d in quiet.differences] == [(7, 7, "DECISION")]
    (field,) = quiet.differences[0].fields
    assert (field.path, field.a, field.b) == ("$.request.choice", '"answer"', '"escalate"')
    # the output's noise is what --ignore-path is for
    half = align_runs(a, b, ignore=["clock", "random"])
    assert {f.path for d in half.differences for f in d.fields} == {
        "$.request.choice", "$.response.output.took", "$.response.output.pick"}  # fmt: skip


def test_an_inserted_call_is_only_in_b_and_the_rest_still_aligns() -> None:
    a = recorded("a")
    b = record(agents.extra_clock_agent, agents.INPUT, run_id="b", model_fn=agents.fake_model,
               tools=agents.TOOLS, states=agents.STATES)  # fmt: skip
    d = align_runs(a, b, ignore_paths=["$.response.output.took"])
    # the inserted read, and the last read's value (the fake clock ticked once more)
    assert [(x.seq_a, x.seq_b, x.kind) for x in d.differences] == [
        (None, 4, "CLOCK"),
        (9, 10, "CLOCK"),
    ]
    assert d.differences[0].reason == "only run B makes this CLOCK call"
    # with clocks ignored there is nothing left
    assert align_runs(a, b, ignore=["clock"], ignore_paths=["$.response.output.took"]).same


def test_wildcard_paths_and_bad_flags() -> None:
    a = recorded("a")
    b = record(agents.changed_prompt_agent, agents.INPUT, run_id="b", model_fn=agents.fake_model,
               tools=agents.TOOLS, states=agents.STATES)  # fmt: skip
    noisy = align_runs(a, b)
    assert noisy.differences[0].fields[0].path == "$.request.messages[0].content"
    quieter = align_runs(a, b, ignore_paths=["$.request.messages[*].content"])
    assert all(
        f.path != "$.request.messages[0].content" for d in quieter.differences for f in d.fields
    )
    with pytest.raises(ConfigError, match="--ignore 'time'"):
        align_runs(a, b, ignore=["time"])
    with pytest.raises(ConfigError, match="JSON path"):
        align_runs(a, b, ignore_paths=["response.x"])


def test_cli_diff_side_by_side_at_80_columns_and_json(tmp_path, two_runs) -> None:
    url = f"file://{tmp_path / 'archive'}"
    store = open_store(url)
    for run in two_runs:
        write_signed_run(store, seal(run))
    # a hand-written archive: no sealed topic proves it current (--offline, knowingly)
    args = ["replay", "--archive-url", url, "diff", "mood-a", "mood-b", "--ignore", "clock",
            "--ignore", "random", "--ignore-path", "$.response.output", "--offline"]  # fmt: skip
    res = CliRunner().invoke(tracevault, args, terminal_width=80)
    assert res.exit_code == 1, res.output
    assert "1 difference " in res.output and '"escalate"' in res.output
    assert max(len(line) for line in res.output.splitlines()) <= 80
    out = json.loads(CliRunner().invoke(tracevault, [*args, "--json"]).output)
    assert out["differences"] == [{
        "seq_a": 7, "seq_b": 7, "kind": "DECISION", "site": out["differences"][0]["site"],
        "reason": "the DECISION calls differ",
        "fields": [{"path": "$.request.choice", "a": '"answer"', "b": '"escalate"'}],
    }]  # fmt: skip
    assert out["differences"][0]["site"].startswith("tests.replayer.test_aligned_diff:mood_agent:")
    res = CliRunner().invoke(tracevault, [*args[:5], "mood-a", "--json", "--offline"])
    assert res.exit_code == 0 and json.loads(res.output)["same"]
