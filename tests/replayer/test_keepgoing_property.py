"""Issue 23: ``--keep-going`` reports exactly the injected divergences, on every combination.

``keepgoing_agents.support_agent`` is recorded once through the real pipeline (Recorder ->
Kafka raw -> Sequencer -> sealed) and loaded back from the sealed topic; every re-run then
replays that loaded run in process (keep-going needs no broker). Hypothesis draws sets of 1-4
of the eight edits, and one test walks all 162 such sets; the same record with every
line moved (the agent edited above its calls after the run was recorded) must give the same.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import unique_name
from tests.replayer import keepgoing_agents as kga
from tests.replayer.pipeline import sequencer_running, wait_sealed
from tracevault.callsite import SITE_ATTRIBUTE
from tracevault.config import Settings
from tracevault.kafka import ensure_topics
from tracevault.producer import Publisher, Recorder
from tracevault.replayer import load_run, replay, verify
from tracevault.schemas import TraceEvent

Finding = tuple[int, str | None, str | None]
# lines inserted above (or removed from above) the agent's calls after the run was recorded:
# small moves put a call exactly where the record has another call of the same kind
_MOVES = tuple(range(-12, 13))


@pytest.fixture(scope="module")
def recorded(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[TraceEvent]]:
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
        finally:
            assert publisher.flush(30), "the publisher could not deliver to Kafka"
            publisher.close()
        wait_sealed(cfg, "kg-support")
    yield list(verify(load_run(cfg, "kg-support", source="topic"), require_finished=True).events)


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
