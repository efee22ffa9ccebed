"""``tracevault replay``: show, verify, re-run, diff, export and batch-replay recorded runs."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from tracevault._clitools import echo_json, stderr, stdout
from tracevault.archive import open_store
from tracevault.content import metadata_only
from tracevault.errors import ChainError, ConfigError, LogError
from tracevault.replayer import _run_modes as run_modes
from tracevault.replayer._cliopts import (
    AGENT_KEY,
    FROM,
    JSON,
    NO_AGENT_CHECK,
    NO_LOG_CHECK,
    OFFLINE,
    WITNESS_STORE,
    Trust,
    end_options,
    load_for_export,
    log_options,
    no_verify_option,
    parse_day,
    settings_of,
    trust,
    trust_options,
)
from tracevault.replayer._verified import the_record, verified_bundle, verified_run
from tracevault.replayer._views import (
    chain_failure,
    differences_table,
    print_events,
    print_verified,
    progress_bar,
    summary_table,
)
from tracevault.replayer.batch.command import batch_cmd
from tracevault.replayer.batch.jobs import load_agent, runs_between
from tracevault.replayer.export.bundle import export_bundle
from tracevault.replayer.export.otel import export_otel
from tracevault.replayer.export.reveal import bundle_events, reveal_hook
from tracevault.replayer.investigate.aligned_diff import align_runs, parse_ignore
from tracevault.replayer.load.opened import opened
from tracevault.replayer.load.witnessed import with_witness_stores

__all__ = ["replay"]


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
      tracevault replay verify run-42 --from archive --trusted-key @log.vkey
      tracevault replay --archive-url s3://audit/tv \\
          --s3-endpoint-url http://minio:9000 \\
          verify run-42 --trusted-key @log.vkey
      tracevault replay run run-42 --agent myagents.support:run --until 12
      tracevault replay run run-42 --agent myagents.support:run --keep-going
      tracevault replay diff run-42 run-43 --ignore clock,random
      tracevault replay show run-42 --tree
      tracevault replay export run-42 -o evidence/run-42
      tracevault replay verify --bundle evidence/run-42 --trusted-key @log.vkey
      tracevault replay batch --agent myagents.support:run --since 2026-11-01

    \b
    Exit codes: 0 ok, 1 verification failure, unverified (no trusted log key) or
    divergence, 2 usage error, 3 not found or unreachable (every code:
    `tracevault --help`).
    """
    ctx.find_root().meta["replay.archive_url"] = archive_url
    ctx.find_root().meta["replay.s3_endpoint_url"] = s3_endpoint_url


# -- show -----------------------------------------------------------------------------------
@replay.command("show")
@click.argument("run_id", required=False)
@click.option("--tree", "as_tree", is_flag=True, help="The run and its sub-agent runs, as a tree.")
@click.option(
    "--metadata",
    "metadata",
    is_flag=True,
    help="An encrypted run's timeline without its key: content shown as <encrypted>.",
)
@click.option("--bundle", type=click.Path(file_okay=False, path_type=Path),
              help="Show an exported bundle's run instead (its chain checked).")  # fmt: skip
@click.option("--recipient-key", type=click.Path(dir_okay=False, path_type=Path),
              help="With --bundle: the private key it was revealed to (--reveal-to).")  # fmt: skip
