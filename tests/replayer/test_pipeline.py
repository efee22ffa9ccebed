"""Through the real pipeline: Recorder -> raw -> Sequencer -> sealed -> Archiver -> archive.

One recorded run is read back from both the topic and the archive, verified, and replayed;
a variant of the agent diverges at the same seq from either source.
"""

from __future__ import annotations

import dataclasses

import pytest

from tests.conftest import NOW_US, trusted_agents
from tests.replayer import agents
from tests.replayer.pipeline import record_live, sequencer_running, wait_sealed
from tests.services.sequencer.support import AGENT as UNSIGNED
from tracevault.errors import ReplayDivergence
from tracevault.replayer import LogPolicy, load_run, replay, verify
from tracevault.services.archiver import Archiver


def test_recorded_sequenced_archived_run_replays_from_topic_and_archive(settings_factory) -> None:
    settings = settings_factory(partitions=2)
    run_id = "pipeline-run-1"
    with sequencer_running(settings):
        output = record_live(settings, agents.research_agent, agents.INPUT, run_id)
        wait_sealed(settings, run_id)
    Archiver(settings).run(until_idle=1.0)

    keys = trusted_agents()  # the Recorder signed with the session's agent key
    from_topic = verify(load_run(settings, run_id, source="topic"), agents=keys)
    from_archive = verify(load_run(settings, run_id, source="archive"), agents=keys)
    assert from_topic.finished and from_archive.finished
    assert (from_topic.count, from_topic.head) == (from_archive.count, from_archive.head)
    assert not from_archive.warnings
    for report in (from_topic, from_archive):
        result = replay(report.events, agents.research_agent)
        assert result.matched and result.output == output
        with pytest.raises(ReplayDivergence) as info:
            replay(report.events, agents.other_seed_agent)
        assert info.value.seq == 3 and "$.seed: expected 7, got 8" in info.value.diff


def test_gap_markers_from_the_real_sequencer_are_reported(settings_factory, events) -> None:
    from confluent_kafka import Producer

    from tracevault.schemas import encode_event

    settings = settings_factory(partitions=1, sequencer_gap_timeout_s=1.0)
    producer = Producer(settings.kafka_config(**{"partitioner": "murmur2_random"}))
    for ev in events:
        if ev.seq != 5:  # seq 5 never reaches Kafka
            # stamped now, as a Recorder does: the sequencer refuses an unknown run's event
            # recorded longer ago than its horizon (docs/fleet.md); hand-made and unsigned,
            # so under the suite's agent id listed with no key (else the sequencer contests
            # an unsigned claim, and the run fails verify even with provenance waived)
            now = dataclasses.replace(ev, at=NOW_US + ev.seq, agent=UNSIGNED)
            producer.produce(settings.topics.raw, encode_event(now), ev.run_id.encode())
    assert producer.flush(30) == 0
    with sequencer_running(settings):
        wait_sealed(settings, "run-a")
    run = load_run(settings, "run-a", source="topic", with_log=True)
    # the session's log key; hand-made raws carry no agent note: provenance waived knowingly
    report = verify(run, log=LogPolicy.of(settings), agent_check=False)
    assert (
        report.gaps == (5,) and report.status == "log verified, provenance not checked, with gaps"
    )
    result = replay(report.events, agents.research_agent, raise_on_divergence=False)
    assert result.divergence is not None and result.divergence.seq == 5
    assert "GAP marker" in result.divergence.reason
