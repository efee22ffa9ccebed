"""Issues 23 and 34: ``--keep-going`` reports exactly the injected divergences, on every set.

``keepgoing_agents.support_agent`` and ``loop_agents.loop_agent`` are recorded once through
the real pipeline (Recorder -> Kafka raw -> Sequencer -> sealed) and loaded back from the
sealed topic; every re-run then replays that loaded run in process (keep-going needs no
broker). Hypothesis draws sets of 1-4 of each agent's edits, and one test per agent walks
every such set; the same record with every line moved (the agent edited above its calls
after the run was recorded) must give the same. The loop agent makes its repeated calls from
shared sites (a clock helper, one draw line, one decision helper), where an inserted read
looks exactly like the next recorded one.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import unique_name
from tests.replayer import keepgoing_agents as kga
from tests.replayer import loop_agents
from tests.replayer.pipeline import load_all, sequencer_running, wait_all_sealed
from tracevault.callsite import SITE_ATTRIBUTE
from tracevault.config import Settings
from tracevault.kafka import ensure_topics
from tracevault.producer import Publisher, Recorder
from tracevault.replayer import areplay, replay, verify
from tracevault.replayer.rerun import _interleave
from tracevault.replayer.rerun._interleave import interleaved
from tracevault.schemas import TraceEvent

Finding = tuple[int, str | None, str | None]
# lines inserted above (or removed from above) the agent's calls after the run was recorded:
# small moves put a call exactly where the record has another call of the same kind
_MOVES = tuple(range(-12, 13))


CONCURRENT_RECORDINGS = 3
# far above what a served branch takes between crossings under replay (microseconds)
_STALL_S = 1.0


@pytest.fixture(scope="module")
def runs(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, list[TraceEvent]]]:
    """The sequential agent's run and three of the concurrent agent's, each recorded once."""
    base = tmp_path_factory.mktemp("keepgoing")
    cfg = Settings(bootstrap_servers=kafka_bootstrap, topic_prefix=unique_name("kg"),
                   partitions=1, archive_url=f"file://{base / 'archive'}",
                   spool_dir=str(base / "spool"))  # fmt: skip
    ensure_topics(cfg)
    with sequencer_running(cfg):
        publisher = Publisher(cfg)
        try:
            rec = Recorder(publisher=publisher, agent_id="support", agent_version="1",
                           model=kga.model_fn, tools=kga.TOOLS, run_id="kg-support")  # fmt: skip
            rec.run(kga.support_agent, kga.INPUT)
            rec = Recorder(publisher=publisher, agent_id="support", agent_version="1",
                           model=loop_agents.model_fn, tools=loop_agents.TOOLS,
                           run_id="kg-loop")  # fmt: skip
            rec.run(loop_agents.loop_agent, loop_agents.INPUT)
            for n in range(CONCURRENT_RECORDINGS):
                rec = Recorder(publisher=publisher, agent_id="support", agent_version="1",
                               model=kga.amodel_fn, tools=kga.ATOOLS,
                               run_id=f"kg-concurrent-{n}")  # fmt: skip
                asyncio.run(rec.arun(kga.concurrent_agent, kga.INPUT))
        finally:
            assert publisher.flush(30), "the publisher could not deliver to Kafka"
            publisher.close()
        run_ids = ["kg-support", "kg-loop",
                   *(f"kg-concurrent-{n}" for n in range(CONCURRENT_RECORDINGS))]  # fmt: skip
        wait_all_sealed(cfg, run_ids)
    loaded = load_all(cfg, run_ids, "topic")
    yield {run_id: list(verify(loaded[run_id], require_finished=True).events) for run_id in run_ids}


@pytest.fixture(scope="module")
def recorded(runs: dict[str, list[TraceEvent]]) -> list[TraceEvent]:
    return runs["kg-support"]


@pytest.fixture(scope="module")
def loop(runs: dict[str, list[TraceEvent]]) -> list[TraceEvent]:
    return runs["kg-loop"]


@pytest.fixture(scope="module")
def concurrent(runs: dict[str, list[TraceEvent]]) -> list[list[TraceEvent]]:
    got = [events for run_id, events in runs.items() if run_id.startswith("kg-concurrent-")]
    assert all(interleaved(events) for events in got), "the branches should have overlapped"
    return got


def _moved(events: list[TraceEvent], by: int) -> list[TraceEvent]:
    """The same record with every call site ``by`` lines higher up (the agent since moved)."""
    out = []
    for ev in events:
        site = ev.attributes.get(SITE_ATTRIBUTE) if ev.attributes else None
        if site is not None:
            where, _, line = site.rpartition(":")
            attrs = {**ev.attributes, SITE_ATTRIBUTE: f"{where}:{int(line) - by}"}
            fields = {f: getattr(ev, f) for f in ev.__slots__}
            out.append(ev.__class__(**{**fields, "attributes": attrs}))
        else:
            out.append(ev)
    return out


def _found(events: list[TraceEvent], kinds: frozenset[str]) -> list[Finding]:
    result = replay(events, kga.perturbed(kinds), keep_going=True)
    assert result.output is not None or result.divergences, result
    return [(d.seq, d.expected, d.actual) for d in result.divergences]


def test_the_record_and_an_unchanged_re_run(recorded: list[TraceEvent]) -> None:
    kinds = [e.kind.value for e in recorded]
    assert kinds == ["RUN_STARTED", "CLOCK", "MODEL_CALL", "TOOL_CALL", "TOOL_CALL", "TOOL_CALL",
                     "EXTERNAL_STATE", "DECISION", "TOOL_CALL", "MODEL_CALL", "CLOCK",
                     "RUN_FINISHED"]  # fmt: skip
    assert all(SITE_ATTRIBUTE in e.attributes for e in recorded[1:-1])
    _matches_wherever_lines_moved(recorded, kga.support_agent)


def _matches_wherever_lines_moved(events: list[TraceEvent], agent: Any) -> None:
    for by in _MOVES:
        result = replay(_moved(events, by), agent, keep_going=True)
        assert result.matched and result.divergences == (), (by, result.divergences)


def test_a_swap_an_argument_and_a_decision_are_all_three_reported(
    recorded: list[TraceEvent],
) -> None:
    result = replay(recorded, kga.perturbed({"swap", "arg", "decision"}), keep_going=True)
    assert [(d.seq, d.expected, d.actual) for d in result.divergences] == [
        (3, "TOOL_CALL", "TOOL_CALL"),
        (5, "TOOL_CALL", "TOOL_CALL"),
        (7, "DECISION", "DECISION"),
    ]
    swap = result.divergences[0]
    assert "out of order" in swap.reason and "seq 4" in swap.reason, swap.reason


def test_moved_lines_and_one_renamed_state_read_is_one_finding(
    recorded: list[TraceEvent],
) -> None:
    for by in _MOVES:
        result = replay(_moved(recorded, by), kga.perturbed({"rename"}), keep_going=True)
        found = [(d.seq, d.expected, d.actual) for d in result.divergences]
        assert found == [(6, "EXTERNAL_STATE", "EXTERNAL_STATE")], (by, found)
        assert result.divergences[0].diff == (
            '$.request.name: expected "inventory", got "refunds"',
        )


_SETS = st.sets(st.sampled_from(kga.KINDS), min_size=1, max_size=4)


@settings(max_examples=150, deadline=None)
@given(kinds=_SETS, moved=st.sampled_from(_MOVES))
def test_exactly_the_injected_divergences(
    recorded: list[TraceEvent], kinds: set[str], moved: int
) -> None:
    assert _found(_moved(recorded, moved), frozenset(kinds)) == kga.expected(kinds)


def test_every_combination_of_one_to_four_edits(recorded: list[TraceEvent]) -> None:
    _every_combination(recorded, (0, 1, 9, -7), kga.KINDS, kga.expected, _found, count=162)


def _every_combination(
    events: list[TraceEvent],
    moves: tuple[int, ...],
    edits: tuple[str, ...],
    expected: Callable[[frozenset[str]], list[Finding]],
    found: Callable[[list[TraceEvent], frozenset[str]], list[Finding]],
    *,
    count: int,
) -> None:
    """Every set of 1-4 of ``edits``, on the record with its lines moved by each of ``moves``."""
    records = {by: _moved(events, by) for by in moves}
    combos = [frozenset(c) for n in range(1, 5) for c in itertools.combinations(edits, n)]
    assert len(combos) == count
    wrong = []
    for kinds in combos:
        want = expected(kinds)
        for by, moved in records.items():
            got = found(moved, kinds)
            if got != want:
                wrong.append((sorted(kinds), by, got, want))
    total = len(records) * len(combos)
    assert not wrong, f"{len(wrong)} of {total} wrong, first: {wrong[:3]}"


def _loop_found(events: list[TraceEvent], kinds: frozenset[str]) -> list[Finding]:
    result = replay(events, loop_agents.perturbed(kinds), keep_going=True)
    return [(d.seq, d.expected, d.actual) for d in result.divergences]


def test_the_loop_record_and_an_unchanged_re_run(loop: list[TraceEvent]) -> None:
    kinds = [e.kind.value for e in loop]
    step = ["RANDOM", "MODEL_CALL", "TOOL_CALL", "CLOCK", "DECISION"]
    assert kinds == ["RUN_STARTED", "CLOCK", "EXTERNAL_STATE", *step * 3, "RANDOM", "MODEL_CALL",
                     "CLOCK", "RUN_FINISHED"]  # fmt: skip
    _matches_wherever_lines_moved(loop, loop_agents.loop_agent)


def test_an_inserted_clock_read_through_a_shared_helper_is_one_finding_where_it_was_made(
    loop: list[TraceEvent],
) -> None:
    """The issue's case: args, extra_clock, budget_name gave 5 findings, 2 of them wrong."""
    result = replay(loop, loop_agents.perturbed({"args", "extra_clock", "budget_name"}),
                    keep_going=True)  # fmt: skip
    assert [(d.seq, d.expected, d.actual) for d in result.divergences] == [
        (2, "EXTERNAL_STATE", "EXTERNAL_STATE"),
        (10, "TOOL_CALL", "TOOL_CALL"),
        (10, None, "CLOCK"),
    ]
    extra = result.divergences[2]
    assert "before seq 10" in extra.reason and "out of order" not in str(result.divergences)
    assert extra.site is not None and extra.site.startswith("tests.replayer.loop_agents:_now:")


