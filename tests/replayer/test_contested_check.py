"""Check C: a contested record the sequencer sealed against a run fails it, with no agent key
(tracevault/replayer/load/_contested.py; the live attack is tests/attacks/test_hijack_flood.py)."""

from __future__ import annotations

import dataclasses

import pytest

from tests.replayer.recording import seal_raws
from tests.replayer.test_identity import RUN, _signed
from tracevault.errors import ChainError
from tracevault.replayer._results import LoadedRun
from tracevault.replayer.load.verify import verify
from tracevault.schemas import EventKind
from tracevault.services.sequencer._records import sequencer_event
from tracevault.transparency import contested_prefix

CID = contested_prefix(RUN) + "0"


def _record(detail: dict[str, object], *, run_id: str = CID) -> LoadedRun:
    raws = [
        sequencer_event(run_id, 0, EventKind.RUN_STARTED, detail, "t"),
        sequencer_event(run_id, 1, EventKind.RUN_FINISHED, {}, "t"),
    ]
    return LoadedRun.of(seal_raws(raws, run_id))


def _run(*contested: LoadedRun) -> LoadedRun:
    return dataclasses.replace(LoadedRun.of(seal_raws(_signed(6), RUN)), contested=contested)


HIJACK = {"run_id": RUN, "seq": 3, "reason": "run-identity was hijacked: ...", "hijacked": True}


def test_a_run_verifies_without_a_record_and_fails_with_one() -> None:
    report = verify(_run(), agent_check=False)
    assert report.finished and not any(c.startswith("C ") for c in report.checks)
    with pytest.raises(ChainError, match=r"check C contested at seq 3 .*is hijacked") as exc:
        verify(_run(_record(HIJACK)), agent_check=False)
    assert exc.value.seq == 3 and CID in str(exc.value)


def test_a_plain_contest_fails_the_run_too() -> None:
    why = {"run_id": RUN, "seq": 0, "reason": "an unsigned claim"}
    with pytest.raises(ChainError, match=r"is contested: .*an unsigned claim"):
        verify(_run(_record(why)), agent_check=False)


def test_records_that_do_not_hold_or_name_another_run_are_set_aside() -> None:
    broken = _record(HIJACK)
    rows = [dict(r) for r in broken.records.rows]
    rows[1]["hash"] = bytes(32)  # the record's chain no longer links: not the log's
    broken = dataclasses.replace(broken, records=type(broken.records)(rows))
    other = _record({**HIJACK, "run_id": "another-run"})
    forged = LoadedRun.of(seal_raws(_signed(2), CID))  # not the sequencer's own events
    report = verify(_run(broken, other, forged), agent_check=False)
    assert sum("does not verify and is set aside" in w for w in report.warnings) == 2, report
    assert any(c.startswith("C contested") for c in report.checks), report.checks
