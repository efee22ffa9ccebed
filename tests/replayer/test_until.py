"""``--until N``: the timeline served up to N and the crossing the agent asked for next."""

from __future__ import annotations

import json

from click.testing import CliRunner

from tests.replayer import agents
from tests.replayer.archiving import write_signed_run
from tests.replayer.recording import seal
from tracevault.archive import open_store
from tracevault.cli import tracevault
from tracevault.replayer import replay


def test_until_names_the_next_crossing_the_agent_asked_for(events) -> None:
    result = replay(events, agents.research_agent, until=4)
    assert result.stopped and [e.seq for e in result.served] == [0, 1, 2, 3, 4]
    asked = result.next_call
    assert asked is not None and asked.kind == "TOOL_CALL"
    assert asked.request == {"tool": "fetch", "args": {"url": "https://example.org/boiling"}}
    assert asked.site is not None and asked.site.startswith("tests.replayer.agents:_agent:")
    # a changed agent asks for something else at the same point: that is what it shows
    other = replay(events, agents.missing_call_agent, until=4).next_call
    assert other is not None and (other.kind, other.request) == (
        "EXTERNAL_STATE",
        {"name": "inventory"},
    )


def test_until_past_the_last_crossing_shows_the_agent_returning(events) -> None:
    result = replay(events, agents.research_agent, until=9)
    assert result.next_call is not None and result.next_call.kind == "RUN_FINISHED"
    assert set(result.next_call.request["output"]) == {"answer", "pick", "cached", "took", "go"}


def test_cli_until_prints_the_state_and_json(tmp_path, events) -> None:
    url = f"file://{tmp_path / 'archive'}"
    write_signed_run(open_store(url), seal(events))
    args = ["replay", "--archive-url", url, "run", "run-a", "--agent",
            "tests.replayer.agents:research_agent", "--until", "4", "--offline"]  # fmt: skip
    res = CliRunner().invoke(tracevault, args, terminal_width=80)
    assert res.exit_code == 0, res.output
    assert "served up to seq 4" in res.output and "what comes next" in res.output
    assert '{"args":{"url":"https://example.org/boiling"},"tool":"fetch"}' in res.output
    assert "stopped after seq 4" in res.output
    assert max(len(line) for line in res.output.splitlines()) <= 80
    out = json.loads(CliRunner().invoke(tracevault, [*args, "--json"]).output)
    assert [e["seq"] for e in out["served"]] == [0, 1, 2, 3, 4]
    assert out["served"][4]["request"] == {
        "tool": "search",
        "args": {"q": "boiling point altitude 2000 m"},
    }
    assert (
        out["next_call"]["kind"] == "TOOL_CALL" and out["next_call"]["request"]["tool"] == "fetch"
    )
    assert out["record_next"]["seq"] == 5 and out["record_next"]["kind"] == "TOOL_CALL"