@settings(max_examples=150, deadline=None)
@given(kinds=st.sets(st.sampled_from(loop_agents.KINDS), min_size=1, max_size=4),
       moved=st.sampled_from(_MOVES))  # fmt: skip
def test_exactly_the_injected_divergences_in_a_loop(
    loop: list[TraceEvent], kinds: set[str], moved: int
) -> None:
    assert _loop_found(_moved(loop, moved), frozenset(kinds)) == loop_agents.expected(kinds)


def test_every_combination_of_one_to_four_edits_in_a_loop(loop: list[TraceEvent]) -> None:
    _every_combination(loop, (0, 3, -5), loop_agents.KINDS, loop_agents.expected, _loop_found,
                       count=255)  # fmt: skip


def _afound(events: list[TraceEvent], kinds: frozenset[str]) -> list[Finding]:
    result = asyncio.run(areplay(events, kga.concurrent_perturbed(kinds), keep_going=True))
    return [(d.seq, d.expected, d.actual) for d in result.divergences]


def test_a_concurrent_agent_unchanged_matches(concurrent: list[list[TraceEvent]]) -> None:
    for events in concurrent:
        result = asyncio.run(areplay(events, kga.concurrent_agent, keep_going=True))
        assert result.matched and result.divergences == (), result.divergences


def test_a_swap_in_a_concurrent_branch_is_reported_in_its_branch_order(
    concurrent: list[list[TraceEvent]],
) -> None:
    for events in concurrent:
        kinds = frozenset({"swap", "arg", "decision"})
        assert _afound(events, kinds) == kga.concurrent_expected(kinds, events)


def test_every_combination_in_a_concurrent_agent(
    concurrent: list[list[TraceEvent]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # a branch's last call left out is let go only after the others waited STALL_TIMEOUT_S
    # for it (docs/design.md, "Investigating a run"): far below 10 s keeps 26 such sets fast
    monkeypatch.setattr(_interleave, "STALL_TIMEOUT_S", _STALL_S)
    wrong = []
    kinds_ = kga.CONCURRENT_KINDS
    combos = [frozenset(c) for n in range(1, 5) for c in itertools.combinations(kinds_, n)]
    for events in concurrent[:1]:
        for kinds in combos:
            got, want = _afound(events, kinds), kga.concurrent_expected(kinds, events)
            if got != want:
                wrong.append((sorted(kinds), got, want))
    total = len(combos)
    assert not wrong, f"{len(wrong)} of {total} wrong, first: {wrong[:3]}"