@no_verify_option("Show the run")
@FROM
@trust_options
@JSON
@click.pass_context
def show(ctx: click.Context, /, run_id: str | None, as_tree: bool, metadata: bool,
         bundle: Path | None, recipient_key: Path | None, no_verify: bool, source: str,
         as_json: bool, **trust_flags: Any) -> None:  # fmt: skip
    """The run's timeline: seq, kind, time, model, short request and response.

    Verified first, as `verify` does; one that fails or is `unverified` is refused
    (exit 1), and --no-verify shows it as stored, headed UNVERIFIED. --json: one event
    per line. --tree: the run and its sub-agent runs (each verified), with --json one
    object. An encrypted run needs its tenant's key (exit 7); --metadata shows its
    timeline without. --bundle DIR shows a bundle's run (its chain checked);
    --recipient-key opens one exported with --reveal-to, with no provider.

    \b
    Example:
      tracevault replay show run-42 --from topic --json \\
          | jq 'select(.kind=="TOOL_CALL")'
      tracevault replay show run-42 --tree
      tracevault replay show --bundle evidence/run-42 --recipient-key auditor.key
    """
    if as_tree and metadata:
        raise click.UsageError("--metadata shows one run's timeline: drop --tree")
    if (bundle is None) == (run_id is None) or (recipient_key and (bundle is None or metadata)):
        raise click.UsageError("give RUN_ID or --bundle DIR (--recipient-key: with --bundle)")
    if bundle is not None:
        report, events = bundle_events(settings_of(ctx), bundle, recipient_key, metadata=metadata)
        print_events(report.run_id, events, "bundle", as_json)
        return
    assert run_id is not None
    checks = trust(settings_of(ctx), no_verify=no_verify, **trust_flags)
    try:
        if as_tree:  # each run of the tree checked as the run is
            run_modes.tree(run_id, lambda r: the_record(ctx, r, source, checks, "shows"),
                           as_json=as_json)  # fmt: skip
            return
        record = the_record(ctx, run_id, source, checks, "shows")
    except (ChainError, LogError) as exc:
        chain_failure(exc, as_json)
        return
    events = metadata_only(record.events) if metadata else opened(record.settings, record.events)
    status = "UNVERIFIED (--no-verify)" if no_verify else record.status
    print_events(run_id, events, source, as_json, status)


# -- verify ---------------------------------------------------------------------------------
@replay.command("verify")
@click.argument("run_id", required=False)
@FROM
@click.option(
    "--bundle",
    type=click.Path(file_okay=False, path_type=Path),
    help="Check an exported evidence bundle instead (no Kafka, no object store).",
)
@end_options
@NO_LOG_CHECK
@log_options
@NO_AGENT_CHECK
@AGENT_KEY
@WITNESS_STORE
@OFFLINE
@JSON
@click.pass_context
def verify_cmd(
    ctx: click.Context,
    *,
    run_id: str | None,
    source: str,
    bundle: Path | None,
    allow_unfinished: bool,
    require_finished: bool,
    no_log_check: bool,
    trusted_keys: tuple[str, ...],
    witness_keys: tuple[str, ...],
    min_witnesses: int | None,
    agent_key_pairs: tuple[str, ...],
    no_agent_check: bool,
    witness_stores: tuple[str, ...],
    offline: bool,
    as_json: bool,
) -> None:
    """Check the signed log, recompute the chain, check what the source offers.

    First the signed log, with the trusted keys (--trusted-key or
    TRACEVAULT_LOG_VKEYS): L1 checkpoint signature, this deployment's origin (and
    witnesses), L2 every event in the log, L3 RUN_FINISHED in the log, L4
    checkpoints consistent. Then records: run, seq contiguity, links, hashes,
    content, shape. Archive: segments, receipts, final receipt. Topic: the
    sequencer's committed head. Exit 1 names the first bad seq and object.

    Fails closed: with no trusted key the result is `unverified`, exit 1;
    --no-log-check checks the chain alone (exit 0 if it holds), which proves
    nothing against whoever can write the store. So is provenance (check I): no
    trusted agent vkey (--agent-key, TRACEVAULT_AGENT_VKEYS) is `unverified`, exit 1,
    unless --no-agent-check; an unsigned or unauthorised agent_id fails. A run
    without RUN_FINISHED fails L3 unless it can still be live (the sequencer's
    head says it is open, and its last event is younger than
    sequencer_idle_close_s); --allow-unfinished accepts a run in progress.

    From the archive, L5 holds its log to the sealed topic's checkpoint and to
    every witness store's (--witness-store): a smaller archive is a rollback, exit
    1. Only the topic proves it current: with Kafka unreachable the result is
    `unverified freshness`, exit 1, unless --offline accepts that knowingly.

    \b
    Examples:
      tracevault replay verify run-42 --from topic --trusted-key @log.vkey
      tracevault replay verify run-42 --from archive --trusted-key @log.vkey
      tracevault replay verify --bundle evidence/run-42 --trusted-key @log.vkey \\
          --witness-key @witness.vkey --json
    """
    try:
        settings = settings_of(ctx)
        checks = trust(
            settings,
            trusted_keys=trusted_keys,
            witness_keys=witness_keys,
            min_witnesses=min_witnesses,
            agent_key_pairs=agent_key_pairs,
            witness_stores=witness_stores,
            allow_unfinished=allow_unfinished,
            require_finished=require_finished,
            no_log_check=no_log_check,
            no_agent_check=no_agent_check,
            offline=offline,
        )
        if bundle is not None:
            report = verified_bundle(bundle, run_id, checks)
        else:
            if run_id is None:
                raise click.UsageError("RUN_ID is required (or --bundle DIR)")
            _, _, report = verified_run(ctx, run_id, source, checks)
    except (ChainError, LogError) as exc:
        chain_failure(exc, as_json)
        return
    print_verified(report, as_json)
    if not report.ok:  # no trusted log key or agent vkey: unverified, fail closed
        raise click.exceptions.Exit(1)


