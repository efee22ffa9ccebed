"""``replay diff A B``: every difference between two runs, aligned, with the noise left out.

Two honest runs of one agent on one input differ at every clock read and random draw; compared
position by position they "diverge" at seq 1 and the real difference (a decision twenty
steps later) is never shown. So the runs are aligned like a keep-going re-run (``rerun.align``: by
kind, call site and ordinal), and what the investigator declares noise is skipped:
``ignore`` drops whole kinds of crossing (``clock``, ``random``, ``state``) from both runs,
``ignore_paths`` drops the fields under JSON paths (``$.response.output.took``;
``[*]`` and ``.*`` match any index or key). Every remaining difference is listed with its seq
in both runs. Timestamps, provenance and attributes are never compared.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from tracevault.errors import ConfigError
from tracevault.replayer._json_diff import MISSING, json_leaves, leaf_line, short_json
from tracevault.replayer._results import DivergenceReport
from tracevault.replayer.investigate.run_diff import RunDiffSide, summarize_run
from tracevault.replayer.rerun.align import Probe, RecordIndex, event_site, is_crossing
from tracevault.schemas import EventKind, TraceEvent

__all__ = ["IGNORABLE", "FieldDiff", "RunAlignment", "StepDiff", "align_runs", "parse_ignore"]

#: ``--ignore`` names and the kinds of crossing each drops.
IGNORABLE = {
    "clock": EventKind.CLOCK,
    "random": EventKind.RANDOM,
    "state": EventKind.EXTERNAL_STATE,
}


@dataclass(frozen=True, slots=True)
class FieldDiff:
    """One differing field: its JSON path and each run's value (short JSON, or None: absent)."""

    path: str
    a: str | None
    b: str | None

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "a": self.a, "b": self.b}


@dataclass(frozen=True, slots=True)
class StepDiff:
    """A step that differs: its seq in each run (None: the run has no such step)."""

    seq_a: int | None
    seq_b: int | None
    kind: str
    site: str | None
    reason: str
    fields: tuple[FieldDiff, ...]

    def lines(self) -> tuple[str, ...]:
        return tuple(
            leaf_line((f.path, MISSING if f.a is None else f.a, MISSING if f.b is None else f.b))
            for f in self.fields
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "seq_a": self.seq_a,
            "seq_b": self.seq_b,
            "kind": self.kind,
            "site": self.site,
            "reason": self.reason,
            "fields": [f.to_json() for f in self.fields],
        }


@dataclass(frozen=True, slots=True)
class RunAlignment:
    """Two runs aligned: ``differences`` is empty when they are the same (noise ignored)."""

    a: RunDiffSide
    b: RunDiffSide
    differences: tuple[StepDiff, ...]
    ignore: tuple[str, ...] = ()
    ignore_paths: tuple[str, ...] = ()

    @property
    def same(self) -> bool:
        return not self.differences

    @property
    def divergence(self) -> DivergenceReport | None:
        """The first difference, in the report shape of a re-run's divergence."""
        if not self.differences:
            return None
        d = self.differences[0]
        return DivergenceReport(
            run_id=self.a.run_id,
            seq=d.seq_a if d.seq_a is not None else d.seq_b or 0,
            expected=d.kind if d.seq_a is not None else None,
            actual=d.kind if d.seq_b is not None else None,
            reason=d.reason,
            diff=d.lines(),
            site=d.site,
        )

    def to_json(self) -> dict[str, Any]:
        first = self.divergence
        return {
            "same": self.same,
            "a": self.a.to_json(),
            "b": self.b.to_json(),
            "ignore": list(self.ignore),
            "ignore_paths": list(self.ignore_paths),
            "differences": [d.to_json() for d in self.differences],
            "divergence": None if first is None else first.to_json(),
        }


def _path_pattern(path: str) -> re.Pattern[str]:
    if not path.startswith("$"):
        raise ConfigError(f"--ignore-path {path!r} must be a JSON path from $ (e.g. $.response.x)")
    body = re.escape(path).replace(r"\[\*\]", r"\[\d+\]").replace(r"\.\*", r"\.[^.\[]+")
    return re.compile(f"^{body}(?=$|[.\\[])")


