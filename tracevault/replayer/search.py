"""``tracevault search``: find runs in the investigator's index, and verify what it found.

The index (``tracevault.index``) narrows; the archive decides. ``--verify`` loads and verifies
every hit from the archive exactly as ``replay verify`` does (the signed log with the trusted
keys, then who wrote it with the trusted agent vkeys), failing closed: with no trusted log key
or agent vkey a hit is ``unverified`` and the command exits 1.
It lives with the replayer because verification does (docs/index.md, "Trust").
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import click
from rich.table import Table

from tracevault._clitools import echo_json, stderr, stdout
from tracevault.archive import ObjectStore
from tracevault.archive.commands import archive_option, store_from
from tracevault.errors import ChainError, ConfigError, LogError
from tracevault.index import FILTERS, STATUSES, Filters, RunHit, index_lag, run_sql, search
from tracevault.replayer._cliopts import (
    AGENT_KEY,
    OFFLINE,
    WITNESS_STORE,
    end_options,
    log_options,
    trust,
)
from tracevault.replayer._grep import GrepResult, grep_runs
from tracevault.replayer._verified import verified_run
from tracevault.schemas import EventKind

__all__ = ["search_cmd"]

_DATE = click.DateTime(formats=["%Y-%m-%d", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M:%S%z"])


def _utc(value: datetime | None) -> datetime | None:
    from datetime import UTC  # noqa: PLC0415

    if value is None:
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


def _table(hits: list[RunHit], verdicts: dict[str, str] | None, title: str) -> Table:
    t = Table(title=title, title_justify="left")
    width = max((len(h.run_id) for h in hits), default=3)
    t.add_column("run", no_wrap=True, min_width=width)
    t.add_column("agent", overflow="fold")
    t.add_column("started (UTC)", no_wrap=True)
    t.add_column("status", overflow="fold")
    t.add_column("events", justify="right")
    t.add_column("tools", overflow="fold")
    if verdicts is not None:
        t.add_column("verified", no_wrap=True)
    for h in hits:
        row = [h.run_id, h.agent_id, h.started.strftime("%Y-%m-%d %H:%M"), h.status,
               str(h.events), ", ".join(h.tools)]  # fmt: skip
        if verdicts is not None:
            v = verdicts[h.run_id]
            short = v if v in ("ok", "unverified") else "FAILED"
            row.append(f"[green]{short}[/]" if v == "ok" else f"[red]{short}[/]")
        t.add_row(*row)
    return t


def _verify_all(
    ctx: click.Context, hits: list[RunHit], trust_flags: dict[str, Any]
) -> dict[str, str]:
    """run id -> "ok", "unverified" or the failed check, each hit from the archive."""
    from tracevault.replayer._cliopts import settings_of  # noqa: PLC0415

    checks = trust(settings_of(ctx), **trust_flags)
    out: dict[str, str] = {}
    for h in hits:
        try:
            _, _, report = verified_run(ctx, h.run_id, "archive", checks)
            out[h.run_id] = "ok" if report.ok else "unverified"
        except (ChainError, LogError) as exc:
            out[h.run_id] = str(exc).splitlines()[0]
    return out


def _grep(ctx: click.Context, store: ObjectStore, hits: list[RunHit], pattern: str) -> GrepResult:
    from tracevault.replayer._cliopts import settings_of  # noqa: PLC0415

    try:
        with stderr.status(f"matching content in {len(hits)} candidate runs…"):
            return grep_runs(settings_of(ctx), store, hits, pattern)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc


def _warn_lag(store: ObjectStore) -> None:
    lag = index_lag(store)
    if lag.behind:
        stderr.print(f"[yellow]{lag}[/]", highlight=False, soft_wrap=True)


def _sql(store: ObjectStore, sql: str, as_json: bool) -> None:
    cols, rows, index = run_sql(store, sql)
    _skipped(index.skipped)
    if as_json:
        echo_json([dict(zip(cols, r, strict=True)) for r in rows])
        return
    t = Table()
    for c in cols:
        t.add_column(c, overflow="fold")
    for r in rows:
        t.add_row(*("" if v is None else str(v) for v in r))
    stdout.print(t)


def _skipped(skipped: dict[str, str]) -> None:
    if skipped:
        stderr.print(f"[yellow]{len(skipped)} index object(s) skipped (unreadable):[/]")
        for key, why in sorted(skipped.items()):  # whole keys: a script greps them
            stderr.print(f"[yellow]  {key}: {why}[/]", highlight=False, soft_wrap=True)


@click.command("search")
@click.option("--agent", help="The agent id.")
@click.option("--tenant", help="The content tenant (encrypted runs).")
@click.option("--since", type=_DATE, help="Runs started at or after (UTC date or time).")
@click.option("--until", type=_DATE, help="Runs started before (UTC date or time).")
@click.option("--status", type=click.Choice(STATUSES), help="How the run stands.")
@click.option("--tool", help="Runs that called this tool.")
@click.option("--model", help="Runs that called this model.")
@click.option(
    "--kind",
    type=click.Choice([k.value for k in EventKind]),
    metavar="KIND",
    help="Runs with an event of this kind: " + ", ".join(k.value for k in EventKind) + ".",
)
@click.option("--error", help="Runs with an event of this error type.")
@click.option("--min-events", type=click.IntRange(0), help="Runs of at least N events.")
@click.option("--limit", type=click.IntRange(1), help="At most N runs, newest first.")
@click.option(
    "--grep",
    "pattern",
    metavar="REGEX",
    help="Then match REGEX in the content of the runs the filters leave, opened with this "
    "reader's keys; runs it cannot open are named 'not searchable (tenant X)'.",
)
@click.option("--sql", help="One read-only SELECT over the views runs, events, status.")
@click.option("--verify", "do_verify", is_flag=True, help="Verify every hit from the archive.")
@log_options
@AGENT_KEY
@WITNESS_STORE
@OFFLINE
@end_options
@archive_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.pass_context
def search_cmd(ctx: click.Context, /, **opts: Any) -> None:
    """Find archived runs by metadata: agent, tenant, time, status, tool, model, kind,
    error type, size; or any read-only SQL over the index's views.

    Filters combine (all must hold). Reads the index under index/ in the archive
    (`tracevault index rebuild` builds it); says when it is behind the archive.
    Every hit carries its partition, generation, leaf range and checkpoint size;
    --verify verifies each hit as `replay verify` does (freshness and witness
    stores included) and exits 1 unless all verify (no trusted key, or an archive
    nothing proved current without --offline: `unverified`). --sql runs one SELECT over runs,
    events and status; writes, ATTACH, COPY, INSTALL/LOAD and reading files
    or URLs are refused (docs/index.md).

    \b
    Examples:
      tracevault search --tool send_email --since 2026-01-01 --until 2026-01-08
      tracevault search --agent mailer --status errored --json
      tracevault search --tool send_email --verify --trusted-key @log.vkey
      tracevault search --tool send_email --grep 'exfil@evil\\.example'
      tracevault search --sql "SELECT tool, count(*) FROM events GROUP BY tool"
    """
    as_json = opts.pop("as_json")
    archive_url, ep = opts.pop("archive_url"), opts.pop("s3_endpoint_url")
    ctx.find_root().meta["replay.archive_url"] = archive_url
    ctx.find_root().meta["replay.s3_endpoint_url"] = ep
    _, store = store_from(ctx, create=False, archive_url=archive_url, s3_endpoint_url=ep)
    sql, do_verify, pattern = opts.pop("sql"), opts.pop("do_verify"), opts.pop("pattern")
    trust_flags = {k: opts.pop(k) for k in ("trusted_keys", "witness_keys", "min_witnesses",
                   "agent_key_pairs", "allow_unfinished", "require_finished",
                   "witness_stores", "offline")}  # fmt: skip
    given = {k: v for k, v in opts.items() if v is not None}
    if sql is not None:
        if given or do_verify or pattern is not None:
            raise click.UsageError("--sql takes no filter, no --grep and no --verify")
        _sql(store, sql, as_json)
        return
    for k in ("since", "until"):
        if k in given:
            given[k] = _utc(given[k])
    try:
        result = search(store, Filters.of(**given))
    except ConfigError as exc:
        raise click.UsageError(f"{exc} (filters: {', '.join(FILTERS)})") from exc
    _skipped(result.skipped)
    _warn_lag(store)
    hits = result.hits
    grep = None
    if pattern is not None:
        grep = _grep(ctx, store, hits, pattern)
        hits = [h for h in hits if h.run_id in grep.matched]
    verdicts = _verify_all(ctx, hits, trust_flags) if do_verify else None
    _print(store, hits, verdicts, grep, as_json=as_json)
    if verdicts is not None and any(v != "ok" for v in verdicts.values()):
        raise click.exceptions.Exit(1)


def _print(
    store: ObjectStore,
    hits: list[RunHit],
    verdicts: dict[str, str] | None,
    grep: GrepResult | None,
    *,
    as_json: bool,
) -> None:
    """The hits (with their verdicts and matched seqs), and the runs --grep could not open."""
    if as_json:
        rows = [
            {
                **h.to_json(),
                **({} if verdicts is None else {"verified": verdicts[h.run_id]}),
                **({} if grep is None else {"matched_seqs": grep.matched[h.run_id]}),
            }
            for h in hits
        ]
        closed = [{"run_id": r, "tenant": t} for r, t in sorted((grep.not_searchable
                  if grep is not None else {}).items())]  # fmt: skip
        echo_json(rows if grep is None else {"hits": rows, "not_searchable": closed})
    else:
        stdout.print(_table(hits, verdicts, f"{len(hits)} runs in {store.url}"))
        for rid, v in sorted((verdicts or {}).items()):
            if v not in ("ok", "unverified"):
                stdout.print(f"[red]{rid}: {v}[/]", highlight=False)
        if verdicts and "unverified" in verdicts.values():
            stdout.print("[red]unverified: no trusted log key (--trusted-key or "
                         "TRACEVAULT_LOG_VKEYS), or no trusted agent vkey proved who wrote "
                         "the run (--agent-key or TRACEVAULT_AGENT_VKEYS)[/]")  # fmt: skip
    if grep is not None and grep.not_searchable:
        by_tenant: dict[str, list[str]] = {}
        for rid, tenant in sorted(grep.not_searchable.items()):
            by_tenant.setdefault(tenant, []).append(rid)
        for tenant, rids in sorted(by_tenant.items()):
            stderr.print(f"[yellow]{len(rids)} run(s) not searchable (tenant {tenant}): "
                         f"{', '.join(rids)}[/]", highlight=False, soft_wrap=True)  # fmt: skip
