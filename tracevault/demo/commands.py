"""``tracevault demo``: the main job, end to end, on embedded defaults."""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.table import Table

from tracevault._clitools import echo_json, settings_from, stderr, stdout
from tracevault.demo.run import DemoOptions, DemoSummary, run_demo

__all__ = ["demo"]


@click.command()
@click.option(
    "--agents",
    type=click.IntRange(1, 64),
    default=4,
    show_default=True,
    help="Concurrent simulated agents (threads in this process).",
)
@click.option(
    "--runs",
    type=click.IntRange(1, 10_000),
    default=5,
    show_default=True,
    help="Runs (tickets) each agent records.",
)
@click.option(
    "--archive",
    "archive_url",
    metavar="URL",
    help="file://PATH or s3://BUCKET/PREFIX [default file://./.tracevault/archive].",
)
@click.option(
    "--sample",
    type=click.IntRange(1, 1000),
    default=4,
    show_default=True,
    help="Runs verified and replayed from the archive and from the topic.",
)
@click.option(
    "--timeout",
    type=click.FloatRange(1),
    default=180.0,
    show_default=True,
    help="Seconds to wait for every run to be sealed and archived.",
)
@click.option(
    "--keep-broker",
    is_flag=True,
    help="Leave a broker the demo started running (to inspect --from topic later).",
)
@click.option(
    "--plaintext",
    is_flag=True,
    help="Record content in clear. By default it is encrypted: under the configured key "
    "provider, or a keyring of the demo's own (.tracevault/keyring.json).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.pass_context
def demo(
    ctx: click.Context,
    agents: int,
    runs: int,
    archive_url: str | None,
    sample: int,
    timeout: float,
    keep_broker: bool,
    plaintext: bool,
    as_json: bool,
) -> None:
    """Record a fleet of simulated agents, then seal, archive, verify and replay it.

    \b
    What happens:
      1. uses the broker at --bootstrap-servers, or starts dev/kafka if none
         answers
      2. creates the topics, starts the sequencer and archiver as subprocesses
      3. AGENTS threads each record RUNS support tickets: a scripted model with
         seeds, tools that read order state and issue refunds with idempotency
         keys, clock and random reads; chargeback tickets fail with an error, as
         real runs do. Content is encrypted (AES-256-GCM per run) under the
         configured key provider, or the demo's own keyring,
         .tracevault/keyring.json; --plaintext records it in clear
      4. waits until every run is sealed and archived
      5. verifies and replays a sample from the archive and from the topic
         (verify needs no content key, replay opens it through the keyring)
      6. stops everything it started and prints how to inspect a run

    \b
    Examples:
      tracevault demo
      tracevault demo --agents 8 --runs 20 --json
      TRACEVAULT_S3_ENDPOINT_URL=http://minio:9000 \\
          tracevault demo --archive s3://audit/demo

    Exits 0 when every sampled run verified and replayed cleanly, 1 on a verification
    failure or divergence, 3 when Kafka or the archive cannot be reached.
    """
    settings = settings_from(ctx, archive_url=archive_url)
    opts = DemoOptions(
        agents=agents,
        runs=runs,
        sample=sample,
        timeout=timeout,
        keep_broker=keep_broker,
        work_dir=Path(".tracevault"),
        encrypt=not plaintext,
    )
    summary = run_demo(settings, opts, stderr)
    if as_json:
        echo_json(summary.to_json())
        return
    stdout.print(_table(summary))
    stdout.print("\n[bold]Inspect one run:[/]")
    for cmd in summary.commands:
        stdout.print(f"  {cmd}", soft_wrap=True, highlight=False)
    stdout.print(
        f"\nverify trusts only the log's public key: the demo's is in {summary.log_vkey_file} "
        f"(`export TRACEVAULT_LOG_VKEYS=@{Path(summary.log_vkey_file).resolve()}` makes it the "
        "default; "
        "without a key verify says `unverified` and exits 1).",
        soft_wrap=True,
        highlight=False,
    )
    if summary.content.startswith("encrypted"):
        stdout.print(
            f"\nContent is {summary.content}: verify and export need no content key; show, "
            "run and diff open it (`export TRACEVAULT_KEY_PROVIDER=keyring` reads the demo's "
            "runs; the keyring's default path is the demo's).",
            soft_wrap=True,
            highlight=False,
        )
    if summary.commands and not summary.commands[0].startswith("tracevault "):
        stdout.print(
            "\n[bold]tracevault is not on PATH:[/] "
            + path_hint(Path(sys.executable).parent, Path.cwd()),
            soft_wrap=True,
            highlight=False,
        )


def path_hint(bin_dir: Path, cwd: Path) -> str:
    """How to put ``bin_dir`` (where this tracevault's script is) on PATH: its virtualenv's
    activate script when it has one (``. .venv/bin/activate`` in a checkout that dev/demo
    set up), else an ``export PATH`` line: a wheel installed elsewhere has no .venv here."""
    activate = bin_dir / "activate"
    if activate.is_file():
        shown = activate.relative_to(cwd) if activate.is_relative_to(cwd) else activate
        return f"`. {shown}` puts it there (it activates the virtualenv tracevault is in)."
    return f"`export PATH={bin_dir}:$PATH` puts it there (where tracevault's script is)."


def _table(summary: DemoSummary) -> Table:
    """What the demo did, one row a stage, readable at 80 columns."""
    table = Table(title="tracevault demo", show_header=False)
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    table.add_row(
        "runs", f"{summary.runs} ({summary.failed_runs} ended with an error, as scripted)"
    )
    table.add_row("events recorded", f"{summary.events} ({summary.events_per_s:,.0f} events/s)")
    table.add_row("events sealed", str(summary.events_sealed))
    table.add_row("events archived", f"{summary.events_archived} in {summary.runs_archived} runs")
    table.add_row("record → archived", f"{summary.pipeline_seconds:.1f} s after recording ended")
    for source in ("archive", "topic"):
        n = len(summary.sampled.get(source, []))
        table.add_row(
            f"sample from {source}",
            f"{summary.verified[source]}/{n} verified, {summary.replayed[source]}/{n} replayed",
        )
    table.add_row("content", summary.content)
    table.add_row("archive", summary.archive)
    table.add_row("topics", f"{summary.prefix}.* at {summary.bootstrap_servers}")
    return table
