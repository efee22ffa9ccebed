"""Where two recorded runs first diverge, in the same report shape as a re-run's divergence.

Seq 0 (RUN_STARTED) is compared like any step, so two runs of the same agent on different
inputs diverge at seq 0 with the input's JSON path. Timestamps (``at``), provenance and
attributes are not compared: two honest runs never share them.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tracevault.replayer._json_diff import json_diff, short_json
from tracevault.replayer._results import DivergenceReport, StepSummary
from tracevault.replayer.rerun.edges import NEXT_SHOWN
from tracevault.schemas import EventKind, TraceEvent

__all__ = ["RunDiff", "RunDiffSide", "diff_runs", "summarize_run"]


def _loads(data: bytes) -> Any:
    return json.loads(data) if data else None


@dataclass(frozen=True, slots=True)
class RunDiffSide:
    """One side of `replay diff`: what a run is in one line (size, kinds, models, outcome)."""

    run_id: str
    count: int
    finished: bool
    kinds: dict[str, int]
    models: tuple[str, ...]
    agent: str
    output: Any = None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "count": self.count,
            "finished": self.finished,
            "kinds": self.kinds,
            "models": list(self.models),
            "agent": self.agent,
            "output": self.output,
            "error": self.error,
        }


def summarize_run(events: Sequence[TraceEvent]) -> RunDiffSide:
    kinds = Counter(e.kind.value for e in events)
    models = tuple(sorted({e.model for e in events if e.model}))
    last = events[-1] if events else None
    finished = last is not None and last.kind is EventKind.RUN_FINISHED
    output = None
    error = None
    if finished and last is not None:
        resp = _loads(last.response)
        output = resp.get("output") if isinstance(resp, dict) else None
        if last.error is not None:
            error = f"{last.error.type}: {last.error.message}"
    first = events[0] if events else None
    agent = "" if first is None else f"{first.agent.agent_id} {first.agent.agent_version}"
    return RunDiffSide(
        run_id=first.run_id if first else "",
        count=len(events),
        finished=finished,
        kinds=dict(sorted(kinds.items())),
        models=models,
        agent=agent,
        output=output,
        error=error,
    )


@dataclass(frozen=True, slots=True)
class RunDiff:
    """Two runs compared: ``divergence`` is None when every step is the same."""

    a: RunDiffSide
    b: RunDiffSide
    divergence: DivergenceReport | None

    @property
    def same(self) -> bool:
        return self.divergence is None

    def to_json(self) -> dict[str, Any]:
        return {
            "same": self.same,
            "a": self.a.to_json(),
            "b": self.b.to_json(),
            "divergence": None if self.divergence is None else self.divergence.to_json(),
        }


def _step_diff(a: TraceEvent, b: TraceEvent) -> tuple[str, tuple[str, ...]] | None:
    if a.kind is not b.kind:
        return (
            f"run A has {a.kind.value} where run B has {b.kind.value}",
            json_diff(_loads(a.request), _loads(b.request), "$.request"),
        )
    lines: list[str] = []
    if a.model != b.model:
        lines.append(f"$.model: expected {short_json(a.model)}, got {short_json(b.model)}")
    if a.seed != b.seed:
        lines.append(f"$.seed: expected {short_json(a.seed)}, got {short_json(b.seed)}")
    if a.request != b.request:
        lines += json_diff(_loads(a.request), _loads(b.request), "$.request")
    if lines:
        return f"the {a.kind.value} calls differ", tuple(lines)
    ea = None if a.error is None else {"type": a.error.type, "message": a.error.message}
    eb = None if b.error is None else {"type": b.error.type, "message": b.error.message}
    if ea != eb:
        return f"the {a.kind.value} calls raised differently", json_diff(
            {"error": ea}, {"error": eb}
        )
    if a.response != b.response:
        resp = json_diff(_loads(a.response), _loads(b.response), "$.response")
        return f"the {a.kind.value} calls got different responses", resp
    return None


def diff_runs(a: Sequence[TraceEvent], b: Sequence[TraceEvent]) -> RunDiff:
    """Compare two runs step by step; the first difference is reported as run A = expected."""
    report: DivergenceReport | None = None
    run_a = a[0].run_id if a else ""
    n = min(len(a), len(b))
    for i in range(n):
        found = _step_diff(a[i], b[i])
        if found is not None:
            reason, lines = found
            report = DivergenceReport(
                run_id=run_a,
                seq=a[i].seq,
                expected=a[i].kind.value,
                actual=b[i].kind.value,
                reason=reason,
                diff=lines,
                expected_request=_loads(a[i].request),
                actual_request=_loads(b[i].request),
                next_in_record=tuple(StepSummary.of(e) for e in a[i : i + NEXT_SHOWN]),
            )
            break
    if report is None and len(a) != len(b):
        longer, which = (a, "A") if len(a) > len(b) else (b, "B")
        report = DivergenceReport(
            run_id=run_a,
            seq=n,
            expected=a[n].kind.value if len(a) > n else None,
            actual=b[n].kind.value if len(b) > n else None,
            reason=f"run {which} goes on after the other ends at seq {n - 1}",
            diff=(),
            next_in_record=tuple(StepSummary.of(e) for e in longer[n : n + NEXT_SHOWN]),
        )
    return RunDiff(summarize_run(a), summarize_run(b), report)
