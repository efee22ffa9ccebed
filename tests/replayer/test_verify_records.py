"""Checks 1-6 over sealed records in hand: every kind of damage named at the right seq."""

from __future__ import annotations

import dataclasses

import pytest

from tests.replayer import agents
from tests.replayer.both_ways import verify_both_ways
from tests.replayer.conftest import recorded
from tests.replayer.recording import seal, seal_raws
from tracevault.errors import ChainError
from tracevault.replayer import LoadedRun, replay, verify


def _verify(records):
    return verify_both_ways(LoadedRun.of(records, run_id="run-a"))


def test_an_intact_run_verifies_with_numbered_checks(sealed) -> None:
    report = verify(LoadedRun.of(sealed))
    assert report.finished and report.count == 11 and report.last_seq == 10
    assert report.head == sealed[-1].hash.hex()
    assert [c.split()[0] for c in report.checks] == ["1", "2", "3", "4", "5", "6"]
    assert replay(report.events, agents.research_agent).matched


def test_flipped_byte_in_an_event_names_its_seq(sealed) -> None:
    raw = bytearray(sealed[4].raw)
    raw[-3] ^= 0x01
    bad = [*sealed[:4], dataclasses.replace(sealed[4], raw=bytes(raw)), *sealed[5:]]
    with pytest.raises(ChainError) as info:
        _verify(bad)
    assert info.value.seq == 4 and "check 4 hash" in str(info.value)
    assert info.value.obj == "record[4]"


def test_deleted_event_names_the_missing_seq(sealed) -> None:
    with pytest.raises(ChainError) as info:
        _verify([*sealed[:6], *sealed[7:]])
    assert info.value.seq == 6 and "seq 6 is missing" in str(info.value)


def test_two_swapped_events_name_the_first_position(sealed) -> None:
    with pytest.raises(ChainError) as info:
        _verify([*sealed[:3], sealed[4], sealed[3], *sealed[5:]])
    assert info.value.seq == 3 and "check 2 seq" in str(info.value)


def test_event_moved_in_from_another_run_as_is(sealed) -> None:
    other = seal(recorded("run-b"))
    with pytest.raises(ChainError) as info:
        _verify([*sealed[:5], other[5], *sealed[6:]])
    assert info.value.seq == 5 and "run-b" in str(info.value) and "check 1 run" in str(info.value)


def test_event_moved_in_from_another_run_and_rechained(sealed) -> None:
    # a forger re-seals the whole chain around a foreign event: only check 5 can see it
    other = seal(recorded("run-b"))
    raws = [s.raw for s in sealed]
    raws[5] = other[5].raw
    with pytest.raises(ChainError) as info:
        _verify(seal_raws(raws, "run-a"))
    assert info.value.seq == 5 and "moved in from another run" in str(info.value)


def test_unfinished_run_verifies_but_says_so(sealed) -> None:
    report = _verify(sealed[:6])
    assert not report.finished and report.status == "chain only, unfinished"
    with pytest.raises(ChainError) as info:
        verify(LoadedRun.of(sealed[:6]), require_finished=True)
    assert "unfinished" in str(info.value)


def test_event_after_run_finished_is_refused(events) -> None:
    extra = dataclasses.replace(events[3], seq=11)
    with pytest.raises(ChainError) as info:
        _verify(seal([*events, extra]))
    assert info.value.seq == 11 and "follows RUN_FINISHED" in str(info.value)


def test_wrong_genesis_is_a_link_failure(sealed) -> None:
    with pytest.raises(ChainError) as info:
        _verify(seal_raws([s.raw for s in sealed], "run-a", prev=b"\0" * 32))
    assert info.value.seq == 0 and "check 3 link" in str(info.value)
