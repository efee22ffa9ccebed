"""``tracevault topics``: create and describe the deployment's four topics."""

from __future__ import annotations

import click
from rich.table import Table
from rich.text import Text

from tracevault._clitools import echo_json, settings_from, stdout
from tracevault.errors import NotFoundError, TopicMismatchError
from tracevault.kafka._topics import TopicReport, describe_topics, ensure_topics

__all__ = ["topics"]


@click.group()
def topics() -> None:
    """Create and inspect <prefix>.raw, .sealed, .heads (compacted) and .dlq."""


def _table(reports: list[TopicReport], title: str) -> Table:
    # Problems sit under the topic's name and the two configs stack in one cell: seven
    # side-by-side columns cut topic names and config keys mid-word at 80 columns.
    t = Table(title=title)
    t.add_column("topic, notes", overflow="fold", ratio=1)
    t.add_column("status", no_wrap=True)
    t.add_column("partitions", justify="right", no_wrap=True)
    t.add_column("config", overflow="fold")
    for r in reports:
        style = {"mismatch": "red", "missing": "yellow", "created": "green"}.get(r.status, "")
        cell = Text(r.name)
        for note in r.problems + r.warnings:
            cell.append(f"\n{note}", style=style or "yellow")
        shown = [k for k in ("cleanup.policy", "retention.ms") if k in r.config]
        config = "\n".join(f"{k}={r.config[k]}" for k in shown)
        t.add_row(
            cell,
            f"[{style}]{r.status}[/]" if style else r.status,
            "" if r.partitions is None else str(r.partitions),
            config,
        )
    return t


def _as_json(reports: list[TopicReport]) -> list[dict[str, object]]:
    return [
        {
            "role": r.role,
            "topic": r.name,
            "status": r.status,
            "partitions": r.partitions,
            "config": r.config,
            "problems": r.problems,
            "warnings": r.warnings,
        }
        for r in reports
    ]


@topics.command("create")
@click.option("--partitions", type=click.IntRange(1, 10_000), help="Partitions per topic [6].")
@click.option(
    "--replication-factor", type=click.IntRange(1, 32), help="Replicas per partition [1]."
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.pass_context
def create(
    ctx: click.Context, partitions: int | None, replication_factor: int | None, as_json: bool
) -> None:
    """Create the four topics; safe to run again.

    An existing topic is checked, not trusted: a heads topic that is not compacted, or
    partition counts that differ between raw, sealed and heads, stop the command (exit 1)
    with the fix.
    """
    settings = settings_from(ctx, partitions=partitions, replication_factor=replication_factor)
    reports = ensure_topics(settings, partitions=settings.partitions)
    if as_json:
        echo_json(_as_json(reports))
    else:
        stdout.print(_table(reports, f"topics at {settings.bootstrap_servers}"))


@topics.command("describe")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.pass_context
def describe(ctx: click.Context, as_json: bool) -> None:
    """Show the four topics, their partitions and configs, and anything that is wrong.

    Exits 3 when a topic is missing and 1 when one exists with settings that break a
    guarantee (1 wins when both happen), so scripts and health checks can use it.
    """
    settings = settings_from(ctx)
    reports = describe_topics(settings)
    if as_json:
        echo_json(_as_json(reports))
    else:
        stdout.print(_table(reports, f"topics at {settings.bootstrap_servers}"))
    if any(r.status == "mismatch" for r in reports):
        ctx.exit(TopicMismatchError.exit_code)
    if any(r.status == "missing" for r in reports):
        ctx.exit(NotFoundError.exit_code)