# -- run ------------------------------------------------------------------------------------
@replay.command("run")
@click.argument("run_id")
@click.option("--agent", "agent_spec", required=True, help="The agent as MODULE:CALLABLE.")
@click.option("--until", type=click.IntRange(0), help="Stop after seq N: the state at step N.")
@click.option(
    "--keep-going",
    is_flag=True,
    help="Report every divergence, aligned by kind, call site and ordinal.",
)
@click.option(
    "--then",
    "then",
    type=click.Choice(["live"]),
    help="With --until N: go on live after N, recorded as a new run (a fork).",
)
@click.option(
    "--live-edges",
    "live_spec",
    metavar="MODULE:FACTORY",
    help="With --then live: returns {'model': ..., 'tools': {...}} [AGENT_MODULE:live_edges].",
)
@click.option(
    "--live-tools",
    "live_tools",
    multiple=True,
    metavar="TOOL[,TOOL]",
    help="With --then live: side-effecting tools to run for real after N. Others are "
    "served their recorded result, or refused (exit 2) when the request differs.",
)
@click.option("--recurse", is_flag=True, help="Replay the sub-agent runs it served too.")
@no_verify_option("Re-run the record")
@FROM
@trust_options
@JSON
@click.pass_context
def run_cmd(
    ctx: click.Context,
    /,
    *,
    run_id: str,
    agent_spec: str,
    until: int | None,
    keep_going: bool,
    then: str | None,
    live_spec: str | None,
    live_tools: tuple[str, ...],
    recurse: bool,
    no_verify: bool,
    source: str,
    as_json: bool,
    **trust_flags: Any,
) -> None:
    """Re-run the agent with edges that serve the recorded responses; never the network.

    Exit 0 when the re-run matches the record (up to --until); exit 1 with a divergence
    report (seq, expected vs actual kind, JSON-path diff, what the record had next).

    The run is verified first, as `verify` does (the signed log with the trusted keys:
    --trusted-key or TRACEVAULT_LOG_VKEYS, then the chain), in the same walk that decodes
    it; one that does not verify is refused, exit 1 naming the check, and so is one with
    no trusted key (`unverified`). --no-verify re-runs it unverified, knowingly.

    --keep-going reports every divergence. --until N shows the events served up to N and
    the call the agent asked for next. --until N --then live forks: the record up to N,
    then the live model and tools, recorded as a new run (needs Kafka). A fork is safe by
    default: a side-effecting tool (Tool(fn, side_effect=True)) is not run after N unless
    named in --live-tools; it gets the recorded result of the same request, or is refused
    (exit 2) naming the tool. --recurse also replays the sub-agent runs the run started.

    \b
    Examples:
      tracevault replay run run-42 --agent myagents.support:run --from archive
      tracevault replay run run-42 --agent myagents.support:run --keep-going
      tracevault replay run run-42 --agent myagents.support:run --until 12 \\
          --then live --live-edges myagents.support:live_edges
      tracevault replay run run-42 --agent myagents.support:run --until 12 \\
          --then live --live-tools send_email
    """
    forking = then is not None or live_spec is not None or live_tools
    if forking and (then is None or until is None):
        raise click.UsageError("a fork needs both --until N and --then live")
    tools_live = tuple(t.strip() for spec in live_tools for t in spec.split(",") if t.strip())
    if keep_going and until is not None and then is None:
        raise click.UsageError("--keep-going replays the whole run: drop --until")
    if recurse and (until is not None or keep_going):
        raise click.UsageError("--recurse replays whole runs: drop --until/--keep-going")
    agent = load_agent(agent_spec)
    checks = trust(settings_of(ctx), no_verify=no_verify, **trust_flags)
    try:
        # verified and decoded in verify's one walk (bench/)
        record = the_record(ctx, run_id, source, checks, "re-runs")
    except (ChainError, LogError) as exc:
        chain_failure(exc, as_json)
        return
    settings, events = record.settings, opened(record.settings, record.events)
    if then is not None and until is not None:
        run_modes.fork(settings, events, agent, agent_spec, until,
                       live_spec=live_spec, as_json=as_json, live_tools=tools_live)  # fmt: skip
        return
    if recurse:

        def child(rid: str) -> Any:  # each sub-agent run checked as the run was
            sub = the_record(ctx, rid, source, checks, "re-runs")
            return opened(sub.settings, sub.events)

        try:
            run_modes.recurse(run_id, events, agent, child, as_json=as_json)
        except (ChainError, LogError) as exc:
            chain_failure(exc, as_json)
        return
    if keep_going:
        run_modes.keep_going(run_id, events, agent, as_json=as_json)
        return
    run_modes.plain(run_id, events, agent, until, as_json=as_json)


