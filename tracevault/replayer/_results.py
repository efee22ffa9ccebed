"""Typed, frozen results of the replayer: what was loaded, verified, re-run and where it diverged.

Results are plain frozen dataclasses with ``to_json()`` so the CLI's ``--json`` output, the
batch workers (which send results across processes) and the evidence bundle share one shape.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from tracevault.archive.layout import FinalReceipt, SegmentReceipt
from tracevault.replayer._json_diff import short_json
from tracevault.replayer._records import SealedRows
from tracevault.schemas import (
    ErrorInfo,
    EventKind,
    EventModel,
    SealedEvent,
    TraceEvent,
    micros_to_datetime,
)
from tracevault.transparency import FoundCheckpoint, RunLogEvidence

__all__ = [
    "DivergenceReport",
    "DlqCopy",
    "LoadedRun",
    "NextCall",
    "Record",
    "ReplayResult",
    "SegmentInfo",
    "StepSummary",
    "VerifyReport",
    "event_json",
    "summarize",
]

Source = Literal["topic", "archive", "bundle", "memory"]


@dataclass(frozen=True, slots=True)
class DlqCopy:
    """One of the run's records in ``<prefix>.dlq``: where it is, the raw record its headers
    say it copies, and its value. Not evidence (the DLQ is not signed, and its headers are
    anyone's): a hijacked run's copies are checked against its agent's notes and the
    contested record's pins before any is called the agent's (docs/identity.md)."""

    raw: str
    dlq: str
    value: bytes | None


@dataclass(frozen=True, slots=True)
class NextCall:
    """The crossing the agent asked for when ``until`` stopped it (RUN_FINISHED: it returned)."""

    kind: str
    request: Any
    model: str | None = None
    seed: int | None = None
    site: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "request": self.request,
            "model": self.model,
            "seed": self.seed,
            "site": self.site,
        }


def _payload(data: bytes) -> Any:
    try:
        return json.loads(data) if data else None
    except ValueError:
        return f"<{len(data)} bytes, not JSON>"


def event_json(ev: TraceEvent) -> dict[str, Any]:
    """One whole event as JSON (payloads parsed), as ``replay show --json`` prints it."""
    return EventModel.from_event(ev).model_dump(mode="json")


def summarize(ev: TraceEvent, limit: int = 60) -> tuple[str, str]:
    """Short human summaries of an event's request and response (never the whole payload)."""
    req = _payload(ev.request)
    resp = _payload(ev.response)
    if ev.kind is EventKind.TOOL_CALL and isinstance(req, dict):
        r = f"{req.get('tool')}({short_json(req.get('args'), limit)})"
    elif ev.kind in (EventKind.CLOCK, EventKind.RANDOM, EventKind.EXTERNAL_STATE) and isinstance(
        req, dict
    ):
        r = str(req.get("name"))
    else:
        r = short_json(req, limit)
    if ev.error is not None:
        s = f"raised {ev.error.type}: {ev.error.message}"[:limit]
    else:
        s = short_json(resp, limit)
    return r, s


@dataclass(frozen=True, slots=True)
class StepSummary:
    """One line of a run's timeline."""

    seq: int
    kind: str
    at: int
    model: str | None
    seed: int | None
    request: str
    response: str

    @classmethod
    def of(cls, ev: TraceEvent) -> StepSummary:
        req, resp = summarize(ev)
        return cls(ev.seq, ev.kind.value, ev.at, ev.model, ev.seed, req, resp)

    @property
    def at_iso(self) -> str:
        return micros_to_datetime(self.at).isoformat()

    @property
    def at_time(self) -> str:
        """``HH:MM:SS.ffffff`` UTC, for timelines."""
        return micros_to_datetime(self.at).strftime("%H:%M:%S.%f")

    def to_json(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "kind": self.kind,
            "at": self.at,
            "at_iso": self.at_iso,
            "model": self.model,
            "seed": self.seed,
            "request": self.request,
            "response": self.response,
        }


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    """One archived segment as read: its key, its bytes' SHA-256, its receipt if any."""

    key: str
    first_seq: int
    last_seq: int
    sha256: str
    size: int
    receipt_key: str
    receipt: SegmentReceipt | None
    receipt_bytes: bytes | None
    count: int


@dataclass(frozen=True, slots=True)
class LoadedRun:
    """A run's sealed records as read from one source, in the order the source returned them.

    ``objects[i]`` names where ``records[i]`` came from (an archive segment key, or
    ``<topic>[<partition>]@<offset>``) so verification can name the object of a bad seq.
    Nothing here has been verified yet: pass it to :func:`tracevault.replayer.verify`.
    """

    run_id: str
    source: Source
    records: SealedRows
    objects: Sequence[str]
    segments: tuple[SegmentInfo, ...] = ()
    final_receipt: FinalReceipt | None = None
    final_receipt_key: str | None = None
    final_receipt_bytes: bytes | None = None
    expected_last_seq: int | None = None
    expected_finished: bool | None = None
    expected_head: bytes | None = None
    expected_gaps: tuple[tuple[int, int], ...] = ()
    #: The signed log (docs/log.md): ready evidence (a bundle, the archive's tiles), or the
    #: origin and checkpoint records read beside the run (the topic), gathered by ``verify``.
    log_evidence: RunLogEvidence | None = None
    log_origin: str | None = None
    log_checkpoints: tuple[FoundCheckpoint, ...] = ()
    #: The static-log archive's index objects of the run, and the chain head the last one
    #: states when the run finished (check A4).
    log_index_keys: tuple[str, ...] = ()
    log_head: str | None = None
    #: The sequencer's contested records naming this run (``tracevault.contested:…``, found
    #: by the run's id), each loaded like a run: verify checks them and fails the run on one
    #: that holds (docs/identity.md, "A hijack is named as one").
    contested: tuple[LoadedRun, ...] = ()
    #: The run's refused events where the source has a DLQ (the topic), read back when a
    #: contested record names the run: a hijack's genuine events are checked against the
    #: agent's notes there (``load._recover``). Not evidence until they check.
    dlq_copies: tuple[DlqCopy, ...] = ()
    #: whether the DLQ was read (False: the source has none, or it could not be read)
    dlq_read: bool = False

    def __len__(self) -> int:
        return len(self.records)

    @classmethod
    def of(cls, records: Sequence[SealedEvent], *, run_id: str | None = None) -> LoadedRun:
        """A run from sealed records in hand (tests, other tools); verified like any other."""
        rid = run_id if run_id is not None else (records[0].run_id if records else "")
        return cls(
            run_id=rid,
            source="memory",
            records=SealedRows.of(records),
            objects=[f"record[{i}]" for i in range(len(records))],
        )


def _provenance_passes(provenance: str) -> bool:
    """Check I held, or the caller waived it knowingly (``--no-agent-check``)."""
    return provenance == "verified" or provenance.startswith("not checked")


@dataclass(frozen=True, slots=True)
class VerifyReport:
    """A run whose checks passed: the numbered checks and what the run is.

    ``finished`` is False for a run still in progress (or cut short): it verifies, but it is
    reported as unfinished. ``gaps`` lists the seqs of GAP markers the sequencer sealed in.
    Without ``log_checked`` (no trusted log key) the status is ``unverified`` unless the
    caller waived the log (``chain_only``): docs/log.md, "Verify fails closed".
    """

    run_id: str
    source: str
    count: int
    last_seq: int
    head: str
    finished: bool
    checks: tuple[str, ...]
    gaps: tuple[int, ...] = ()
    warnings: tuple[str, ...] = ()
    events: Sequence[TraceEvent] = field(default=(), repr=False, compare=False)
    #: True when L1-L4 held against trusted keys; ``checkpoint`` is the one they held against.
    log_checked: bool = False
    checkpoint: str | None = None
    log_evidence: RunLogEvidence | None = field(default=None, repr=False, compare=False)
    #: The caller waived the signed log (``--no-log-check``): the chain alone was checked.
    chain_only: bool = False
    #: Check I's verdict (``load/_identity``): ``verified``, ``unverified`` (no trusted agent
    #: vkey), ``not checked`` (``--no-agent-check``) or ``recorded before agent identity``.
    provenance: str = "unverified"
    #: Check L5's verdict (``load/fresh``) for an archive read with trusted log keys:
    #: ``fresh``, ``unverified`` (nothing proved the archive current), ``not checked
    #: (offline)`` (accepted knowingly) or ``not applicable`` (another source, no log key).
    freshness: str = "not applicable"

    @property
    def ok(self) -> bool:
        """Whether the report may be called a pass: the log held (or the caller waived it)
        and so did provenance (or the caller waived check I).

        Without a trusted log key the chain proves nothing against whoever can write the
        store (anyone can recompute SHA-256), and without a trusted agent vkey nothing says
        who wrote the events, so such a report is ``unverified``: fail closed. So is an
        archive nothing proved current (check L5 compared nothing with the topic): a rolled
        back archive verifies by itself.
        """
        return (
            (self.log_checked or self.chain_only)
            and _provenance_passes(self.provenance)
            and self.freshness != "unverified"
        )

    @property
    def status(self) -> str:
        if not self.ok:
            stale = (self.log_checked or self.chain_only) and _provenance_passes(self.provenance)
            return "unverified freshness" if stale else "unverified"
        what = "verified" if self.log_checked else "chain only"
        if self.provenance != "verified":
            # never "verified" alone: the log held, who wrote the events was not proven
            what = f"{'log verified' if self.log_checked else what}, provenance {self.provenance}"
        if self.freshness.startswith("not checked"):
            what = f"{what}, freshness {self.freshness}"
        if self.gaps:
            return f"{what}, with gaps"
        return what if self.finished else f"{what}, unfinished"

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "source": self.source,
            "ok": self.ok,
            "status": self.status,
            "count": self.count,
            "last_seq": self.last_seq,
            "head": self.head,
            "finished": self.finished,
            "gaps": list(self.gaps),
            "checks": list(self.checks),
            "warnings": list(self.warnings),
            "log_checked": self.log_checked,
            "chain_only": self.chain_only,
            "provenance": self.provenance,
            "freshness": self.freshness,
            "checkpoint": self.checkpoint,
        }


