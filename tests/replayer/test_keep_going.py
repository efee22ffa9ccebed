"""``replay(..., keep_going=True)``: every divergence, aligned by kind, call site and ordinal."""

from __future__ import annotations

import asyncio
import json

from click.testing import CliRunner

from tests.replayer import agents
from tests.replayer.archiving import write_signed_run
from tests.replayer.conftest import recorded
from tests.replayer.recording import record, seal
from tracevault.archive import open_store
from tracevault.callsite import SITE_ATTRIBUTE
from tracevault.cli import tracevault
from tracevault.errors import ReplayDivergence
from tracevault.replayer import areplay, replay


def _found(result) -> list[tuple[int, str | None, str | None]]:
    return [(d.seq, d.expected, d.actual) for d in result.divergences]


def test_four_injected_changes_are_all_reported_each_at_its_seq(events) -> None:
    assert all(SITE_ATTRIBUTE in e.attributes for e in events[1:-1])
    result = replay(events, agents.four_changes_agent, keep_going=True)
    assert not result.matched
    assert _found(result) == [
        (3, "MODEL_CALL", "MODEL_CALL"),  # the changed prompt
        (4, None, "CLOCK"),  # the inserted clock read, before seq 4
        (5, "TOOL_CALL", None),  # the fetch left out
        (7, "DECISION", "DECISION"),  # the other decision
        (8, "MODEL_CALL", "MODEL_CALL"),  # the answer's prompt lost the fetched page
        (10, "RUN_FINISHED", "RUN_FINISHED"),  # and the output says so
    ]
    by_seq = {d.seq: d for d in result.divergences}
    assert by_seq[3].diff[0].startswith("$.request.messages[0].content: expected")
    assert by_seq[4].site is not None and by_seq[4].site.startswith("tests.replayer.agents:_agent:")
    assert '"timeout_check"' in by_seq[4].diff[0]
    assert "never made" in by_seq[5].reason
    assert by_seq[7].diff == ('$.request.choice: expected "answer", got "search_more"',)
    assert result.divergence == result.divergences[0]
    assert [d["seq"] for d in result.to_json()["divergences"]] == [3, 4, 5, 7, 8, 10]


def test_without_keep_going_the_first_divergence_stops_the_re_run(events) -> None:
    try:
        replay(events, agents.four_changes_agent)
    except ReplayDivergence as exc:
        assert exc.seq == 3
    else:
        raise AssertionError("no divergence")


def test_an_inserted_call_is_one_divergence_not_a_cascade(events) -> None:
    result = replay(events, agents.extra_clock_agent, keep_going=True)
    assert _found(result) == [(4, None, "CLOCK")]
    result = replay(events, agents.extra_tool_agent, keep_going=True)
    assert [(d.expected, d.actual) for d in result.divergences] == [(None, "TOOL_CALL")]
    assert "stopped here" in result.divergences[0].reason


def test_an_unchanged_agent_matches_with_keep_going(events) -> None:
    result = replay(events, agents.research_agent, keep_going=True)
    assert result.matched and result.divergences == () and result.steps == 9


def test_a_record_without_call_sites_aligns_by_kind_and_ordinal() -> None:
    events = record(agents.research_agent, agents.INPUT, run_id="old", model_fn=agents.fake_model,
                    tools=agents.TOOLS, states=agents.STATES)  # fmt: skip
    legacy = [e.__class__(**{**{f: getattr(e, f) for f in e.__slots__}, "attributes": {}})
              for e in events]  # fmt: skip
    result = replay(legacy, agents.missing_call_agent, keep_going=True)
    assert (5, "TOOL_CALL", None) in _found(result)
    assert _found(result)[0] == (5, "TOOL_CALL", None)


def test_async_agents_keep_going_too() -> None:
    events = recorded("a")
    result = asyncio.run(areplay(events, agents.four_changes_agent, keep_going=True))
    assert [d.seq for d in result.divergences] == [3, 4, 5, 7, 8, 10]


def test_cli_keep_going_prints_every_divergence_and_json(tmp_path, events) -> None:
    url = f"file://{tmp_path / 'archive'}"
    write_signed_run(open_store(url), seal(events))
    agent = "tests.replayer.agents:four_changes_agent"
    runner = CliRunner()
    res = runner.invoke(tracevault, ["replay", "--archive-url", url, "run", "run-a",
                                     "--agent", agent, "--keep-going", "--offline"])  # fmt: skip
    assert res.exit_code == 1, res.output
    assert "6 divergences" in res.output and "never made this TOOL_CALL" in res.output
    assert max(len(line) for line in res.output.splitlines()) <= 80
    res = runner.invoke(tracevault, ["replay", "--archive-url", url, "run", "run-a",
                                     "--agent", agent, "--keep-going", "--json",
                                     "--offline"])  # fmt: skip
    out = json.loads(res.output)
    assert [d["seq"] for d in out["divergences"]] == [3, 4, 5, 7, 8, 10]
    assert out["divergence"]["seq"] == 3 and not out["matched"]


def test_cli_refuses_flags_that_cannot_work_together(tmp_path) -> None:
    url = f"file://{tmp_path / 'archive'}"
    base = [
        "replay",
        "--archive-url",
        url,
        "run",
        "nowhere",
        "--agent",
        "tests.replayer.agents:research_agent",
    ]
    for extra, says in (
        (["--then", "live"], "needs both --until N and --then live"),
        (["--live-edges", "x:y", "--until", "3"], "needs both --until N and --then live"),
        (["--keep-going", "--until", "3"], "drop --until"),
        (["--recurse", "--keep-going"], "drop --until/--keep-going"),
    ):
        res = CliRunner().invoke(tracevault, [*base, *extra])
        assert res.exit_code == 2 and says in res.output, res.output
