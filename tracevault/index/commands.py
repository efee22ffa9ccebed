"""``tracevault index``: rebuild the investigator's index from the archive, catch it up, see
its lag; and ``tracevault archive`` with an ``ls`` that shows the index's columns. Searching
it is ``tracevault search`` (:mod:`tracevault.replayer.search`).

``archive ls`` is defined here, not in ``tracevault.archive.commands``, because the archive
package sits beneath the index (it must not import it: no cycle); the CLI's ``archive`` group
is that package's group with this ``ls`` in place of its own."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import click
from rich.table import Table

from tracevault._clitools import echo_json, stderr, stdout
from tracevault.archive import ObjectStore, list_runs
from tracevault.archive.commands import archive as _archive
from tracevault.archive.commands import archive_option, store_from
from tracevault.index._build import BuildReport
from tracevault.index._ops import rebuild, update
from tracevault.index._search import Filters, RunHit, index_lag, search
from tracevault.index._tables import index_keys

__all__ = ["archive", "index"]

JSON = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")


@click.group("index")
def index() -> None:
    """The investigator's index: Parquet metadata of every archived run and event.

    Derived from the archive and never trusted: verify never reads it, and every
    search hit carries what verifying that run needs. It holds no content
    (requests, responses, error messages): encrypted runs stay encrypted. It
    lives under index/ in the archive store, readable by DuckDB, Dask, Spark,
    Trino and Athena (docs/index.md).

    \b
    Examples:
      tracevault index rebuild          # the whole index, from the archive alone
      tracevault index update           # only what the archive added since
      tracevault index status --json    # how far it is behind the archive
    """


def _print(report: BuildReport, verb: str, as_json: bool) -> None:
    if as_json:
        echo_json(
            {
                "runs": report.runs,
                "events": report.events,
                "statuses": report.statuses,
                "written": report.written,
                "deleted": report.deleted,
                "unreadable": report.unreadable,
                "covered": report.covered,
            }
        )
        return
    stdout.print(
        f"{verb} {report.runs} runs, {report.events} events, {report.statuses} status rows "
        f"into {len(report.written)} objects"
        + (f"; {len(report.deleted)} older index objects deleted" if report.deleted else "")
    )
    for run_id, why in sorted(report.unreadable.items()):
        stderr.print(f"[yellow]not indexed: run {run_id}: {why}[/]", highlight=False)


@index.command("rebuild")
@archive_option
@JSON
@click.pass_context
def rebuild_cmd(
    ctx: click.Context, *, archive_url: str | None, s3_endpoint_url: str | None, as_json: bool
) -> None:
    """Build the whole index from the archive alone, then delete older index objects.

    Reads every run the archive's day index lists, from its run index objects and
    data bundles up to its log's newest checkpoint. Index objects carry no
    retention lock: they are derived, so replacing them is allowed.

    \b
    Examples:
      tracevault index rebuild --archive s3://audit-logs/tv
    """
    _, store = store_from(
        ctx, create=False, archive_url=archive_url, s3_endpoint_url=s3_endpoint_url
    )
    with stderr.status("indexing the archive…"):
        report = rebuild(store)
    _print(report, "indexed", as_json)


@index.command("update")
@archive_option
@JSON
@click.pass_context
def update_cmd(
    ctx: click.Context, *, archive_url: str | None, s3_endpoint_url: str | None, as_json: bool
) -> None:
    """Index only what the archive added since the index was last written.

    The flushes past the tree size the index covers for each partition log, and
    the runs it holds as unfinished. Safe to run again, or from two hosts at
    once: the same archive state writes the same object names and bytes.

    \b
    Examples:
      tracevault index update           # e.g. from cron, every minute
    """
    _, store = store_from(
        ctx, create=False, archive_url=archive_url, s3_endpoint_url=s3_endpoint_url
    )
    with stderr.status("catching the index up…"):
        report = update(store)
    _print(report, "indexed", as_json)


@index.command("status")
@archive_option
@JSON
@click.pass_context
def status_cmd(
    ctx: click.Context, *, archive_url: str | None, s3_endpoint_url: str | None, as_json: bool
) -> None:
    """How far the index is behind the archive (from object keys alone).

    \b
    Examples:
      tracevault index status
    """
    _, store = store_from(
        ctx, create=False, archive_url=archive_url, s3_endpoint_url=s3_endpoint_url
    )
    lag = index_lag(store)
    if as_json:
        echo_json(
            {
                "leaves_behind": lag.leaves,
                "flushes_behind": lag.flushes,
                "newest_unindexed_day": lag.newest_unindexed_day,
                "logs": {t: {"indexed": i, "archived": a} for t, (i, a) in lag.behind.items()},
            }
        )
        return
    stdout.print(str(lag), highlight=False)


def _indexed(store: ObjectStore) -> dict[str, RunHit] | None:
    """run id -> the index's row, or None when the archive has no index."""
    if not index_keys(store, ("runs",)):
        return None
    result = search(store, Filters())
    for key, why in sorted(result.skipped.items()):
        stderr.print(f"[yellow]index object skipped: {key}: {why}[/]", soft_wrap=True)
    return {h.run_id: h for h in result.hits}


