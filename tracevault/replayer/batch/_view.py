"""The batch report for a person: the runs that need a look, the divergence groups, totals.

Laid out to read at 80 columns: long run ids and details fold under their own column, never
cut mid-word. A window of thousands of runs lists only the runs that did not match.
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from tracevault.replayer.batch._report import BatchReport

__all__ = ["print_batch"]

ALL_RUNS_UP_TO = 100  # above this many runs, list only those that did not match
_COLOUR = {"ok": "green", "diverged": "red", "verify_failed": "red", "error": "yellow"}


def _runs_table(report: BatchReport) -> Table | None:
    items = report.items
    title = f"replay of runs archived {report.since} .. {report.until}"
    if len(items) > ALL_RUNS_UP_TO:
        items = tuple(it for it in items if it.status != "ok")[:ALL_RUNS_UP_TO]
        title += f" (the first {len(items)} that did not match)"
    if not items:
        return None
    # The detail sits under its run id, so at 80 columns neither is cut mid-word.
    t = Table(title=title)
    t.add_column("run, detail", overflow="fold", ratio=1)
    t.add_column("status", no_wrap=True)
    for col in ("events", "served", "seq"):
        t.add_column(col, justify="right", no_wrap=True)
    for it in items:
        cell = Text(it.run_id)
        if it.detail:
            cell.append("\n" + it.detail.splitlines()[0], style="dim")
        t.add_row(
            cell,
            f"[{_COLOUR[it.status]}]{it.status}[/]",
            str(it.count),
            str(it.steps),
            "" if it.seq is None else str(it.seq),
        )
    return t


def _groups_table(report: BatchReport) -> Table | None:
    groups = report.groups
    if not groups:
        return None
    t = Table(title="diverged runs, by first divergence")
    t.add_column("kind, JSON path", overflow="fold", ratio=2)
    t.add_column("runs", justify="right", no_wrap=True)
    t.add_column("seq", overflow="fold", ratio=1)
    t.add_column("examples", overflow="fold", ratio=2)
    for g in groups:
        seqs = ", ".join(map(str, g.seqs[:5])) + (", …" if len(g.seqs) > 5 else "")
        t.add_row(f"{g.kind}\n{g.path}", str(g.count), seqs, "\n".join(g.examples))
    return t


def print_batch(report: BatchReport, console: Console) -> None:
    for table in (_runs_table(report), _groups_table(report)):
        if table is not None:
            console.print(table)
    console.print(" ".join(f"{k}={v}" for k, v in report.totals().items()))
    console.print(f"on {report.engine} in {report.seconds:.1f}s", style="dim")
