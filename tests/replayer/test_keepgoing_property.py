"""Issue 23: ``--keep-going`` reports exactly the injected divergences, on every combination.

``keepgoing_agents.support_agent`` is recorded once through the real pipeline (Recorder ->
Kafka raw -> Sequencer -> sealed) and loaded back from the sealed topic; every re-run then
replays that loaded run in process (keep-going needs no broker). Hypothesis draws sets of 1-4
of the eight edits, and one test walks all 162 such sets; the same record with every
line moved (the agent edited above its calls after the run was recorded) must give the same.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import unique_name
from tests.replayer import keepgoing_agents as kga
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
            for n in range(CONCURRENT_RECORDINGS):
                rec = Recorder(publisher=publisher, agent_id="support", agent_version="1",
                               model=kga.amodel_fn, tools=kga.ATOOLS,
                               run_id=f"kg-concurrent-{n}")  # fmt: skip
                asyncio.run(rec.arun(kga.concurrent_agent, kga.INPUT))
        finally:
            assert publisher.flush(30), "the publisher could not deliver to Kafka"
            publisher.close()
        run_ids = ["kg-support", *(f"kg-concurrent-{n}" for n in range(CONCURRENT_RECORDINGS))]
        wait_all_sealed(cfg, run_ids)
    loaded = load_all(cfg, run_ids, "topic")
    yield {run_id: list(verify(loaded[run_id], require_finished=True).events) for run_id in run_ids}


@pytest.fixture(scope="module")
def recorded(runs: dict[str, list[TraceEvent]]) -> list[TraceEvent]:
    return runs["kg-support"]


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
    for by in _MOVES:
        result = replay(_moved(recorded, by), kga.support_agent, keep_going=True)
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
    records = {by: _moved(recorded, by) for by in (0, 1, 9, -7)}
    wrong = []
    combos = [frozenset(c) for n in range(1, 5) for c in itertools.combinations(kga.KINDS, n)]
    assert len(combos) == 162
    for kinds in combos:
        want = kga.expected(kinds)
        for by, events in records.items():
            got = _found(events, kinds)
            if got != want:
                wrong.append((sorted(kinds), by, got, want))
    total = len(records) * len(combos)
    assert not wrong, f"{len(wrong)} of {total} wrong, first: {wrong[:3]}"


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
