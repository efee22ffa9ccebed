"""GAP markers (sealed by the sequencer for events that never arrived): reported, not hidden."""

from __future__ import annotations

import pytest

from tests.replayer import agents
from tests.replayer.recording import seal_raws
from tracevault.errors import ReplayDivergence
from tracevault.replayer import LoadedRun, replay, verify
from tracevault.schemas import encode_event
from tracevault.services.sequencer import gap_event


def _with_gap(events):
    raws = [encode_event(e) for e in events]
    raws[5] = gap_event("run-a", 5, 5, 6, "seq-1")
    raws[6] = gap_event("run-a", 6, 5, 6, "seq-1")
    return seal_raws(raws, "run-a")


def test_a_run_with_gaps_verifies_and_reports_them(events) -> None:
    assert verify(LoadedRun.of(_with_gap(events))).status == "unverified"  # no log: fail closed
    # hand-made raws, no agent note: provenance waived knowingly (--no-agent-check)
    report = verify(LoadedRun.of(_with_gap(events)), chain_only=True, agent_check=False)
    assert (
        report.gaps == (5, 6) and report.status == "chain only, provenance not checked, with gaps"
    )
    assert any("GAP" in w for w in report.warnings)


def test_replay_stops_at_a_gap_and_until_rebuilds_the_state_before_it(events) -> None:
    report = verify(LoadedRun.of(_with_gap(events)))
    with pytest.raises(ReplayDivergence) as info:
        replay(report.events, agents.research_agent)
    assert (
        info.value.seq == 5 and "GAP marker" in str(info.value) and "--until 4" in str(info.value)
    )
    result = replay(report.events, agents.research_agent, until=4)
    assert result.matched and result.stopped and result.steps == 5
