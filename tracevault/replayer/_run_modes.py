"""The ways ``replay run`` re-runs a run: plain (up to ``--until``), keep going, fork, recurse.

Each takes what the command already loaded and verified, runs it, prints through
``_views`` and exits as the command documents (``commands.run_cmd``).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import Any

import click
from rich.text import Text

from tracevault._clitools import echo_json, stderr, stdout
from tracevault.config import Settings
from tracevault.errors import ConfigError, ReplayDivergence
from tracevault.replayer._results import Record, ReplayResult, event_json
from tracevault.replayer._views import (
    divergence_panel,
    divergences_table,
    replay_tree_view,
    run_tree_view,
    state_at,
)
from tracevault.replayer.batch.jobs import load_agent, replay_with
from tracevault.replayer.investigate.tree import replay_tree, run_tree
from tracevault.replayer.load.opened import opened
from tracevault.replayer.rerun.replay import areplay
from tracevault.replayer.rerun.replay import replay as replay_events

__all__ = ["fork", "keep_going", "plain", "recurse", "tree"]


def keep_going(run_id: str, events: Any, agent: Any, *, as_json: bool) -> None:
    """``--keep-going``: the whole run, every divergence collected and shown."""
    if inspect.iscoroutinefunction(agent):
        result: ReplayResult = asyncio.run(areplay(events, agent, keep_going=True))
    else:
        result = replay_events(events, agent, keep_going=True)
    if as_json:
        echo_json(result.to_json())
    elif result.divergences:
        stdout.print(divergences_table(run_id, result.divergences))
    else:
        stdout.print(f"[green]run {run_id}: matched the record[/] ({result.steps} served)")
    if result.divergences:
        raise click.exceptions.Exit(ReplayDivergence.exit_code)


def fork(
    settings: Settings,
    events: Any,
    agent: Any,
    agent_spec: str,
    until: int,
    *,
    live_spec: str | None,
    as_json: bool,
    live_tools: tuple[str, ...] = (),
) -> None:
    """``--until N --then live``: the record up to N, then the live edges, as a new run."""
    # the fork records through the producer (the Kafka client): imported only when asked for
    from tracevault.producer import Publisher  # noqa: PLC0415
    from tracevault.replayer.investigate.fork import fork_run, live_edges_from  # noqa: PLC0415

    spec = live_spec or f"{agent_spec.partition(':')[0]}:live_edges"
    try:
        factory = load_agent(spec)
    except ConfigError as exc:
        raise ConfigError(
            f"{exc}; a fork needs live edges: give --live-edges MODULE:FACTORY or define "
            "live_edges() in the agent's module"
        ) from None
    model, tools = live_edges_from(factory(), spec)
    publisher = Publisher(settings)
    try:
        with stderr.status(f"serving seq 0..{until}, then live…"):
            result = fork_run(events, agent, until=until, publisher=publisher, model=model,
                              tools=tools, live_tools=live_tools)  # fmt: skip
        delivered = publisher.flush(30)
    finally:
        publisher.close()
    if as_json:
        echo_json({**result.to_json(), "delivered": delivered})
    elif result.divergence is not None:
        divergence_panel(result.divergence)
    else:
        stdout.print(
            f"[green]forked[/] {result.forked_from[0]} at seq {until} → new run "
            f"[bold]{result.run_id}[/] ({result.served} events served, then live)"
        )
        if result.error:
            stdout.print(f"the agent raised {result.error} (recorded in the new run)")
        if not delivered:
            stdout.print("[yellow]not every event reached Kafka yet: the rest is spooled[/]")
    for refusal in () if as_json else result.refused:
        if refusal not in (result.error or ""):  # else just said, as what the agent raised
            stderr.print(Text(refusal, style="red"))
    if result.divergence is not None:
        raise click.exceptions.Exit(ReplayDivergence.exit_code)
    if result.refused:  # the new run is recorded; what it would have sent was not sent
        raise click.exceptions.Exit(ConfigError.exit_code)


def recurse(
    run_id: str, events: Any, agent: Any, load_child: Callable[[str], Any], *, as_json: bool
) -> None:
    """``--recurse``: the run, then each sub-agent run it served, against its own record.

    ``load_child`` reads a sub-agent run's events by id, checked as the command checked
    the run itself (``commands.run_cmd``: verified, or ``--no-verify``)."""
    tree = replay_tree(load_child, events, agent)
    if as_json:
        echo_json(tree.to_json())
    else:
        stdout.print(replay_tree_view(run_id, tree))
    if not tree.matched:
        raise click.exceptions.Exit(ReplayDivergence.exit_code)


def tree(run_id: str, record: Callable[[str], Record], *, as_json: bool) -> None:
    """``show --tree``: the run and every sub-agent run below it, each taken by ``record``
    (verified as the command verifies the run, or ``--no-verify``), opened with its keys."""

    def events(rid: str) -> Any:
        got = record(rid)
        return opened(got.settings, got.events)

    node = run_tree(events, run_id, events(run_id))
    if as_json:
        echo_json(node.to_json())
    else:
        stdout.print(run_tree_view(node))


def plain(run_id: str, events: Any, agent: Any, until: int | None, *, as_json: bool) -> None:
    """The plain re-run, up to ``until`` when given: matched, diverged, or the state there."""
    result = replay_with(events, agent, until)
    record_next = events[len(result.served)] if len(events) > len(result.served) else None
    if as_json:
        out = result.to_json()
        if result.stopped:
            out["record_next"] = None if record_next is None else event_json(record_next)
        echo_json(out)
    elif result.divergence is not None:
        divergence_panel(result.divergence)
    else:
        if result.stopped:
            state_at(run_id, result, record_next)
        what = f"stopped after seq {until}" if result.stopped else "matched the record"
        stdout.print(f"[green]run {run_id}: {what}[/] ({result.steps} events served)")
        if result.error is not None:
            stdout.print(f"the agent raised {result.error.type}, as recorded")
    if result.divergence is not None:
        raise click.exceptions.Exit(ReplayDivergence.exit_code)
