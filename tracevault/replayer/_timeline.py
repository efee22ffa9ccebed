"""The rich table of a run's steps (``replay show``, "what the record says came next").

A newcomer reads a run through its payloads, so the request and response must stay legible
at any width. Side by side they need room: six columns at 80 columns leave each payload five
characters. Below ``WIDE`` the step's kind, time and model stack in one column and the
request and response stack in another, which keeps about fifty characters per payload line
at 80 columns; from ``WIDE`` up every field has its own column.
"""

from __future__ import annotations

from collections.abc import Iterable

from rich import box
from rich.table import Table
from rich.text import Text

from tracevault.replayer._results import StepSummary

__all__ = ["WIDE", "steps_table"]

#: Console width from which each field gets its own column (payloads then get ~35 each).
WIDE = 140


def _payload(step: StepSummary) -> Table:
    # A grid, so a wrapped payload hangs under its own text instead of under the arrow.
    grid = Table.grid(padding=(0, 1))
    grid.add_column(style="dim", no_wrap=True)
    grid.add_column(overflow="fold", ratio=1)
    grid.add_row("→", Text(step.request or "-"))
    grid.add_row("←", Text(step.response or "-"))
    return grid


def _step(step: StepSummary, with_time: bool) -> Text:
    text = Text(step.kind, style="bold")
    if with_time:
        text.append(f"\n{step.at_time}", style="dim")
    if step.model:
        text.append(f"\n{step.model}")
    return text


def steps_table(
    steps: Iterable[StepSummary], *, title: str, width: int, with_time: bool = True
) -> Table:
    """The steps as a table that fits ``width`` columns without hiding a payload."""
    if width >= WIDE:
        t = Table(title=title)
        t.add_column("seq", no_wrap=True, justify="right")
        t.add_column("kind", no_wrap=True)
        if with_time:
            t.add_column("time (UTC)", no_wrap=True)
        t.add_column("model", overflow="fold")
        t.add_column("request", overflow="fold", ratio=1)
        t.add_column("response", overflow="fold", ratio=1)
        for s in steps:
            row = [str(s.seq), s.kind, *([s.at_time] if with_time else []), s.model or ""]
            t.add_row(*row, Text(s.request), Text(s.response))
        return t
    t = Table(title=title, box=box.SQUARE, show_lines=True)
    t.add_column("seq", no_wrap=True, justify="right")
    t.add_column("step", overflow="fold")
    t.add_column("→ request  ← response", overflow="fold", ratio=1, min_width=24)
    for s in steps:
        t.add_row(str(s.seq), _step(s, with_time), _payload(s))
    return t
