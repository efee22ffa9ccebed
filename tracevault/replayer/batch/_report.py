"""What a batch replay found: one :class:`BatchItem` per run and the report over all of them.

Items cross process and machine boundaries (local worker processes, Dask workers), so they
are frozen dataclasses of plain values, never live objects. The report answers the regression
question "which recorded runs would this agent do differently?" by grouping the diverged runs
by their first divergence: the kind of the recorded event at that seq and the first JSON path
that differs (docs/replay-batch.md).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date
from typing import Any, Literal

__all__ = ["EXAMPLES", "BatchItem", "BatchReport", "DivergenceGroup", "group_divergences"]

Status = Literal["ok", "diverged", "verify_failed", "error"]

EXAMPLES = 3  # example run ids kept per divergence group


@dataclass(frozen=True, slots=True)
class BatchItem:
    """One run's outcome: ``seq`` is the divergent or first bad seq, ``detail`` says why.

    ``seconds`` is the time the worker spent on this run (load, verify, re-run): what the
    engine's own overhead is measured against.
    """

    run_id: str
    status: Status
    count: int = 0
    steps: int = 0
    seq: int | None = None
    obj: str | None = None
    detail: str = ""
    divergence: dict[str, Any] | None = None
    seconds: float = 0.0

    @property
    def first_divergence(self) -> tuple[str, str] | None:
        """``(kind, JSON path)`` of the first difference, or None if the run did not diverge.

        The kind is the recorded event's at the divergent seq (``end of record`` when the
        re-run went past it); the path is ``$.kind`` when the re-run made another kind of
        call there, else the first differing field, ``$`` when nothing narrower is known.
        """
        d = self.divergence
        if self.status != "diverged" or d is None:
            return None
        expected, actual = d.get("expected"), d.get("actual")
        kind = str(expected) if expected else "end of record"
        diff = d.get("diff") or ()
        if expected != actual:
            path = "$.kind"
        elif diff and str(diff[0]).startswith("$"):
            path = str(diff[0]).split(": ", 1)[0]
        else:
            path = "$"
        return kind, path

    def to_json(self) -> dict[str, Any]:
        first = self.first_divergence
        return {
            "run_id": self.run_id,
            "status": self.status,
            "count": self.count,
            "steps": self.steps,
            "seq": self.seq,
            "object": self.obj,
            "detail": self.detail,
            "first_divergence": None
            if first is None
            else {"kind": first[0], "path": first[1], "seq": self.seq},
            "divergence": self.divergence,
            "seconds": round(self.seconds, 6),
        }


@dataclass(frozen=True, slots=True)
class DivergenceGroup:
    """The diverged runs that first left the record at the same (kind, JSON path)."""

    kind: str
    path: str
    count: int
    seqs: tuple[int, ...]
    examples: tuple[str, ...]
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "path": self.path,
            "count": self.count,
            "seqs": list(self.seqs),
            "examples": list(self.examples),
            "reason": self.reason,
        }


def group_divergences(items: Iterable[BatchItem]) -> tuple[DivergenceGroup, ...]:
    """Diverged runs grouped by first divergence, largest group first (ties by kind, path)."""
    runs: dict[tuple[str, str], list[BatchItem]] = {}
    for it in items:
        key = it.first_divergence
        if key is not None:
            runs.setdefault(key, []).append(it)
    groups = [
        DivergenceGroup(
            kind=kind,
            path=path,
            count=len(members),
            seqs=tuple(sorted({m.seq for m in members if m.seq is not None})),
            examples=tuple(m.run_id for m in members[:EXAMPLES]),
            reason=members[0].detail,
        )
        for (kind, path), members in runs.items()
    ]
    return tuple(sorted(groups, key=lambda g: (-g.count, g.kind, g.path)))


@dataclass(frozen=True, slots=True)
class BatchReport:
    """Every run of a window, in the order the day index listed them, and how it was run."""

    since: date
    until: date
    agent: str
    items: tuple[BatchItem, ...] = field(default=())
    engine: str = "local"
    seconds: float = 0.0

    def totals(self) -> dict[str, int]:
        out = {"runs": len(self.items), "ok": 0, "diverged": 0, "verify_failed": 0, "error": 0}
        for it in self.items:
            out[it.status] += 1
        return out

    @property
    def ok(self) -> bool:
        return all(it.status == "ok" for it in self.items)

    @property
    def groups(self) -> tuple[DivergenceGroup, ...]:
        return group_divergences(self.items)

    def to_json(self) -> dict[str, Any]:
        return {
            "since": self.since.isoformat(),
            "until": self.until.isoformat(),
            "agent": self.agent,
            "engine": self.engine,
            "seconds": round(self.seconds, 3),
            "ok": self.ok,
            "totals": self.totals(),
            "groups": [g.to_json() for g in self.groups],
            "runs": [it.to_json() for it in self.items],
        }