@dataclass(frozen=True, slots=True)
class Record:
    """A run a command takes as the record (``replay run``, ``diff``, ``export --otel``):
    ``events`` decoded in ``verify``'s one walk, or read lazily and unchecked under
    ``--no-verify``; ``head`` the chain's last hash (hex), ``status`` the verify report's
    (``verified``, ...) or ``not verified (--no-verify)``. ``settings`` are the
    ``Settings`` it was read with (they open its content)."""

    settings: Any
    run: LoadedRun
    events: Sequence[TraceEvent]
    head: str
    status: str


@dataclass(frozen=True, slots=True)
class DivergenceReport:
    """Where a re-run left the record: seq, kinds, JSON-path diff and what the record had next."""

    run_id: str
    seq: int
    expected: str | None
    actual: str | None
    reason: str
    diff: tuple[str, ...]
    expected_request: Any = None
    actual_request: Any = None
    next_in_record: tuple[StepSummary, ...] = ()
    site: str | None = None  # the agent's call site (``tracevault.callsite``), when known

    def render(self) -> str:
        """The report as plain text (the ReplayDivergence message)."""
        lines = [
            f"run {self.run_id} diverged at seq {self.seq}: {self.reason}",
            f"  expected kind: {self.expected or '(end of record)'}",
            f"  actual kind:   {self.actual or '(agent made no further call)'}",
        ]
        if self.site:
            lines.append(f"  call site:     {self.site}")
        if self.diff:
            lines.append("  differences:")
            lines.extend(f"    {d}" for d in self.diff)
        if self.next_in_record:
            lines.append("  the record says came next:")
            lines.extend(
                f"    seq {s.seq} {s.kind}"
                + (f" model={s.model}" if s.model else "")
                + f" {s.request} -> {s.response}"
                for s in self.next_in_record
            )
        else:
            lines.append("  the record has nothing after this point")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "seq": self.seq,
            "expected": self.expected,
            "actual": self.actual,
            "reason": self.reason,
            "diff": list(self.diff),
            "expected_request": self.expected_request,
            "actual_request": self.actual_request,
            "next_in_record": [s.to_json() for s in self.next_in_record],
            "site": self.site,
        }


