"""``tracevault archive``: list, hold, release and purge archived runs; prove their retention.

The storage commands live beside the storage they operate on. ``tracevault archiver`` (the
service, :mod:`tracevault.services.archiver.commands`) shares ``archive_option`` and
``store_from``, so both name the archive with the same flags, variables and defaults.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from datetime import date
from typing import Any

import click
from rich.progress import Progress as RichProgress
from rich.table import Table
from rich.text import Text

from tracevault._clitools import echo_json, settings_from, stderr, stdout
from tracevault.archive import ObjectStore, open_store
from tracevault.config import Settings

__all__ = ["archive", "archive_option", "store_from"]


def archive_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--archive URL`` and ``--s3-endpoint-url``: the archive every archive command names."""
    fn = click.option(
        "--s3-endpoint-url",
        envvar="TRACEVAULT_S3_ENDPOINT_URL",
        help="S3 endpoint for MinIO or another S3-compatible store.",
    )(fn)
    return click.option(
        "--archive",
        "archive_url",
        envvar="TRACEVAULT_ARCHIVE_URL",
        metavar="URL",
        help="file://PATH or s3://BUCKET/PREFIX [env TRACEVAULT_ARCHIVE_URL; "
        "default file://./.tracevault/archive].",
    )(fn)


def store_from(
    ctx: click.Context, *, create: bool = True, **overrides: Any
) -> tuple[Settings, ObjectStore]:
    """The settings with the command's flags over them, and the archive they name; a reader
    (``create=False``) is refused a store that does not exist rather than making it."""
    settings = settings_from(ctx, **overrides)
    return settings, open_store(settings.archive_url, settings, create=create)


@click.group("archive")
def archive() -> None:
    """List, hold, release and purge archived runs; prove their retention.

    \b
    Examples:
      tracevault archive ls --day 2026-01-31
      tracevault archive ls RUN_ID --json
      tracevault archive hold RUN_ID       # legal hold: the run cannot be purged
      tracevault archive release RUN_ID
      tracevault archive purge --dry-run   # what would go, and why the rest stays
      tracevault archive retention-report --json > evidence.json
    """