def parse_ignore(names: Iterable[str]) -> tuple[str, ...]:
    """``clock,random`` (and repeated flags) into the names, refusing an unknown one."""
    out: list[str] = []
    for name in (n.strip() for item in names for n in item.split(",")):
        if not name:
            continue
        if name not in IGNORABLE:
            raise ConfigError(f"--ignore {name!r}: choose from {', '.join(IGNORABLE)}")
        if name not in out:
            out.append(name)
    return tuple(out)


def _loads(data: bytes) -> Any:
    return json.loads(data) if data else None


def _view(ev: TraceEvent) -> dict[str, Any]:
    err = None if ev.error is None else {"type": ev.error.type, "message": ev.error.message}
    return {
        "model": ev.model,
        "seed": ev.seed,
        "request": _loads(ev.request),
        "response": _loads(ev.response),
        "error": err,
    }


def _show(value: Any) -> str | None:
    return None if value is MISSING else short_json(value)


class _Differ:
    def __init__(self, ignore_paths: Sequence[str]) -> None:
        self.patterns = [_path_pattern(p) for p in ignore_paths]

    def fields(self, a: TraceEvent | None, b: TraceEvent | None) -> tuple[FieldDiff, ...]:
        if a is None or b is None:  # a step only one run has: show what it asked
            a_req = None if a is None else short_json(_loads(a.request))
            b_req = None if b is None else short_json(_loads(b.request))
            return (FieldDiff("$.request", a_req, b_req),)
        return tuple(
            FieldDiff(path, _show(x), _show(y))
            for path, x, y in json_leaves(_view(a), _view(b))
            if not any(p.match(path) for p in self.patterns)
        )


def align_runs(
    a: Sequence[TraceEvent],
    b: Sequence[TraceEvent],
    *,
    ignore: Iterable[str] = (),
    ignore_paths: Iterable[str] = (),
) -> RunAlignment:
    """Align run ``b`` with run ``a`` and list every step that differs (``a`` = the record)."""
    skip = {IGNORABLE[n] for n in parse_ignore(ignore)}
    paths = tuple(ignore_paths)
    differ = _Differ(paths)
    index = RecordIndex(a, nested=True)
    for pos, ev in enumerate(a):
        if ev.kind in skip:
            index.taken[pos] = True
    keyed: list[tuple[tuple[float, int], StepDiff]] = []

    def add(key: tuple[float, int], ea: TraceEvent | None, eb: TraceEvent | None, why: str) -> None:
        fields = differ.fields(ea, eb)
        if fields:
            ev = ea if ea is not None else eb
            assert ev is not None
            step = StepDiff(
                None if ea is None else ea.seq,
                None if eb is None else eb.seq,
                ev.kind.value,
                event_site(ev),
                why,
                fields,
            )
            keyed.append((key, step))

    last_a = 0.0
    for eb in b:
        if eb.kind in skip:
            continue
        if not is_crossing(eb, nested=True):
            ea = _boundary(a, eb.kind)
            if ea is not None:
                last_a = float(ea.seq)
                add((last_a, eb.seq), ea, eb, f"the runs' {eb.kind.value} differ")
            else:
                add((last_a + 0.5, eb.seq), None, eb, f"only run B has {eb.kind.value}")
            continue
        probe = Probe(eb.kind, event_site(eb), eb.request, eb.model, eb.seed)
        taken = index.take(probe)
        if taken is None:
            add((last_a + 0.5, eb.seq), None, eb, f"only run B makes this {eb.kind.value} call")
            continue
        ea = a[taken]
        last_a = float(ea.seq)
        add((last_a, eb.seq), ea, eb, f"the {eb.kind.value} calls differ")
    for pos in index.untaken():
        ea = a[pos]
        add((float(ea.seq), -1), ea, None, f"only run A makes this {ea.kind.value} call")
    for ea in a:
        if (
            not is_crossing(ea, nested=True)
            and ea.kind not in skip
            and _boundary(b, ea.kind) is None
        ):
            add((float(ea.seq), -1), ea, None, f"only run A has {ea.kind.value}")
    keyed.sort(key=lambda kv: kv[0])
    return RunAlignment(
        summarize_run(a),
        summarize_run(b),
        tuple(step for _, step in keyed),
        parse_ignore(ignore),
        paths,
    )


def _boundary(events: Sequence[TraceEvent], kind: EventKind) -> TraceEvent | None:
    """The run's one RUN_STARTED, first ERROR or RUN_FINISHED (GAPs are matched in order)."""
    return next((e for e in events if e.kind is kind), None)
