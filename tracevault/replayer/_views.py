"""What ``tracevault replay`` prints: the rich tables, trees and panels of its commands.

Views only read the results they are given and print or return them; the commands
(``commands``) decide what to load, run and exit with. Every table stays readable at 80
columns (tests/test_narrow_terminal.py).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from tracevault._clitools import echo_json, stderr, stdout
from tracevault.errors import ChainError, LogError
from tracevault.replayer._json_diff import short_json
from tracevault.replayer._results import (
    DivergenceReport,
    ReplayResult,
    StepSummary,
    VerifyReport,
)
from tracevault.replayer._timeline import steps_table
from tracevault.replayer.investigate.aligned_diff import RunAlignment
from tracevault.replayer.investigate.run_diff import RunDiffSide
from tracevault.replayer.investigate.tree import RunNode, TreeReplay
from tracevault.replayer.load.log_policy import CHAIN_ONLY, UNVERIFIED, UNVERIFIED_PROVENANCE
from tracevault.replayer.load.trust import unverified_freshness
from tracevault.schemas import EventModel, TraceEvent

__all__ = [
    "chain_failure",
    "print_events",
    "differences_table",
    "divergence_panel",
    "divergences_table",
    "plural",
    "print_verified",
    "progress_bar",
    "replay_tree_view",
    "run_tree_view",
    "state_at",
    "summary_table",
    "verify_table",
]


def run_tree_view(node: RunNode) -> Tree:
    def label(n: RunNode) -> Text:
        text = Text(f"run {n.run_id}", style="bold")
        done = "finished" if n.finished else "unfinished"
        text.append(f"  {n.agent}, {n.count} events, {done}")
        if n.forked_from is not None:
            text.append(f"\nforked from {n.forked_from[0]} at seq {n.forked_from[1]}", style="dim")
        if n.parent is not None:
            text.append(f"\nchild of {n.parent[0]} at seq {n.parent[1]}", style="dim")
        return text

    def add(tree: Tree, n: RunNode) -> None:
        for child, sub in n.children:
            head = Text(f"seq {child.seq} subagent {child.name} → ", style="cyan")
            if isinstance(sub, str):
                tree.add(head + Text(f"{child.run_id}: {sub}", style="yellow"))
            else:
                add(tree.add(head + label(sub)), sub)

    root = Tree(label(node))
    add(root, node)
    return root


def verify_table(report: VerifyReport) -> Table:
    t = Table(title=f"run {report.run_id}: {report.status} ({report.source})")
    t.add_column("check")
    t.add_column("result")
    for c in report.checks:
        t.add_row(c, "[green]ok[/]")
    return t


def unverified_why(report: VerifyReport) -> str:
    """Why ``report`` is ``unverified``: no trusted log key, provenance or freshness not
    proven."""
    if not (report.log_checked or report.chain_only):
        return UNVERIFIED
    if report.freshness == "unverified":
        return str(unverified_freshness(report.run_id))
    why = (
        f"run {report.run_id} was {report.provenance}"
        if report.provenance != "unverified"
        else "no trusted agent vkey was given"
    )
    return UNVERIFIED_PROVENANCE.format(why=why)


def print_verified(report: VerifyReport, as_json: bool) -> None:
    """The report; an ``unverified`` one (no trusted log key or agent vkey, or an archive
    nothing proved current) says why, in text and JSON."""
    if as_json:
        out = report.to_json()
        if not report.ok:
            out["error"] = unverified_why(report)
        echo_json(out)
        return
    stdout.print(verify_table(report))
    stdout.print(
        f"{report.count} events, seq 0..{report.last_seq}, head {report.head[:16]}…, "
        f"finished: {report.finished}"
    )
    if report.checkpoint:
        stdout.print(f"signed log: checkpoint {report.checkpoint}")
    for w in report.warnings:
        stdout.print(f"[yellow]warning:[/] {w}")
    if report.chain_only:
        stdout.print(f"[yellow bold]chain only:[/] {CHAIN_ONLY}")
    if not report.ok:
        stdout.print(f"[red bold]{unverified_why(report)}[/]")


def divergence_panel(d: DivergenceReport) -> None:
    stdout.print(f"[red bold]diverged at seq {d.seq}[/]: {d.reason}")
    t = Table(show_header=False)
    t.add_column("")
    t.add_column("", overflow="fold")
    t.add_row("expected kind", d.expected or "(end of record)")
    t.add_row("actual kind", d.actual or "(no further call)")
    for line in d.diff:
        t.add_row("diff", line)
    stdout.print(t)
    if d.next_in_record:
        stdout.print(
            steps_table(
                d.next_in_record,
                title="what the record says came next",
                width=stdout.width,
                with_time=False,
            )
        )


def plural(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def divergences_table(run_id: str, found: tuple[DivergenceReport, ...]) -> Table:
    """Every divergence of a keep-going re-run, one row each, readable at 80 columns."""
    t = Table(title=f"run {run_id}: {plural(len(found), 'divergence')}", show_lines=True)
    t.add_column("seq", justify="right", no_wrap=True)
    t.add_column("record → re-run", no_wrap=True)
    t.add_column("what, where, differences", overflow="fold", ratio=1)
    for d in found:
        cell = Text(d.reason)
        if d.site:
            cell.append(f"\nat {d.site}", style="dim")
        for line in d.diff[:5]:
            cell.append(f"\n{line}")
        kinds = f"{d.expected or '(none)'}\n→ {d.actual or '(none)'}"
        t.add_row(str(d.seq), kinds, cell)
    return t


def state_at(run_id: str, result: ReplayResult, record_next: Any) -> None:
    """``--until N``: the timeline served up to N, the agent's next call, the record's."""
    title = f"run {run_id}: served up to seq {result.until} (the state at step {result.until})"
    served = (StepSummary.of(ev) for ev in result.served)
    stdout.print(steps_table(served, title=title, width=stdout.width, with_time=False))
    asked = result.next_call
    t = Table(title="what comes next", show_header=False, show_lines=True)
    t.add_column("", no_wrap=True)
    t.add_column("", overflow="fold", ratio=1)
    if asked is None:
        t.add_row("the agent", "(asked for nothing more)")
    else:
        cell = Text(asked.kind, style="bold")
        if asked.model:
            cell.append(f" {asked.model}")
        cell.append(f"\n{short_json(asked.request, 300)}")
        if asked.site:
            cell.append(f"\nat {asked.site}", style="dim")
        t.add_row("the agent\nasked for", cell)
    if record_next is not None:
        s = StepSummary.of(record_next)
        t.add_row(f"the record\nseq {s.seq}", Text(f"{s.kind}\n{s.request}\n← {s.response}"))
    stdout.print(t)


def replay_tree_view(run_id: str, tree: TreeReplay) -> Tree:
    def label(rid: str, t: TreeReplay) -> Text:
        r = t.result
        seq = "?" if r.divergence is None else r.divergence.seq
        ok = "[green]matched[/]" if r.matched else f"[red]diverged at seq {seq}[/]"
        return Text.from_markup(f"run {rid}: {ok} ({r.steps} events served)")

    root = Tree(label(run_id, tree))

    def add(node: Tree, t: TreeReplay) -> None:
        for child, sub in t.children:
            head = f"seq {child.seq} subagent {child.name} → "
            if isinstance(sub, str):
                node.add(Text(head + f"{child.run_id}: {sub}", style="yellow"))
            else:
                add(node.add(Text(head) + label(child.run_id, sub)), sub)

    add(root, tree)
    return root


def _outcome(side: RunDiffSide) -> str:
    return side.error or json.dumps(side.output, ensure_ascii=False)[:80]


def summary_table(a: RunDiffSide, b: RunDiffSide) -> Table:
    # the ids go in the title, which wraps between words: as column headers two UUIDs side by
    # side do not fit 80 columns and were split mid-id (tests/test_narrow_terminal.py)
    t = Table(title=f"runs: A {a.run_id} · B {b.run_id}")
    t.add_column("")
    t.add_column("A", overflow="fold")
    t.add_column("B", overflow="fold")
    t.add_row("events", str(a.count), str(b.count))
    t.add_row("finished", str(a.finished), str(b.finished))
    t.add_row("agent", a.agent, b.agent)
    t.add_row("models", ", ".join(a.models), ", ".join(b.models))
    t.add_row("kinds", json.dumps(a.kinds), json.dumps(b.kinds))
    t.add_row("outcome", _outcome(a), _outcome(b))
    return t


def differences_table(result: RunAlignment) -> Table:
    """Every difference side by side, with its seq in both runs (80 columns and up)."""
    noise = ", ".join((*result.ignore, *result.ignore_paths)) or "nothing"
    n = plural(len(result.differences), "difference")
    t = Table(title=f"{n} (ignored: {noise})", show_lines=True)
    t.add_column("seq\nA B", no_wrap=True)
    t.add_column("step", overflow="fold", ratio=2)
    t.add_column("A", overflow="fold", ratio=3)  # the ids: summary_table's title
    t.add_column("B", overflow="fold", ratio=3)
    for d in result.differences:
        seqs = f"{'-' if d.seq_a is None else d.seq_a} {'-' if d.seq_b is None else d.seq_b}"
        step = Text(d.kind, style="bold")
        if d.site:
            step.append(f"\n{d.site}", style="dim")
        a_cell, b_cell = Text(), Text()
        for i, f in enumerate(d.fields[:8]):
            sep = "\n" if i else ""
            a_cell.append(f"{sep}{f.path}\n", style="dim")
            a_cell.append(f.a if f.a is not None else "(none)")
            b_cell.append(f"{sep}{f.path}\n", style="dim")
            b_cell.append(f.b if f.b is not None else "(none)")
        t.add_row(seqs, step, a_cell, b_cell)
    return t


def progress_bar() -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=stderr,
        transient=True,
    )


def print_events(
    run_id: str,
    events: Sequence[TraceEvent],
    source: str,
    as_json: bool,
    status: str | None = None,
) -> None:
    """A run's timeline: one JSON event per line, or the steps table; ``status`` (the verify
    report's, or ``UNVERIFIED``) heads the table."""
    if as_json:
        for ev in events:
            click.echo(EventModel.from_event(ev).model_dump_json())
        return
    day = StepSummary.of(events[0]).at_iso[:10] if len(events) else ""
    title = f"run {run_id}: {len(events)} events from the {source}, started {day} (UTC)"
    if status is not None:
        title = f"{title}, {status}"
    steps = (StepSummary.of(ev) for ev in events)
    stdout.print(steps_table(steps, title=title, width=stdout.width))


def chain_failure(exc: ChainError | LogError, as_json: bool) -> None:
    """A failed check as --json (exit 1, naming the seq and object) or raised for the CLI's
    error handler."""
    if as_json:
        out: dict[str, object] = {"ok": False, "seq": exc.seq, "object": exc.obj}
        if str(exc).startswith("unverified:"):  # no trusted key (log_policy.unverified_record)
            out["status"] = "unverified"
        elif str(exc).startswith("unverified freshness:"):  # load.trust.unverified_freshness
            out["status"] = "unverified freshness"
        out["error"] = str(exc)
        if isinstance(exc, LogError):
            out["checkpoint"] = exc.checkpoint
            # a failed signature or proof is the checkpoint's fault: name its object
            out["object"] = exc.obj or exc.checkpoint
        echo_json(out)
        raise click.exceptions.Exit(1)
    raise exc