@contextmanager
def _progress(label: str, enabled: bool) -> Iterator[Callable[[int, int], None]]:
    if not enabled:
        yield lambda done, total: None
        return
    with RichProgress(console=stderr, transient=True) as bar:
        task = bar.add_task(label, total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update


@archive.command("ls")
@click.argument("run_id", required=False)
@click.option(
    "--day",
    type=click.DateTime(formats=["%Y-%m-%d"]),
    help="Only runs sealed on this UTC day (YYYY-MM-DD).",
)
@archive_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
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

    Exits 3 when RUN_ID is not in the archive.

    \b
    Examples:
      tracevault archive ls --day 2026-01-31
      tracevault archive ls run-42 --json
      tracevault archive ls --archive s3://audit-logs/tv \\
          --s3-endpoint-url http://minio:9000
    """
    from tracevault.archive import list_runs  # noqa: PLC0415

    _, store = store_from(
        ctx, create=False, archive_url=archive_url, s3_endpoint_url=s3_endpoint_url
    )
    the_day: date | None = day.date() if day is not None else None
    runs = list_runs(store, day=the_day, run_id=run_id)
    if as_json:
        echo_json([asdict(r) for r in runs])
        return
    t = Table(title=f"runs in {store.url}" + (f" on {the_day}" if the_day else ""))
    for col in ("run", "segments", "events", "complete"):
        t.add_column(col)
    for r in runs:
        t.add_row(
            r.run_id, str(r.segments), str(r.events), "yes" if r.complete else "[yellow]open[/]"
        )
    stdout.print(t)


def _hold(
    ctx: click.Context,
    run_id: str,
    *,
    on: bool,
    archive_url: str | None,
    ep: str | None,
    as_json: bool,
) -> None:
    from tracevault.archive import hold_run  # noqa: PLC0415

    settings, store = store_from(ctx, archive_url=archive_url, s3_endpoint_url=ep)
    r = hold_run(store, run_id, on, retention_days=settings.retention_days)
    kept_for = sorted({rid for rids in r.kept.values() for rid in rids})
    if as_json:
        echo_json(
            {
                "run_id": run_id,
                "legal_hold": on,
                "objects": len(r.objects),
                "kept": len(r.kept),
                "kept_for": kept_for,
                "missing": r.missing,
                "record": r.record,
            }
        )
        return
    verb = "placed on" if on else "released from"
    stdout.print(f"legal hold {verb} {run_id}: {len(r.objects)} objects")
    if r.kept:
        stdout.print(
            f"{len(r.kept)} shared log objects stay held: other held runs need them "
            f"({', '.join(kept_for)})"
        )
    for key in r.missing:
        stderr.print(f"[yellow]missing[/]: {key} (reading the run needs it)")


@archive.command("hold")
@click.argument("run_id")
@archive_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def hold(
    ctx: click.Context,
    run_id: str,
    archive_url: str | None,
    s3_endpoint_url: str | None,
    as_json: bool,
) -> None:
    """Place a legal hold on RUN_ID and all that verifying it reads.

    Holds the run's objects and, in the tiled log, its bundles, the hash
    tiles of its proofs and its checkpoints (shared with other runs).
    A run with any held object is never purged. Recorded under
    legal-holds/. Exits 3 when the run has no objects.

    \b
    Example:
      tracevault archive hold run-42 && tracevault archive retention-report
    """
    _hold(ctx, run_id, on=True, archive_url=archive_url, ep=s3_endpoint_url, as_json=as_json)


@archive.command("release")
@click.argument("run_id")
@archive_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def release(
    ctx: click.Context,
    run_id: str,
    archive_url: str | None,
    s3_endpoint_url: str | None,
    as_json: bool,
) -> None:
    """Release RUN_ID's legal hold; retention (retain-until) still applies.

    Shared log objects that another held run needs stay held (the
    output names those runs).

    \b
    Example:
      tracevault archive release run-42 --json
    """
    _hold(ctx, run_id, on=False, archive_url=archive_url, ep=s3_endpoint_url, as_json=as_json)


@archive.command("purge")
@click.option("--dry-run", is_flag=True, help="Report what would be deleted; delete nothing.")
@archive_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def purge_cmd(
    ctx: click.Context,
    dry_run: bool,
    archive_url: str | None,
    s3_endpoint_url: str | None,
    as_json: bool,
) -> None:
    """Delete runs whose every object is past retain-until and not under legal hold.

    Retain-until is what the run's receipts state; a run whose store locks disagree with its
    receipts (a file's mtime changed, say) is kept and named, never deleted. Writes an
    immutable record of what it deleted (purges/<time>-<id>.json in the archive) before
    deleting anything. Runs still retained or held are kept and listed with why; on S3, runs
    the server's own clock still locks are listed as refused.

    \b
    Examples:
      tracevault archive purge --dry-run   # what would go, and why the rest stays
      tracevault archive purge --json > purge-$(date +%F).json
    """
    from tracevault.archive import purge  # noqa: PLC0415

    settings, store = store_from(ctx, archive_url=archive_url, s3_endpoint_url=s3_endpoint_url)
    with _progress("checking runs", not as_json) as progress:
        report = purge(
            store, dry_run=dry_run, retention_days=settings.retention_days, progress=progress
        )
    if as_json:
        echo_json(asdict(report))
        return
    t = Table(title=("would purge" if dry_run else "purged") + f" from {store.url}")
    t.add_column("run", no_wrap=True)
    for col in ("action", "detail"):
        t.add_column(col)
    for rid, keys in report.deleted.items():
        t.add_row(
            rid, "[red]would delete[/]" if dry_run else "[red]deleted[/]", f"{len(keys)} objects"
        )
    for rid, why in report.kept.items():
        t.add_row(rid, "kept", why)
    for rid, why in report.refused.items():
        t.add_row(rid, "[yellow]refused by the store[/]", why)
    stdout.print(t)
    if report.record:
        stdout.print(f"record: {report.record}")


def _day_time(iso: str | None) -> str:
    # "2027-06-01 04:40:59Z" wraps at the space at 80 columns; --json keeps microseconds.
    return (
        "-"
        if iso is None
        else iso[:19].replace("T", " ") + ("Z" if iso.endswith("+00:00") else iso[26:])
    )


@archive.command("retention-report")
@archive_option
@click.option(
    "--trusted-key",
    "trusted_keys",
    multiple=True,
    metavar="VKEY|@FILE",
    help="A log key (repeatable) [env TRACEVAULT_LOG_VKEYS]: checks freshness too.",
)
@click.option(
    "--witness-key",
    "witness_keys",
    multiple=True,
    metavar="VKEY|@FILE",
    help="A witness key whose cosigned sizes the archive must reach (repeatable).",
)
@click.option(
    "--witness-store",
    "witness_stores",
    multiple=True,
    metavar="URL",
    help="A witness's store (repeatable) [env TRACEVAULT_WITNESS_STORES, comma-separated].",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON (every object of every run).")
@click.pass_context
def retention_report_cmd(
    ctx: click.Context,
    archive_url: str | None,
    s3_endpoint_url: str | None,
    trusted_keys: tuple[str, ...],
    witness_keys: tuple[str, ...],
    witness_stores: tuple[str, ...],
    as_json: bool,
) -> None:
    """For every archived run: its objects' locks, checked against its receipts and the index.

    Flags, per run: objects unlocked or retained fewer than 183 days from when they were
    written (EU AI Act Art. 19); a store lock that disagrees with the retain-until its
    receipt states; objects missing (against the final receipt, the receipts and the day
    index) or extra; and on S3 delete markers and later versions over a locked original.
    With a log key, freshness too: each partition's archived log against the sizes the
    witness stores cosigned and the sealed topic's checkpoint the archiver committed past
    (when Kafka answers); a smaller archive is a rollback. Exits 1 when anything is flagged,
    with or without --json: use it as an audit check.

    \b
    Examples:
      tracevault archive retention-report
      tracevault archive retention-report --json > retention-evidence.json
      tracevault archive retention-report --trusted-key @log.vkey \\
          --witness-key @witness.vkey --witness-store file:///srv/witness
    """
    from tracevault.archive import retention_report  # noqa: PLC0415

    settings, store = store_from(
        ctx, create=False, archive_url=archive_url, s3_endpoint_url=s3_endpoint_url
    )
    with _progress("reading locks and receipts", not as_json) as progress:
        runs = retention_report(store, retention_days=settings.retention_days, progress=progress)
    fresh = _freshness(settings, trusted_keys, witness_keys, witness_stores)
    if as_json:
        echo_json([{**asdict(r), "ok": r.ok} for r in runs])
    else:
        # One cell per run, its id on a line of its own: side-by-side columns left the id a
        # third of 80 columns and cut UUIDs mid-id (tests/test_narrow_terminal.py)
        t = Table(title=f"retention of {store.url}", show_lines=True)
        t.add_column("run · objects, locks, earliest retain-until, hold · problems", ratio=1)
        for r in runs:
            modes = ",".join(sorted({o.lock_mode or "NONE" for o in r.objects}))
            cell = Text(r.run_id, "bold")
            until = _day_time(r.earliest_retain_until)
            held = ", legal hold" if r.held else ""
            cell.append(f"\n{len(r.objects)} objects, {modes}, until {until}{held}")
            cell.append("\n" + ("; ".join(r.problems) or "ok"), "red" if r.problems else "green")
            t.add_row(cell)
        stdout.print(t)
    if fresh is not None:  # on stderr: --json keeps its list of runs
        for line in () if as_json else fresh["notes"]:
            stderr.print(f"[yellow]freshness:[/] {line}")
        for line in fresh["rollbacks"]:
            stderr.print(f"[red]rollback:[/] {line}")
    bad = [r.run_id for r in runs if not r.ok]
    if bad:
        stderr.print(f"[red]{len(bad)} run(s) flagged: {bad[:5]}[/]")
    if bad or (fresh is not None and not fresh["ok"]):
        ctx.exit(1)


def _freshness(
    settings: Settings, trusted: tuple[str, ...], witness: tuple[str, ...], urls: tuple[str, ...]
) -> dict[str, Any] | None:
    """The archive's freshness (docs/log.md, "Freshness") as one JSON object, or None without
    a trusted log key (no size could be trusted)."""
    from tracevault.archive import archive_freshness  # noqa: PLC0415
    from tracevault.kafka import archived_tails  # noqa: PLC0415
    from tracevault.transparency import load_verifiers, load_witness_verifiers  # noqa: PLC0415

    conf = settings.log_vkeys.strip()
    vkeys = [] if not conf else [conf] if conf.startswith("@") else conf.split(",")
    vkeys = [v.strip() for v in [*vkeys, *trusted] if v.strip()]
    if not vkeys:
        return None
    stores = list(urls) or [u.strip() for u in settings.witness_stores.split(",") if u.strip()]
    got = archive_freshness(
        settings,
        keys=load_verifiers(vkeys),
        witnesses=load_witness_verifiers(witness),
        witness_urls=stores,
        tails=archived_tails(settings, timeout=3.0),
    )
    return {
        "freshness": True,
        "ok": got.ok,
        "rollbacks": [r.describe() for r in got.rollbacks],
        "compared": got.compared,
        "notes": got.notes,
    }
