"""``tracevault replay``: show, verify, re-run, diff, export and batch-replay recorded runs."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from tracevault._clitools import echo_json, settings_from, stderr, stdout
from tracevault.archive import open_store
from tracevault.config import Settings
from tracevault.errors import ChainError, ConfigError, LogError, ReplayDivergence
from tracevault.log import load_verifiers
from tracevault.replayer._archive import load_from_archive
from tracevault.replayer._batch import BatchItem, load_agent, replay_with, run_batch, runs_between
from tracevault.replayer._bundle import export_bundle, verify_bundle
from tracevault.replayer._load import load_run
from tracevault.replayer._records import LazyEvents
from tracevault.replayer._results import DivergenceReport, LoadedRun, StepSummary, VerifyReport
from tracevault.replayer._rundiff import RunDiffSide, diff_runs
from tracevault.replayer._timeline import steps_table
from tracevault.replayer._verify import verify
from tracevault.schemas import EventModel

__all__ = ["replay"]

_FROM = click.option(
    "--from",
    "source",
    type=click.Choice(["topic", "archive"]),
    default="archive",
    show_default=True,
    help="Read the run from the sealed Kafka topic or from the archive.",
)
_JSON = click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")


def _settings(ctx: click.Context) -> Settings:
    meta = ctx.find_root().meta
    return settings_from(
        ctx,
        archive_url=meta.get("replay.archive_url"),
        s3_endpoint_url=meta.get("replay.s3_endpoint_url"),
    )


def _load(ctx: click.Context, run_id: str, source: str) -> tuple[Settings, LoadedRun]:
    settings = _settings(ctx)
    with stderr.status(f"loading {run_id} from the {source}…"):
        run = load_run(settings, run_id, source="topic" if source == "topic" else "archive")
    return settings, run


@click.group()
@click.option(
    "--archive-url",
    envvar="TRACEVAULT_ARCHIVE_URL",
    help="file://PATH or s3://BUCKET/PREFIX [env TRACEVAULT_ARCHIVE_URL].",
)
@click.option(
    "--s3-endpoint-url",
    envvar="TRACEVAULT_S3_ENDPOINT_URL",
    help="S3 endpoint for MinIO or another S3-compatible store [env TRACEVAULT_S3_ENDPOINT_URL].",
)
@click.pass_context
def replay(ctx: click.Context, archive_url: str | None, s3_endpoint_url: str | None) -> None:
    """Rebuild, verify, re-run and diff recorded runs, from the topic or the archive.

    \b
    Examples:
      tracevault replay show run-42 --from topic
      tracevault replay verify run-42 --from archive
      tracevault replay --archive-url s3://audit/tv \\
          --s3-endpoint-url http://minio:9000 verify run-42
      tracevault replay run run-42 --agent myagents.support:run --until 12
      tracevault replay diff run-42 run-43
      tracevault replay export run-42 -o evidence/run-42
      tracevault replay verify --bundle evidence/run-42
      tracevault replay batch --agent myagents.support:run --since 2026-11-01

    \b
    Exit codes: 0 ok, 1 verification failure or divergence, 2 usage error,
    3 not found or unreachable (every code: `tracevault --help`).
    """
    ctx.find_root().meta["replay.archive_url"] = archive_url
    ctx.find_root().meta["replay.s3_endpoint_url"] = s3_endpoint_url


# -- show -----------------------------------------------------------------------------------
@replay.command("show")
@click.argument("run_id")
@_FROM
@_JSON
@click.pass_context
def show(ctx: click.Context, run_id: str, source: str, as_json: bool) -> None:
    """The run's timeline: seq, kind, time, model, short request and response.

    Not verified (use `verify`); --json prints one full event per line (JSON lines).

    \b
    Example:
      tracevault replay show run-42 --from topic --json \\
          | jq 'select(.kind=="TOOL_CALL")'
    """
    _, run = _load(ctx, run_id, source)
    events = LazyEvents([r["raw"] for r in run.records.rows])
    if as_json:
        for ev in events:
            click.echo(EventModel.from_event(ev).model_dump_json())
        return
    day = StepSummary.of(events[0]).at_iso[:10] if len(events) else ""
    title = f"run {run_id}: {len(events)} events from the {source}, started {day} (UTC)"
    steps = (StepSummary.of(ev) for ev in events)
    stdout.print(steps_table(steps, title=title, width=stdout.width))


# -- verify ---------------------------------------------------------------------------------
def _verify_table(report: VerifyReport) -> Table:
    t = Table(title=f"run {report.run_id}: {report.status} ({report.source})")
    t.add_column("check")
    t.add_column("result")
    for c in report.checks:
        t.add_row(c, "[green]ok[/]")
    return t


def _print_verified(report: VerifyReport, as_json: bool) -> None:
    if as_json:
        echo_json(report.to_json())
        return
    stdout.print(_verify_table(report))
    stdout.print(
        f"{report.count} events, seq 0..{report.last_seq}, head {report.head[:16]}…, "
        f"finished: {report.finished}"
    )
    for w in report.warnings:
        stdout.print(f"[yellow]warning:[/] {w}")


def _chain_failure(exc: ChainError, as_json: bool) -> None:
    if as_json:
        echo_json({"ok": False, "seq": exc.seq, "object": exc.obj, "error": str(exc)})
        raise click.exceptions.Exit(1)
    raise exc


@replay.command("verify")
@click.argument("run_id", required=False)
@_FROM
@click.option(
    "--bundle",
    type=click.Path(file_okay=False, path_type=Path),
    help="Check an exported evidence bundle instead (no Kafka, no object store).",
)
@click.option("--require-finished", is_flag=True, help="Fail (exit 1) on an unfinished run.")
@click.option(
    "--trusted-key",
    "trusted_keys",
    multiple=True,
    metavar="VKEY|@FILE",
    help="A log verifier key to trust (repeatable; adds to TRACEVAULT_LOG_VKEYS): checks "
    "L1-L4 of docs/log.md before the chain.",
)
@_JSON
@click.pass_context
def verify_cmd(
    ctx: click.Context,
    *,
    run_id: str | None,
    source: str,
    bundle: Path | None,
    require_finished: bool,
    trusted_keys: tuple[str, ...],
    as_json: bool,
) -> None:
    """Recompute the chain from genesis and check everything the source offers.

    Records: run, seq contiguity, links, hashes, content, shape. Archive: segments, receipts,
    object hashes, final receipt. Topic: the sequencer's committed head. Exit 1 names the
    first bad seq and object. An unfinished run verifies and is reported as unfinished.

    \b
    Examples:
      tracevault replay verify run-42 --from archive
      tracevault replay verify --bundle evidence/run-42 --json
    """
    try:
        if bundle is not None:
            if run_id is not None:
                raise click.UsageError("give RUN_ID or --bundle, not both")
            with stderr.status(f"checking bundle {bundle}…"):
                report = verify_bundle(bundle)
        else:
            if run_id is None:
                raise click.UsageError("RUN_ID is required (or --bundle DIR)")
            settings, run = _load(ctx, run_id, source)
            vkeys = [*trusted_keys, *(k for k in settings.log_vkeys.split(",") if k.strip())]
            keys = load_verifiers(k.strip() for k in vkeys)
            with stderr.status(f"verifying {len(run)} events…"):
                report = verify(run, require_finished=require_finished, keys=keys)
    except LogError as exc:
        _chain_failure(ChainError(str(exc), exc.seq, exc.obj or exc.checkpoint), as_json)
        return
    except ChainError as exc:
        _chain_failure(exc, as_json)
        return
    _print_verified(report, as_json)


# -- run ------------------------------------------------------------------------------------
def _divergence_panel(d: DivergenceReport) -> None:
    stdout.print(f"[red bold]diverged at seq {d.seq}[/]: {d.reason}")
    t = Table(show_header=False)
    t.add_column("")
    t.add_column("", overflow="fold")
    t.add_row("expected kind", d.expected or "(end of record)")
    t.add_row("actual kind", d.actual or "(no further call)")
    for line in d.diff:
        t.add_row("diff", line)
    stdout.print(t)
    if d.next_in_record:
        stdout.print(
            steps_table(
                d.next_in_record,
                title="what the record says came next",
                width=stdout.width,
                with_time=False,
            )
        )


@replay.command("run")
@click.argument("run_id")
@click.option("--agent", "agent_spec", required=True, help="The agent as MODULE:CALLABLE.")
@click.option("--until", type=click.IntRange(0), help="Stop after seq N: the state at step N.")
@click.option("--no-verify", is_flag=True, help="Re-run even if the run does not verify.")
@_FROM
@_JSON
@click.pass_context
def run_cmd(
    ctx: click.Context,
    *,
    run_id: str,
    agent_spec: str,
    until: int | None,
    no_verify: bool,
    source: str,
    as_json: bool,
) -> None:
    """Re-run the agent with edges that serve the recorded responses; never the network.

    Exit 0 when the re-run matches the record (up to --until); exit 1 with a divergence
    report (seq, expected vs actual kind, JSON-path diff, what the record had next).
    A run that does not verify is refused unless --no-verify.

    \b
    Example:
      tracevault replay run run-42 --agent myagents.support:run --from archive
    """
    agent = load_agent(agent_spec)
    _, run = _load(ctx, run_id, source)
    if no_verify:
        events: Any = LazyEvents([r["raw"] for r in run.records.rows])
    else:
        events = verify(run).events
    result = replay_with(events, agent, until)
    if as_json:
        echo_json(result.to_json())
    elif result.divergence is not None:
        _divergence_panel(result.divergence)
    else:
        what = f"stopped after seq {until}" if result.stopped else "matched the record"
        stdout.print(f"[green]run {run_id}: {what}[/] ({result.steps} events served)")
        if result.error is not None:
            stdout.print(f"the agent raised {result.error.type}, as recorded")
    if result.divergence is not None:
        raise click.exceptions.Exit(ReplayDivergence.exit_code)


# -- diff -----------------------------------------------------------------------------------
def _outcome(side: RunDiffSide) -> str:
    return side.error or json.dumps(side.output, ensure_ascii=False)[:80]


def _summary_table(a: RunDiffSide, b: RunDiffSide) -> Table:
    t = Table(title="runs")
    t.add_column("")
    t.add_column(f"A {a.run_id}", overflow="fold")
    t.add_column(f"B {b.run_id}", overflow="fold")
    t.add_row("events", str(a.count), str(b.count))
    t.add_row("finished", str(a.finished), str(b.finished))
    t.add_row("agent", a.agent, b.agent)
    t.add_row("models", ", ".join(a.models), ", ".join(b.models))
    t.add_row("kinds", json.dumps(a.kinds), json.dumps(b.kinds))
    t.add_row("outcome", _outcome(a), _outcome(b))
    return t


@replay.command("diff")
@click.argument("run_a")
@click.argument("run_b")
@click.option("--no-verify", is_flag=True, help="Compare even if a run does not verify.")
@_FROM
@_JSON
@click.pass_context
def diff_cmd(
    ctx: click.Context, *, run_a: str, run_b: str, no_verify: bool, source: str, as_json: bool
) -> None:
    """Where two runs first diverge, with the same report as `run`, and both summaries.

    Exit 0 when every step is the same, 1 when they diverge.

    \b
    Example:
      tracevault replay diff run-42 run-43 --from archive
    """
    sides: list[Any] = []
    for rid in (run_a, run_b):
        _, run = _load(ctx, rid, source)
        sides.append(
            LazyEvents([r["raw"] for r in run.records.rows]) if no_verify else verify(run).events
        )
    result = diff_runs(sides[0], sides[1])
    if as_json:
        echo_json(result.to_json())
    else:
        stdout.print(_summary_table(result.a, result.b))
        if result.divergence is None:
            stdout.print("[green]the runs are the same at every step[/]")
        else:
            _divergence_panel(result.divergence)
    if result.divergence is not None:
        raise click.exceptions.Exit(1)


# -- export ---------------------------------------------------------------------------------
@replay.command("export")
@click.argument("run_ids", metavar="RUN_ID...", nargs=-1)
@click.option(
    "-o",
    "--output",
    "out_dir",
    type=click.Path(path_type=Path),
    help="A new (or empty) folder for the bundle; with --otel, the OTLP JSON file.",
)
@click.option("--otel", is_flag=True, help="Export OpenTelemetry GenAI spans instead of a bundle.")
@click.option("--endpoint", help="With --otel: send OTLP/HTTP to this collector URL.")
@click.option("--content", is_flag=True, help="With --otel: include messages and tool I/O.")
@click.option("--since", help="With --otel: every run archived from this UTC day (YYYY-MM-DD).")
@click.option("--until", "until_", help="With --since: the last UTC day, inclusive [today].")
@_FROM
@_JSON
@click.pass_context
def export_cmd(
    ctx: click.Context,
    run_ids: tuple[str, ...],
    out_dir: Path | None,
    otel: bool,
    endpoint: str | None,
    content: bool,
    since: str | None,
    until_: str | None,
    source: str,
    as_json: bool,
) -> None:
    """Write a self-contained evidence bundle: raw bytes, events, chain, receipts, schemas.

    The run must verify first. Check the bundle anywhere with `verify --bundle DIR`. With
    --otel, verified runs (one or many) become OpenTelemetry GenAI spans, sent to a collector
    (--endpoint) or written as OTLP JSON (-o FILE); see README "Seeing runs in Phoenix or Jaeger".

    \b
    Example:
      tracevault replay export run-42 -o evidence/run-42
      tracevault replay verify --bundle evidence/run-42
      tracevault replay export run-42 --otel --endpoint http://localhost:4318
      tracevault replay export --otel --since 2026-11-01 -o november.json
    """
    if otel:
        first = _day(since, "--since")
        if first is not None:
            last = _day(until_, "--until") or datetime.now(UTC).date()
            run_ids = (*run_ids, *runs_between(_settings(ctx), first, last))
        if not run_ids:
            raise ConfigError("--otel needs RUN_ID... or --since DAY (no run to export)")
        _export_otel(ctx, run_ids, out_dir, endpoint, content, source, as_json)
        return
    if len(run_ids) != 1 or out_dir is None or endpoint or content or since or until_:
        raise ConfigError(
            "export writes one run's bundle: RUN_ID -o DIR (--endpoint, --content, --since "
            "need --otel)"
        )
    (run_id,) = run_ids
    settings = _settings(ctx)
    store = open_store(settings.archive_url, settings) if source == "archive" else None
    try:
        with stderr.status(f"loading {run_id} from the {source}…"):
            run = (
                load_from_archive(store, run_id)
                if store is not None
                else load_run(settings, run_id, source="topic")
            )
        with _progress() as progress:
            task = progress.add_task("exporting", total=len(run))
            report = export_bundle(
                run, out_dir, store=store, progress=lambda n: progress.advance(task, n)
            )
    finally:
        if store is not None:
            store.close()
    if as_json:
        echo_json({**report.to_json(), "bundle": str(out_dir)})
    else:
        stdout.print(f"[green]exported[/] {report.count} events of {run_id} to {out_dir}")


def _export_otel(
    ctx: click.Context,
    run_ids: tuple[str, ...],
    out: Path | None,
    endpoint: str | None,
    content: bool,
    source: str,
    as_json: bool,
) -> None:
    """Verify each run, then send or write one OTLP request holding all of them."""
    if (out is None) == (endpoint is None):
        raise ConfigError("--otel needs exactly one of --endpoint URL or -o FILE.json")
    # The exporter needs the `otel` extra: imported only when asked for.
    from tracevault.integrations.otel import ExportedRun, otlp_json, otlp_request, send_otlp  # noqa: PLC0415

    runs = []
    for run_id in run_ids:
        _, loaded = _load(ctx, run_id, source)
        report = verify(loaded)
        hashes = {r.seq: r.hash for r in loaded.records}
        runs.append(ExportedRun(run_id, report.events, hashes, report.head, report.status))
    request = otlp_request(runs, content=content)
    spans = sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)
    if endpoint is not None:
        target = send_otlp(request, endpoint)
    else:
        assert out is not None
        out.write_text(json.dumps(otlp_json(request), indent=1) + "\n", encoding="utf-8")
        target = str(out)
    if as_json:
        echo_json({"runs": list(run_ids), "spans": spans, "to": target, "content": content})
    else:
        stdout.print(f"[green]exported[/] {spans} spans of {len(runs)} run(s) to {target}")


# -- batch ----------------------------------------------------------------------------------
def _progress() -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=stderr,
        transient=True,
    )


def _day(value: str | None, name: str) -> date | None:
    if value is None:
        return None
    try:
        return date.fromisoformat(value[:10])
    except ValueError:
        raise ConfigError(f"{name} must be a date like 2026-11-29, got {value!r}") from None


@replay.command("batch")
@click.option("--agent", "agent_spec", required=True, help="The agent as MODULE:CALLABLE.")
@click.option(
    "--from",
    "source",
    type=click.Choice(["archive"]),
    default="archive",
    show_default=True,
    help="Batch jobs read the archive.",
)
@click.option("--since", required=True, help="First UTC day (YYYY-MM-DD).")
@click.option("--until", "until_", help="Last UTC day, inclusive [today].")
@click.option("--workers", type=click.IntRange(1, 64), default=1, show_default=True)
@_JSON
@click.pass_context
def batch_cmd(
    ctx: click.Context,
    *,
    agent_spec: str,
    source: str,
    since: str,
    until_: str | None,
    workers: int,
    as_json: bool,
) -> None:
    """Replay every run archived in a window, in parallel processes; exit 1 if any diverged.

    \b
    Example:
      tracevault replay batch --agent myagents.support:run --since 2026-11-01 \\
          --workers 2 --json
    """
    settings = _settings(ctx)
    first = _day(since, "--since")
    assert first is not None
    last = _day(until_, "--until") or datetime.now(UTC).date()
    with _progress() as progress:
        task = progress.add_task("replaying", total=None)

        def on_item(item: BatchItem) -> None:
            progress.advance(task, 1)

        report = run_batch(
            settings,
            agent_spec,
            first,
            last,
            workers=workers,
            on_item=on_item,
            on_total=lambda n: progress.update(task, total=n),
        )
    if as_json:
        echo_json(report.to_json())
    else:
        # The detail sits under its run id, so at 80 columns neither is cut mid-word.
        t = Table(title=f"replay of runs archived {first} .. {last}")
        t.add_column("run, detail", overflow="fold", ratio=1)
        t.add_column("status", no_wrap=True)
        for col in ("events", "served", "seq"):
            t.add_column(col, justify="right", no_wrap=True)
        colour = {"ok": "green", "diverged": "red", "verify_failed": "red", "error": "yellow"}
        for it in report.items:
            cell = Text(it.run_id)
            if it.detail:
                cell.append("\n" + it.detail.splitlines()[0], style="dim")
            t.add_row(
                cell,
                f"[{colour[it.status]}]{it.status}[/]",
                str(it.count),
                str(it.steps),
                "" if it.seq is None else str(it.seq),
            )
        stdout.print(t)
        stdout.print(" ".join(f"{k}={v}" for k, v in report.totals().items()))
    if not report.ok:
        raise click.exceptions.Exit(1)