@dataclass(frozen=True, slots=True)
class ReplayResult:
    """The outcome of a re-run.

    ``matched`` is True when every crossing and the final output (or the agent's error) were
    as recorded; with ``until`` the run stopped after seq ``until`` (``stopped``) and the
    output is not compared. ``served`` are the recorded events handed to the agent, in order.
    """

    run_id: str
    matched: bool
    steps: int
    until: int | None
    stopped: bool
    output: Any = None
    error: ErrorInfo | None = None
    divergence: DivergenceReport | None = None
    served: tuple[TraceEvent, ...] = field(default=(), repr=False, compare=False)
    #: with ``keep_going``: every divergence, in seq order (``divergence`` is the first)
    divergences: tuple[DivergenceReport, ...] = ()
    #: with ``until``: the crossing the agent asked for when it was stopped
    next_call: NextCall | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "matched": self.matched,
            "steps": self.steps,
            "until": self.until,
            "stopped": self.stopped,
            "output": self.output,
            "error": None
            if self.error is None
            else {"type": self.error.type, "message": self.error.message},
            "divergence": None if self.divergence is None else self.divergence.to_json(),
            "divergences": [d.to_json() for d in self.divergences],
            **(
                {}
                if self.until is None
                else {
                    "served": [event_json(e) for e in self.served],
                    "next_call": None if self.next_call is None else self.next_call.to_json(),
                }
            ),
        }
