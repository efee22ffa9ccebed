"""``tracevault doctor``."""

from __future__ import annotations

import click
from rich.table import Table

from tracevault._clitools import echo_json, stdout
from tracevault.doctor._checks import run_checks

__all__ = ["doctor"]

_STYLE = {"ok": "green", "warn": "yellow", "fail": "red"}


@click.command()
@click.option("--archive", "archive_url", metavar="URL", help="Archive to check [settings].")
@click.option("--s3-endpoint-url", help="S3 endpoint for MinIO or another S3-compatible store.")
@click.option("--json", "as_json", is_flag=True, help="Print the checks as JSON.")
@click.pass_context
def doctor(
    ctx: click.Context, archive_url: str | None, s3_endpoint_url: str | None, as_json: bool
) -> None:
    """Check a deployment: broker, topics, archive and retention, service lag.

    \b
    Checks, in order:
      retention policy   TRACEVAULT_RETENTION_DAYS >= 183 (EU AI Act Art. 19)
      broker             Kafka answers at --bootstrap-servers
      topic raw/...      the four topics exist, co-partitioned, heads compacted
      sequencer lag      how far <prefix>.sequencer is behind on <prefix>.raw
      archiver lag       how far the archiver's group is behind on <prefix>.sealed
      archive            the store answers (S3: the bucket has Object Lock)
      archive retention  every archived object is locked for >= 183 days

    \b
    Examples:
      tracevault doctor
      tracevault --prefix prod doctor --archive s3://audit/tv --json

    Exits 0 when nothing failed (warnings allowed), 1 when a check failed.
    """
    root = ctx.find_root().obj or {}
    overrides = dict(root.get("settings_overrides", {}))
    overrides.update(archive_url=archive_url, s3_endpoint_url=s3_endpoint_url)
    checks = run_checks(overrides)
    if as_json:
        echo_json([c.to_json() for c in checks])
    else:
        table = Table(title="tracevault doctor")
        for col in ("check", "status", "detail", "fix"):
            table.add_column(col, overflow="fold")
        for c in checks:
            table.add_row(c.name, f"[{_STYLE[c.status]}]{c.status}[/]", c.detail, c.fix)
        stdout.print(table)
    if any(c.status == "fail" for c in checks):
        ctx.exit(1)