# -- diff -----------------------------------------------------------------------------------
@replay.command("diff")
@click.argument("run_a")
@click.argument("run_b")
@click.option(
    "--ignore",
    "ignore",
    multiple=True,
    metavar="KINDS",
    help="Skip these crossings in both runs: clock, random, state (comma-separated).",
)
@click.option(
    "--ignore-path",
    "ignore_paths",
    multiple=True,
    metavar="PATH",
    help="Skip fields under this JSON path, e.g. '$.response.output.took' ([*] any index).",
)
@no_verify_option("Compare the records")
@FROM
@trust_options
@JSON
@click.pass_context
def diff_cmd(
    ctx: click.Context,
    /,
    *,
    run_a: str,
    run_b: str,
    ignore: tuple[str, ...],
    ignore_paths: tuple[str, ...],
    no_verify: bool,
    source: str,
    as_json: bool,
    **trust_flags: Any,
) -> None:
    """Every difference between two runs, aligned by kind, call site and ordinal.

    Each difference shows its seq in both runs and both values side by side. Clock reads
    and random draws differ between any two honest runs: --ignore them, and --ignore-path
    the fields they feed. Exit 0 when nothing else differs, 1 when something does.

    Both runs are verified first, as `verify` does (with the trusted log keys); a run that
    does not verify, or has no trusted key (`unverified`), is refused, exit 1 naming it.
    --no-verify compares them unverified, knowingly.

    \b
    Example:
      tracevault replay diff run-42 run-43 --ignore clock,random \\
          --ignore-path '$.response.output.took'
    """
    kinds = parse_ignore(ignore)  # refuse a bad flag before loading anything
    checks = trust(settings_of(ctx), no_verify=no_verify, **trust_flags)
    sides: list[Any] = []
    try:
        for rid in (run_a, run_b):
            record = the_record(ctx, rid, source, checks, "compares")
            sides.append(opened(record.settings, record.events))
    except (ChainError, LogError) as exc:
        chain_failure(exc, as_json)
        return
    result = align_runs(sides[0], sides[1], ignore=kinds, ignore_paths=ignore_paths)
    if as_json:
        echo_json(result.to_json())
    else:
        stdout.print(summary_table(result.a, result.b))
        if result.same:
            stdout.print("[green]the runs are the same at every step[/]")
        else:
            stdout.print(differences_table(result))
    if not result.same:
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
@click.option(
    "--cosigned",
    "cosigned",
    multiple=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="A witness's cosigned copy of the run's checkpoint: its cosignatures go into "
    "the bundle (repeatable).",
)
@click.option("--reveal-to", metavar="KEY|@FILE",
              help="Add the run's data key sealed for this one recipient (keys generate "
              "--type recipient); without it the bundle is ciphertext only.")  # fmt: skip
@click.option("--no-verify", is_flag=True,
              help="With --otel: export the runs unverified (said on stderr); by default each "
              "must verify with a trusted log key, or it is refused (exit 1).")  # fmt: skip
