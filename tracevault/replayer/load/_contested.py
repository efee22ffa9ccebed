"""Check C (contested): a record the sequencer sealed against the run fails it.

When a run's provenance fails at the sequencer (docs/identity.md) it seals a contested record
of its own into the signed log, naming the run, the seq and why; a hijack's record also says
where the agent's own events went (the DLQ, and the raw records it copied). The loader finds
the records naming a run by its id (``LoadedRun.contested``). Each is verified like any run
under the same log policy (a record the log does not hold, a storage admin's addition, is
named and set aside); one that holds fails the run, with the log key alone: an auditor
without the agent vkeys still learns what the sequencer saw. A hijack is named whatever check
I says: check I sees only the sealed chain, so after a flood it would blame the seqs before
the hijack (which the agent's note in the DLQ covers); what it finds from the hijack's seq
on is quoted beside the record. Another contest fails the run after check I (which names the
seqs itself where it has the agent vkeys).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tracevault.errors import ChainError, LogError, SchemaError
from tracevault.replayer._results import LoadedRun
from tracevault.replayer.load._erasure import failure_detail
from tracevault.replayer.load._identity import SEQUENCER_AGENT_ID
from tracevault.replayer.load._recover import Genuine, recovery
from tracevault.replayer.load.checks import fail
from tracevault.schemas import decode_event
from tracevault.transparency import AgentKeys

__all__ = ["CONTESTED_CHECK", "Contest", "contests"]

CONTESTED_CHECK = "C contested: no record the sequencer sealed in the log contests the run"
_CHECK = "C contested"


@dataclass(frozen=True, slots=True)
class Contest:
    """One contested record naming the run, verified."""

    record: str
    seq: int
    reason: str
    hijacked: bool
    #: the agent's own events the record names (a hijack's): seq, raw record, pinned bytes
    genuine: tuple[Genuine, ...] = ()

    def error(
        self, run: LoadedRun, also: ChainError | None = None, agents: AgentKeys | None = None
    ) -> ChainError:
        """The failure naming the record; ``also``: what check I found from the seq the
        record names on (it names the agent's seqs exactly where it has the agent vkeys);
        for a hijack, what the DLQ holds of the agent's own run, checked against its notes
        under ``agents`` (``_recover``)."""
        what = "hijacked" if self.hijacked else "contested"
        agrees = ""
        if also is not None and also.seq is not None and also.seq >= self.seq:
            agrees = f"; check I agrees: {failure_detail(also)}"
        if self.hijacked:
            agrees += "; " + recovery(run, self.seq, self.genuine, agents)
        return fail(
            _CHECK,
            self.seq,
            self.record,
            f"run {run.run_id} is {what}: the sequencer's contested record {self.record}, "
            f"sealed in the signed log, says: {self.reason}{agrees}",
        )


def contests(
    run: LoadedRun, check: Callable[[LoadedRun], object]
) -> tuple[list[Contest], list[str]]:
    """(the records naming ``run`` that hold under ``check``, warnings for the others)."""
    found: list[Contest] = []
    warnings: list[str] = []
    for rec in run.contested:
        try:
            check(rec)
            detail = _detail(rec)
        except (ChainError, LogError, SchemaError) as exc:
            warnings.append(
                f"a contested record naming the run, {rec.run_id}, does not verify and is set "
                f"aside: {exc}"
            )
            continue
        if detail.get("run_id") != run.run_id:
            continue
        seq = detail.get("seq")
        genuine = detail.get("genuine")
        found.append(
            Contest(
                rec.run_id,
                seq if isinstance(seq, int) else 0,
                str(detail.get("reason", "")),
                detail.get("hijacked") is True,
                tuple(
                    Genuine(
                        g["seq"],
                        g["raw"],
                        g["sha256"] if isinstance(g.get("sha256"), str) else None,
                    )
                    for g in (genuine if isinstance(genuine, list) else ())
                    if isinstance(g, dict)
                    and isinstance(g.get("seq"), int)
                    and isinstance(g.get("raw"), str)
                ),
            )
        )
    return sorted(found, key=lambda c: (not c.hijacked, c.seq)), warnings


def _detail(rec: LoadedRun) -> dict[str, Any]:
    """The record's RUN_STARTED request (what it contests)."""
    raw = rec.records.rows[0]["raw"] if len(rec.records) else b""
    try:
        ev = decode_event(raw, check_json=False)
        detail = json.loads(ev.request)
    except ValueError as exc:
        raise SchemaError(f"{rec.run_id} seq 0 is not a contested record: {exc}") from None
    if not isinstance(detail, dict) or ev.agent.agent_id != SEQUENCER_AGENT_ID:
        raise SchemaError(f"{rec.run_id} seq 0 is not a record the sequencer wrote")
    return detail
