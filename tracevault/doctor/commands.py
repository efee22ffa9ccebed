"""``tracevault doctor``."""

from __future__ import annotations

import click
from rich.table import Table
from rich.text import Text

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
    Checks, in order (every one `--json` reports):
      retention policy        TRACEVAULT_RETENTION_DAYS >= 183 (EU AI Act Art. 19)
      C paths                 the C extensions are built and on
      broker                  Kafka answers at --bootstrap-servers
      topic raw|sealed|heads|dlq
                              the 4 topics exist, co-partitioned; heads compacted
      sequencer lag           how far <prefix>.sequencer lags on <prefix>.raw
      kafka retention raw     raw keeps records longer than the sequencer's lag
      archiver lag            how far the archiver lags on <prefix>.sealed
      kafka retention sealed  sealed keeps records longer than the archiver's lag
      archive                 the store answers (S3: the bucket has Object Lock)
      archive retention       every archived object is locked for >= 183 days
      archive holes           no sealed records were lost before archiving

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
        # three columns, the fix under its detail, check names wrapping between words: the
        # detail gets most of 80 columns, so group and topic names stay whole
        # (tests/test_narrow_terminal.py)
        table = Table(title="tracevault doctor", show_lines=True)
        table.add_column("check", max_width=16)
        table.add_column("status", no_wrap=True)
        table.add_column("detail, fix", overflow="fold", ratio=1)
        for c in checks:
            detail = Text(c.detail)
            if c.fix:
                detail.append(f"\nfix: {c.fix}", "bold")
            table.add_row(c.name, f"[{_STYLE[c.status]}]{c.status}[/]", detail)
        stdout.print(table)
    if any(c.status == "fail" for c in checks):
        ctx.exit(1)