@click.command("ls")
@click.argument("run_id", required=False)
@click.option(
    "--day",
    type=click.DateTime(formats=["%Y-%m-%d"]),
    help="Only runs sealed on this UTC day (YYYY-MM-DD).",
)
@archive_option
@JSON
@click.pass_context
def ls(
    ctx: click.Context,
    *,
    run_id: str | None,
    day: Any,
    archive_url: str | None,
    s3_endpoint_url: str | None,
    as_json: bool,
) -> None:
    """List archived runs: all, one day's (--day), or one run by id (one listing).

    With the investigator's index (docs/index.md) each run also shows its agent,
    start, status and tools; without one, the archive's own columns and a hint.
    Exits 3 when RUN_ID is not in the archive.

    \b
    Examples:
      tracevault archive ls --day 2026-01-31
      tracevault archive ls run-42 --json
      tracevault archive ls --archive s3://audit-logs/tv \\
          --s3-endpoint-url http://minio:9000
    """
    _, store = store_from(
        ctx, create=False, archive_url=archive_url, s3_endpoint_url=s3_endpoint_url
    )
    the_day = day.date() if day is not None else None
    runs = list_runs(store, day=the_day, run_id=run_id)
    meta = _indexed(store)
    if meta is None and not as_json:  # --json stays as it was for scripts
        stderr.print("no investigator's index: `tracevault index rebuild` adds each run's "
                     "agent, start, status and tools here")  # fmt: skip
    if as_json:
        out = []
        for r in runs:
            row: dict[str, Any] = asdict(r)
            hit = None if meta is None else meta.get(r.run_id)
            if hit is not None:
                row |= {"agent": hit.agent_id, "started": hit.started.isoformat(),
                        "status": hit.status, "tools": list(hit.tools)}  # fmt: skip
            out.append(row)
        echo_json(out)
        return
    t = Table(title=f"runs in {store.url}" + (f" on {the_day}" if the_day else ""))
    width = max((len(r.run_id) for r in runs), default=3)
    t.add_column("run", no_wrap=True, min_width=width)
    if meta is None:
        for col in ("segments", "events", "complete"):
            t.add_column(col)
        for r in runs:
            done = "yes" if r.complete else "[yellow]open[/]"
            t.add_row(r.run_id, str(r.segments), str(r.events), done)
    else:
        for col in ("agent", "started (UTC)", "status", "events", "tools"):
            t.add_column(col, overflow="fold", no_wrap=col == "started (UTC)")
        for r in runs:
            hit = meta.get(r.run_id)
            if hit is None:  # archived since the index was written
                t.add_row(r.run_id, "", "", "[yellow]not indexed[/]", str(r.events), "")
                continue
            t.add_row(r.run_id, hit.agent_id, hit.started.strftime("%Y-%m-%d %H:%M"),
                      hit.status, str(r.events), ", ".join(hit.tools))  # fmt: skip
    stdout.print(t)


#: ``tracevault archive``: the archive package's group, with the ``ls`` above.
archive = click.Group("archive", commands={**_archive.commands, "ls": ls}, help=_archive.help)