@FROM
@log_options
@AGENT_KEY
@WITNESS_STORE
@OFFLINE
@JSON
@click.pass_context
def export_cmd(
    ctx: click.Context,
    /,
    run_ids: tuple[str, ...],
    out_dir: Path | None,
    otel: bool,
    endpoint: str | None,
    content: bool,
    since: str | None,
    until_: str | None,
    cosigned: tuple[Path, ...],
    reveal_to: str | None,
    no_verify: bool,
    source: str,
    as_json: bool,
    **trust_flags: Any,
) -> None:
    """Write a self-contained evidence bundle: raw bytes, events, chain, receipts, schemas.

    The run must verify first (with a trusted key, its signed log too); the bundle carries
    a C2SP tlog-proof per event and the checkpoint when the source has them. Check the
    bundle anywhere with `verify --bundle DIR --trusted-key K`. An encrypted run's bundle is
    ciphertext only; --reveal-to KEY adds its data key sealed for one recipient (`show
    --bundle DIR --recipient-key FILE`). With --otel (the otel extra), runs become
    OpenTelemetry GenAI spans to --endpoint or -o FILE (docs/integrations.md, "Seeing runs
    in Phoenix or Jaeger"), each verified first as `verify` does: one that does not
    verify, or has no trusted log key (`unverified`), is refused, exit 1; --no-verify
    exports them unverified, knowingly.

    \b
    Example:
      tracevault replay export run-42 -o evidence/run-42
      tracevault replay verify --bundle evidence/run-42 --trusted-key @log.vkey
      tracevault replay export run-42 --otel --endpoint http://localhost:4318
      tracevault replay export --otel --since 2026-11-01 -o november.json
    """
    settings = settings_of(ctx)
    checks = trust(settings, no_verify=no_verify, **trust_flags)
    if otel:
        _otel(ctx, run_ids, (since, until_), source, checks, out=out_dir, endpoint=endpoint,
              content=content, reveal_to=reveal_to, as_json=as_json)  # fmt: skip
        return
    if (
        len(run_ids) != 1 or out_dir is None or endpoint or content or since or until_
        or no_verify or trust_flags["agent_key_pairs"] or trust_flags["offline"]
    ):  # fmt: skip
        raise ConfigError("export writes one run's bundle: RUN_ID -o DIR (--endpoint, --content, "
                          "--since, --no-verify, --agent-key, --offline need --otel)")  # fmt: skip
    (run_id,) = run_ids
    policy, witness_stores = checks.policy, checks.witness_stores
    store = (
        open_store(settings.archive_url, settings, create=False) if source == "archive" else None
    )
    try:
        with stderr.status(f"loading {run_id} from the {source}…"):
            run = load_for_export(settings, store, run_id)
            run = with_witness_stores(settings, run, policy, witness_stores)
            reveal = reveal_hook(settings, run, reveal_to)
        with progress_bar() as progress:
            task = progress.add_task("exporting", total=len(run))
            report = export_bundle(
                run,
                out_dir,
                store=store,
                progress=lambda n: progress.advance(task, n),
                log=policy,
                cosigned=[p.read_text(encoding="utf-8") for p in cosigned],
                reveal=reveal,
            )
    finally:
        if store is not None:
            store.close()
    if as_json:
        echo_json({**report.to_json(), "bundle": str(out_dir)})
    else:
        stdout.print(f"[green]exported[/] {report.count} events of {run_id} to {out_dir}")


def _otel(
    ctx: click.Context,
    run_ids: tuple[str, ...],
    window: tuple[str | None, str | None],
    source: str,
    checks: Trust,
    *,
    out: Path | None,
    endpoint: str | None,
    content: bool,
    reveal_to: str | None,
    as_json: bool,
) -> None:
    """``export --otel``: the runs named and those archived in ``window`` (``--since``,
    ``--until``), each taken as the record (``the_record``: verified, or ``--no-verify``)."""
    if reveal_to:
        raise ConfigError("--reveal-to adds a key to a bundle: drop --otel")
    first = parse_day(window[0], "--since")
    if first is not None:
        last = parse_day(window[1], "--until") or datetime.now(UTC).date()
        run_ids = (*run_ids, *runs_between(settings_of(ctx), first, last))
    if not run_ids:
        raise ConfigError("--otel needs RUN_ID... or --since DAY (no run to export)")
    try:
        export_otel(
            lambda rid: the_record(ctx, rid, source, checks, "exports"),
            run_ids,
            out=out,
            endpoint=endpoint,
            content=content,
            as_json=as_json,
        )
    except (ChainError, LogError) as exc:
        chain_failure(exc, as_json)


replay.add_command(batch_cmd)
