"""``tracevault spool``: see and deliver events the Recorder spooled while Kafka was away."""

from __future__ import annotations

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from tracevault._clitools import echo_json, settings_from, stderr, stdout
from tracevault.errors import ServiceUnavailableError
from tracevault.producer._spool_drain import DrainReport, drain_spool, spool_status

__all__ = ["spool"]

_STYLE = {
    "drained": "green",
    "pending": "yellow",
    "in use": "cyan",
    "corrupt": "red",
    "unreadable": "red",
    "failed": "red",
}


@click.group()
def spool() -> None:
    """Events the Recorder could not hand to Kafka wait in a local spool directory.

    A Publisher drains its own spool as soon as the broker answers again, and adopts
    segments left by processes that died. Use these commands when no agent process will
    run again on this host, or to check what is waiting.

    \b
    Examples:
      tracevault spool status                      # what waits, per segment
      tracevault spool drain                       # send it all, oldest first
      tracevault --bootstrap-servers kafka:9092 spool drain \\
          --spool-dir /var/lib/agent/spool
      tracevault spool drain --json | jq .delivered
    """


def _as_json(report: DrainReport) -> dict[str, object]:
    return {
        "spool_dir": report.spool_dir,
        "delivered": report.delivered,
        "remaining": report.remaining,
        "rejected": report.rejected,
        "torn_bytes": report.torn_bytes,
        "segments": [
            {
                "path": s.path,
                "topic": s.topic,
                "status": s.status,
                "delivered": s.delivered,
                "remaining": s.remaining,
                "rejected": s.rejected,
                "torn_bytes": s.torn_bytes,
                "detail": s.detail,
            }
            for s in report.segments
        ],
    }


def _table(report: DrainReport, title: str) -> Table:
    # Topic and detail sit under the segment's name: six side-by-side columns left each
    # about twelve characters at 80 columns and cut file names and reasons mid-word.
    t = Table(title=title)
    t.add_column("segment, topic, detail", overflow="fold", ratio=1)
    t.add_column("status", no_wrap=True)
    for col in ("sent", "to send"):
        t.add_column(col, justify="right", no_wrap=True)
    for s in report.segments:
        style = _STYLE.get(s.status, "")
        cell = Text(s.path.rsplit("/", 1)[-1])
        cell.append(f"\n{s.topic}", style="dim")
        if s.detail:
            cell.append(f"\n{s.detail}", style=style)
        t.add_row(cell, f"[{style}]{s.status}[/]", str(s.delivered), str(s.remaining))
    return t


_spool_dir_option = click.option(
    "--spool-dir",
    type=click.Path(file_okay=False, path_type=str),
    help="Spool directory [env TRACEVAULT_SPOOL_DIR; default ./.tracevault/spool].",
)
_json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")


@spool.command("status")
@_spool_dir_option
@_json_option
@click.pass_context
def status(ctx: click.Context, spool_dir: str | None, as_json: bool) -> None:
    """List spool segments and how many events each still holds (sends nothing).

    A torn tail (an agent killed mid-write) is reported in its segment's detail and in
    torn_bytes; it is not a problem: `spool drain` cuts it and sends the records before it.
    Exits 1 when a segment is corrupt or unreadable.
    """
    settings = settings_from(ctx, spool_dir=spool_dir)
    report = spool_status(settings)
    if as_json:
        echo_json(_as_json(report))
    elif not report.segments:
        stdout.print(f"spool {report.spool_dir} is empty")
    else:
        stdout.print(_table(report, f"spool {report.spool_dir}: {report.remaining} events"))
    if report.problems or report.rejected:
        ctx.exit(1)


@spool.command("drain")
@_spool_dir_option
@click.option(
    "--timeout",
    type=click.FloatRange(0.1, 3600),
    default=30.0,
    show_default=True,
    help="Seconds to wait for Kafka to acknowledge each batch.",
)
@_json_option
@click.pass_context
def drain(ctx: click.Context, spool_dir: str | None, timeout: float, as_json: bool) -> None:
    """Send every spooled event to <prefix>.raw, oldest first, and delete what was sent.

    Each segment goes in file order, so every run keeps its seq order; the delivered
    position is committed after each acknowledged batch, so an interrupted drain resumes
    where it stopped. Segments a live agent process still writes are left to it. A torn
    tail (an agent killed mid-write; never reported as spooled) is cut, logged and reported
    in torn_bytes, and the records before it are sent.

    \b
    Exit codes:
      0  all sent (or nothing to send)
      1  a segment is corrupt (the intact part before the damage is sent),
         or events older than spool_max_age_s were refused: they are kept
         in <spool>/rejected/, never sent (the sequencer may have forgotten
         their runs; docs/fleet.md)
      3  Kafka did not acknowledge in time (nothing is lost: run it again
         when the broker is back)
    """
    settings = settings_from(ctx, spool_dir=spool_dir)
    if as_json:
        report = drain_spool(settings, timeout=timeout)
        echo_json(_as_json(report))
    else:
        with Progress(
            TextColumn("draining spool"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=stderr,
            transient=True,
        ) as progress:
            task = progress.add_task("drain", total=None)
            report = drain_spool(
                settings,
                timeout=timeout,
                on_total=lambda n: progress.update(task, total=n),
                on_progress=lambda n: progress.advance(task, n),
            )
        if report.segments:
            stdout.print(_table(report, f"spool {report.spool_dir}: {report.delivered} sent"))
        else:
            stdout.print(f"spool {report.spool_dir} is empty: nothing to send")
    if any(s.status == "failed" for s in report.segments):
        failed = next(s for s in report.segments if s.status == "failed")
        raise ServiceUnavailableError(
            f"Kafka at {settings.bootstrap_servers} did not acknowledge spooled events "
            f"({failed.detail}); {report.remaining} events stay in {report.spool_dir}: run "
            "`tracevault spool drain` again once the broker answers"
        )
    if report.problems or report.rejected:
        ctx.exit(1)
