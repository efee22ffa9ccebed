"""``tracevault index``: rebuild the investigator's index from the archive, catch it up, see
its lag. Searching it is ``tracevault search`` (:mod:`tracevault.replayer.search`)."""

from __future__ import annotations

import click

from tracevault._clitools import echo_json, stderr, stdout
from tracevault.archive.commands import archive_option, store_from
from tracevault.index._build import BuildReport
from tracevault.index._ops import rebuild, update
from tracevault.index._search import index_lag

__all__ = ["index"]

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
    _, store = store_from(ctx, archive_url=archive_url, s3_endpoint_url=s3_endpoint_url)
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
    _, store = store_from(ctx, archive_url=archive_url, s3_endpoint_url=s3_endpoint_url)
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
    _, store = store_from(ctx, archive_url=archive_url, s3_endpoint_url=s3_endpoint_url)
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
