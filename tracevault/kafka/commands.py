"""``tracevault topics``: create and describe the deployment's four topics, grant its ACLs."""

from __future__ import annotations

from collections.abc import Callable

import click
from rich.table import Table
from rich.text import Text

from tracevault._clitools import echo_json, settings_from, stdout
from tracevault.errors import ConfigError, NotFoundError, TopicMismatchError
from tracevault.kafka._acls import Grant, acl_plan, grant_acls, parse_principal
from tracevault.kafka._topics import TopicReport, describe_topics, ensure_topics

__all__ = ["topics"]


@click.group()
def topics() -> None:
    """Create and inspect <prefix>.raw, .sealed, .heads (compacted) and .dlq;
    grant who may read and write them (acls)."""


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


def _timeout(default: float) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """``--timeout``: how long a command waits for the brokers (a test need not wait 15 s)."""
    return click.option(
        "--timeout",
        type=click.FloatRange(0.5, 600),
        default=default,
        show_default=True,
        help="Seconds to wait for the brokers before giving up (exit 3).",
    )


@topics.command("create")
@click.option("--partitions", type=click.IntRange(1, 10_000), help="Partitions per topic [6].")
@click.option(
    "--replication-factor", type=click.IntRange(1, 32), help="Replicas per partition [1]."
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@_timeout(30.0)
@click.pass_context
def create(
    ctx: click.Context,
    partitions: int | None,
    replication_factor: int | None,
    as_json: bool,
    timeout: float,
) -> None:
    """Create the four topics; safe to run again.

    An existing topic is checked, not trusted: a heads topic that is not compacted, or
    partition counts that differ between raw, sealed and heads, stop the command (exit 1)
    with the fix.
    """
    settings = settings_from(ctx, partitions=partitions, replication_factor=replication_factor)
    reports = ensure_topics(settings, partitions=settings.partitions, timeout=timeout)
    if as_json:
        echo_json(_as_json(reports))
    else:
        stdout.print(_table(reports, f"topics at {settings.bootstrap_servers}"))


@topics.command("describe")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@_timeout(15.0)
@click.pass_context
def describe(ctx: click.Context, as_json: bool, timeout: float) -> None:
    """Show the four topics, their partitions and configs, and anything that is wrong.

    Exits 3 when a topic is missing and 1 when one exists with settings that break a
    guarantee (1 wins when both happen), so scripts and health checks can use it.
    """
    settings = settings_from(ctx)
    reports = describe_topics(settings, timeout=timeout)
    if as_json:
        echo_json(_as_json(reports))
    else:
        stdout.print(_table(reports, f"topics at {settings.bootstrap_servers}"))
    if any(r.status == "mismatch" for r in reports):
        ctx.exit(TopicMismatchError.exit_code)
    if any(r.status == "missing" for r in reports):
        ctx.exit(NotFoundError.exit_code)


def _acl_table(rows: list[tuple[Grant, str]], title: str) -> Table:
    # One row per principal and resource, its operations joined: a row per operation made
    # twenty rows for one deployment.
    merged: dict[tuple[str, str], tuple[list[str], set[str]]] = {}
    for g, status in rows:
        label = {"TRANSACTIONAL_ID": "txn id", "CLUSTER": "cluster"}.get(g.resource, g.resource)
        what = f"{label.lower()} {g.name}" + ("*" if g.pattern == "PREFIXED" else "")
        ops, statuses = merged.setdefault((g.principal, what), ([], set()))
        ops.append(g.operation)
        statuses.add(status)
    t = Table(title=title)
    t.add_column("principal", overflow="fold")
    t.add_column("may", overflow="fold")
    t.add_column("on", overflow="fold", ratio=1)
    t.add_column("status", no_wrap=True)
    for (principal, what), (ops, statuses) in merged.items():
        status = ", ".join(sorted(statuses))
        styled = f"[green]{status}[/]" if statuses == {"added"} else status
        t.add_row(principal, ", ".join(ops), what, styled)
    return t


@topics.command("acls")
@click.option(
    "--sequencer",
    "sequencers",
    multiple=True,
    metavar="PRINCIPAL",
    help="The sequencer's principal (User:NAME); repeatable.",
)
@click.option(
    "--archiver",
    "archivers",
    multiple=True,
    metavar="PRINCIPAL",
    help="The archiver's principal; repeatable.",
)
@click.option(
    "--agent",
    "agents",
    multiple=True,
    metavar="PRINCIPAL",
    help="An agent's principal (may write raw only); repeatable.",
)
@click.option(
    "--reader",
    "readers",
    multiple=True,
    metavar="PRINCIPAL",
    help="A read-only principal (replay --from topic); repeatable.",
)
@click.option("--dry-run", is_flag=True, help="Print the ACLs; do not contact Kafka.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.pass_context
def acls(
    ctx: click.Context,
    sequencers: tuple[str, ...],
    archivers: tuple[str, ...],
    agents: tuple[str, ...],
    readers: tuple[str, ...],
    dry_run: bool,
    as_json: bool,
) -> None:
    """Grant each principal the Kafka ACLs its role needs, and no more.

    ACLs are the first line of defence (docs/acls.md): only the sequencer
    may write sealed, heads and dlq or use the transactional ids
    <prefix>.sequencer.*, so an agent cannot forge a sealed run.

    \b
    sequencer  read raw, heads, sealed; write sealed, heads, dlq;
               group <prefix>.sequencer; its transactional ids
    archiver   read sealed; group tracevault-archiver.<prefix>
    agent      write raw
    reader     read sealed and heads (replay --from topic)

    The broker must run an authorizer (dev/kafka start --sasl does),
    and these settings must name a super user or a principal with
    ALTER on the cluster: TRACEVAULT_SECURITY_PROTOCOL,
    TRACEVAULT_SASL_MECHANISM, TRACEVAULT_SASL_USERNAME and
    TRACEVAULT_SASL_PASSWORD. Safe to run again: an ACL that exists
    shows as present. Exits 2 when the broker has no authorizer or
    refuses these credentials, 3 when it does not answer.

    \b
    Example:
      tracevault --prefix agent-traces topics acls \\
        --sequencer User:sequencer --archiver User:archiver \\
        --agent User:agent --dry-run
    """
    settings = settings_from(ctx)
    plan = acl_plan(
        settings,
        sequencers=[parse_principal(p, "--sequencer") for p in sequencers],
        archivers=[parse_principal(p, "--archiver") for p in archivers],
        agents=[parse_principal(p, "--agent") for p in agents],
        readers=[parse_principal(p, "--reader") for p in readers],
    )
    if not plan:
        raise ConfigError(
            "name at least one principal: --sequencer, --archiver, --agent or --reader"
        )
    if dry_run:
        rows = [(g, "dry run") for g in plan]
    else:
        rows = [(g, "added" if new else "present") for g, new in grant_acls(settings, plan)]
    if as_json:
        echo_json([{**g.as_dict(), "status": status} for g, status in rows])
    else:
        where = "would grant (dry run)" if dry_run else f"at {settings.bootstrap_servers}"
        stdout.print(_acl_table(rows, f"ACLs for {settings.topic_prefix}.* {where}"))
