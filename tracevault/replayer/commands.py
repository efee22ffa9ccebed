"""``tracevault replay``: show, verify, re-run, diff, export and batch-replay recorded runs."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from tracevault._clitools import echo_json, settings_from, stderr, stdout
from tracevault.archive import open_store
from tracevault.config import Settings
from tracevault.errors import ChainError, ConfigError, LogError, ReplayDivergence
from tracevault.replayer._aligndiff import RunAlignment, align_runs, parse_ignore
from tracevault.replayer._archive import load_from_archive
from tracevault.replayer._batch import load_agent, replay_with, run_batch, runs_between
from tracevault.replayer._batch_view import print_batch
from tracevault.replayer._bundle import export_bundle, verify_bundle
from tracevault.replayer._dask import DaskEngine
from tracevault.replayer._diff import short_json
from tracevault.replayer._junit import junit_xml
from tracevault.replayer._load import load_run
from tracevault.replayer._log import NOT_CHECKED, LogPolicy
from tracevault.replayer._records import LazyEvents
from tracevault.replayer._replay import areplay
from tracevault.replayer._replay import replay as replay_events
from tracevault.replayer._results import (
    DivergenceReport,
    LoadedRun,
    ReplayResult,
    StepSummary,
    VerifyReport,
    event_json,
)
from tracevault.replayer._rundiff import RunDiffSide
from tracevault.replayer._timeline import steps_table
from tracevault.replayer._tree import RunNode, TreeReplay, replay_tree, run_tree
from tracevault.replayer._verify import verify
from tracevault.replayer._witnessed import with_witness_stores
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


def _log_options(f: Any) -> Any:
    """--trusted-key, --witness-key, --min-witnesses: the public keys a check trusts.

    Defined once for every source (topic, archive, bundle) and every command that verifies.
    """
    f = click.option(
        "--min-witnesses",
        type=click.IntRange(0),
        help="Witness cosignatures required [1 with --witness-key].",
    )(f)
    f = click.option(
        "--witness-key",
        "witness_keys",
        multiple=True,
        metavar="VKEY|@FILE",
        help="A witness key whose cosignature counts (repeatable).",
    )(f)
    return click.option(
        "--trusted-key",
        "trusted_keys",
        multiple=True,
        metavar="VKEY|@FILE",
        help="A log key to trust (repeatable; adds to TRACEVAULT_LOG_VKEYS): "
        "checks the signed log (L1-L4) first.",
    )(f)


_WITNESS_STORE = click.option(
    "--witness-store",
    "witness_stores",
    multiple=True,
    metavar="URL",
    help="A witness's store (file:// or s3://) to read its cosigned checkpoint of the "
    "run from (repeatable) [env TRACEVAULT_WITNESS_STORES, comma-separated].",
)


def _log_policy(
    settings: Settings, trusted: tuple[str, ...], witness: tuple[str, ...], least: int | None
) -> LogPolicy | None:
    return LogPolicy.of(settings, trusted, witness, least)


def _witness_stores_need(policy: LogPolicy | None, stores: tuple[str, ...]) -> None:
    if stores and policy is None:
        raise ConfigError("--witness-store needs the log's key too: give --trusted-key")


def _settings(ctx: click.Context) -> Settings:
    meta = ctx.find_root().meta
    return settings_from(
        ctx,
        archive_url=meta.get("replay.archive_url"),
        s3_endpoint_url=meta.get("replay.s3_endpoint_url"),
    )


def _load(
    ctx: click.Context, run_id: str, source: str, *, with_log: bool = False
) -> tuple[Settings, LoadedRun]:
    settings = _settings(ctx)
    with stderr.status(f"loading {run_id} from the {source}…"):
        run = load_run(
            settings,
            run_id,
            source="topic" if source == "topic" else "archive",
            with_log=with_log,
        )
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
      tracevault replay run run-42 --agent myagents.support:run --keep-going
      tracevault replay diff run-42 run-43 --ignore clock,random
      tracevault replay show run-42 --tree
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
def _run_tree(node: RunNode) -> Tree:
    def label(n: RunNode) -> Text:
        text = Text(f"run {n.run_id}", style="bold")
        done = "finished" if n.finished else "unfinished"
        text.append(f"  {n.agent}, {n.count} events, {done}")
        if n.forked_from is not None:
            text.append(f"\nforked from {n.forked_from[0]} at seq {n.forked_from[1]}", style="dim")
        if n.parent is not None:
            text.append(f"\nchild of {n.parent[0]} at seq {n.parent[1]}", style="dim")
        return text

    def add(tree: Tree, n: RunNode) -> None:
        for child, sub in n.children:
            head = Text(f"seq {child.seq} subagent {child.name} → ", style="cyan")
            if isinstance(sub, str):
                tree.add(head + Text(f"{child.run_id}: {sub}", style="yellow"))
            else:
                add(tree.add(head + label(sub)), sub)

    root = Tree(label(node))
    add(root, node)
    return root


@replay.command("show")
@click.argument("run_id")
@click.option("--tree", "as_tree", is_flag=True, help="The run and its sub-agent runs, as a tree.")
@_FROM
@_JSON
@click.pass_context
def show(ctx: click.Context, run_id: str, as_tree: bool, source: str, as_json: bool) -> None:
    """The run's timeline: seq, kind, time, model, short request and response.

    Not verified (use `verify`); --json prints one full event per line (JSON lines).
    --tree draws the run and every sub-agent run below it (verified), each under the
    parent's crossing that started it; with --json, one nested object.

    \b
    Example:
      tracevault replay show run-42 --from topic --json \\
          | jq 'select(.kind=="TOOL_CALL")'
      tracevault replay show run-42 --tree
    """
    if as_tree:
        load = _loader(ctx, source, no_verify=False)
        node = run_tree(load, run_id, load(run_id))
        if as_json:
            echo_json(node.to_json())
        else:
            stdout.print(_run_tree(node))
        return
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
    if report.checkpoint:
        stdout.print(f"signed log: checkpoint {report.checkpoint}")
    for w in report.warnings:
        stdout.print(f"[yellow]warning:[/] {w}")
    if not report.log_checked:
        stdout.print(f"[yellow bold]warning:[/] {NOT_CHECKED}")


def _chain_failure(exc: ChainError | LogError, as_json: bool) -> None:
    if as_json:
        out = {"ok": False, "seq": exc.seq, "object": exc.obj, "error": str(exc)}
        if isinstance(exc, LogError):
            out["checkpoint"] = exc.checkpoint
            # a failed signature or proof is the checkpoint's fault: name its object
            out["object"] = exc.obj or exc.checkpoint
        echo_json(out)
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
@_log_options
@_WITNESS_STORE
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
    witness_keys: tuple[str, ...],
    min_witnesses: int | None,
    witness_stores: tuple[str, ...],
    as_json: bool,
) -> None:
    """Check the signed log, recompute the chain, check what the source offers.

    With a trusted key (--trusted-key or TRACEVAULT_LOG_VKEYS), first the signed
    log: L1 checkpoint signature (and witnesses), L2 every event in the log, L3
    RUN_FINISHED in the log, L4 checkpoints consistent. Without one, a warning
    says the log was not checked. Then records: run, seq contiguity, links,
    hashes, content, shape. Archive: segments, receipts, final receipt. Topic:
    the sequencer's committed head. Exit 1 names the first bad seq and object.

    \b
    Examples:
      tracevault replay verify run-42 --from topic --trusted-key @log.vkey
      tracevault replay verify run-42 --from archive
      tracevault replay verify --bundle evidence/run-42 --trusted-key @log.vkey \\
          --witness-key @witness.vkey --json
    """
    try:
        policy = _log_policy(_settings(ctx), trusted_keys, witness_keys, min_witnesses)
        _witness_stores_need(policy, witness_stores)
        if bundle is not None:
            if run_id is not None:
                raise click.UsageError("give RUN_ID or --bundle, not both")
            if witness_stores:
                raise click.UsageError(
                    "--witness-store reads a run's source; a bundle "
                    "carries its cosignatures (export --witness-store)"
                )
            with stderr.status(f"checking bundle {bundle}…"):
                report = verify_bundle(bundle, log=policy)
        else:
            if run_id is None:
                raise click.UsageError("RUN_ID is required (or --bundle DIR)")
            settings, run = _load(ctx, run_id, source, with_log=policy is not None)
            run = with_witness_stores(settings, run, policy, witness_stores)
            with stderr.status(f"verifying {len(run)} events…"):
                report = verify(run, require_finished=require_finished, log=policy)
    except (ChainError, LogError) as exc:
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


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _divergences_table(run_id: str, found: tuple[DivergenceReport, ...]) -> Table:
    """Every divergence of a keep-going re-run, one row each, readable at 80 columns."""
    t = Table(title=f"run {run_id}: {_count(len(found), 'divergence')}", show_lines=True)
    t.add_column("seq", justify="right", no_wrap=True)
    t.add_column("record → re-run", no_wrap=True)
    t.add_column("what, where, differences", overflow="fold", ratio=1)
    for d in found:
        cell = Text(d.reason)
        if d.site:
            cell.append(f"\nat {d.site}", style="dim")
        for line in d.diff[:5]:
            cell.append(f"\n{line}")
        kinds = f"{d.expected or '(none)'}\n→ {d.actual or '(none)'}"
        t.add_row(str(d.seq), kinds, cell)
    return t


def _replay_all(events: Any, agent: Any) -> ReplayResult:
    if inspect.iscoroutinefunction(agent):
        return asyncio.run(areplay(events, agent, keep_going=True))
    return replay_events(events, agent, keep_going=True)


def _state_at(run_id: str, result: ReplayResult, record_next: Any) -> None:
    """``--until N``: the timeline served up to N, the agent's next call, the record's."""
    title = f"run {run_id}: served up to seq {result.until} (the state at step {result.until})"
    served = (StepSummary.of(ev) for ev in result.served)
    stdout.print(steps_table(served, title=title, width=stdout.width, with_time=False))
    asked = result.next_call
    t = Table(title="what comes next", show_header=False, show_lines=True)
    t.add_column("", no_wrap=True)
    t.add_column("", overflow="fold", ratio=1)
    if asked is None:
        t.add_row("the agent", "(asked for nothing more)")
    else:
        cell = Text(asked.kind, style="bold")
        if asked.model:
            cell.append(f" {asked.model}")
        cell.append(f"\n{short_json(asked.request, 300)}")
        if asked.site:
            cell.append(f"\nat {asked.site}", style="dim")
        t.add_row("the agent\nasked for", cell)
    if record_next is not None:
        s = StepSummary.of(record_next)
        t.add_row(f"the record\nseq {s.seq}", Text(f"{s.kind}\n{s.request}\n← {s.response}"))
    stdout.print(t)


def _fork(
    ctx: click.Context,
    events: Any,
    agent: Any,
    agent_spec: str,
    until: int,
    live_spec: str | None,
    as_json: bool,
    live_tools: tuple[str, ...] = (),
) -> None:
    """``--until N --then live``: the record up to N, then the live edges, as a new run."""
    # the fork records through the producer (the Kafka client): imported only when asked for
    from tracevault.producer import Publisher  # noqa: PLC0415
    from tracevault.replayer.fork import fork_run, live_edges_from  # noqa: PLC0415

    spec = live_spec or f"{agent_spec.partition(':')[0]}:live_edges"
    try:
        factory = load_agent(spec)
    except ConfigError as exc:
        raise ConfigError(
            f"{exc}; a fork needs live edges: give --live-edges MODULE:FACTORY or define "
            "live_edges() in the agent's module"
        ) from None
    model, tools = live_edges_from(factory(), spec)
    publisher = Publisher(_settings(ctx))
    try:
        with stderr.status(f"serving seq 0..{until}, then live…"):
            result = fork_run(events, agent, until=until, publisher=publisher, model=model,
                              tools=tools, live_tools=live_tools)  # fmt: skip
        delivered = publisher.flush(30)
    finally:
        publisher.close()
    if as_json:
        echo_json({**result.to_json(), "delivered": delivered})
    elif result.divergence is not None:
        _divergence_panel(result.divergence)
    else:
        stdout.print(
            f"[green]forked[/] {result.forked_from[0]} at seq {until} → new run "
            f"[bold]{result.run_id}[/] ({result.served} events served, then live)"
        )
        if result.error:
            stdout.print(f"the agent raised {result.error} (recorded in the new run)")
        if not delivered:
            stdout.print("[yellow]not every event reached Kafka yet: the rest is spooled[/]")
    for refusal in () if as_json else result.refused:
        if refusal not in (result.error or ""):  # else just said, as what the agent raised
            stderr.print(Text(refusal, style="red"))
    if result.divergence is not None:
        raise click.exceptions.Exit(ReplayDivergence.exit_code)
    if result.refused:  # the new run is recorded; what it would have sent was not sent
        raise click.exceptions.Exit(ConfigError.exit_code)


def _recurse(
    ctx: click.Context,
    run_id: str,
    events: Any,
    agent: Any,
    source: str,
    no_verify: bool,
    as_json: bool,
) -> None:
    """``--recurse``: the run, then each sub-agent run it served, against its own record."""
    tree = replay_tree(_loader(ctx, source, no_verify), events, agent)
    if as_json:
        echo_json(tree.to_json())
    else:
        stdout.print(_replay_tree(run_id, tree))
    if not tree.matched:
        raise click.exceptions.Exit(ReplayDivergence.exit_code)


def _loader(ctx: click.Context, source: str, no_verify: bool) -> Any:
    settings = _settings(ctx)
    kind: Any = "topic" if source == "topic" else "archive"

    def load(rid: str) -> Any:
        run = load_run(settings, rid, source=kind)
        return LazyEvents([r["raw"] for r in run.records.rows]) if no_verify else verify(run).events

    return load


def _replay_tree(run_id: str, tree: TreeReplay) -> Tree:
    def label(rid: str, t: TreeReplay) -> Text:
        r = t.result
        seq = "?" if r.divergence is None else r.divergence.seq
        ok = "[green]matched[/]" if r.matched else f"[red]diverged at seq {seq}[/]"
        return Text.from_markup(f"run {rid}: {ok} ({r.steps} events served)")

    root = Tree(label(run_id, tree))

    def add(node: Tree, t: TreeReplay) -> None:
        for child, sub in t.children:
            head = f"seq {child.seq} subagent {child.name} → "
            if isinstance(sub, str):
                node.add(Text(head + f"{child.run_id}: {sub}", style="yellow"))
            else:
                add(node.add(Text(head) + label(child.run_id, sub)), sub)

    add(root, tree)
    return root


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
    keep_going: bool,
    then: str | None,
    live_spec: str | None,
    live_tools: tuple[str, ...],
    recurse: bool,
    no_verify: bool,
    source: str,
    as_json: bool,
) -> None:
    """Re-run the agent with edges that serve the recorded responses; never the network.

    Exit 0 when the re-run matches the record (up to --until); exit 1 with a divergence
    report (seq, expected vs actual kind, JSON-path diff, what the record had next).
    A run that does not verify is refused unless --no-verify.

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
    _, run = _load(ctx, run_id, source)
    if no_verify:
        events: Any = LazyEvents([r["raw"] for r in run.records.rows])
    else:
        events = verify(run).events
    if then is not None and until is not None:
        _fork(ctx, events, agent, agent_spec, until, live_spec, as_json, tools_live)
        return
    if recurse:
        _recurse(ctx, run_id, events, agent, source, no_verify, as_json)
        return
    if keep_going:
        result = _replay_all(events, agent)
        if as_json:
            echo_json(result.to_json())
        elif result.divergences:
            stdout.print(_divergences_table(run_id, result.divergences))
        else:
            stdout.print(f"[green]run {run_id}: matched the record[/] ({result.steps} served)")
        if result.divergences:
            raise click.exceptions.Exit(ReplayDivergence.exit_code)
        return
    result = replay_with(events, agent, until)
    record_next = events[len(result.served)] if len(events) > len(result.served) else None
    if as_json:
        out = result.to_json()
        if result.stopped:
            out["record_next"] = None if record_next is None else event_json(record_next)
        echo_json(out)
    elif result.divergence is not None:
        _divergence_panel(result.divergence)
    else:
        if result.stopped:
            _state_at(run_id, result, record_next)
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


def _differences_table(result: RunAlignment) -> Table:
    """Every difference side by side, with its seq in both runs (80 columns and up)."""
    noise = ", ".join((*result.ignore, *result.ignore_paths)) or "nothing"
    n = _count(len(result.differences), "difference")
    t = Table(title=f"{n} (ignored: {noise})", show_lines=True)
    t.add_column("seq\nA B", no_wrap=True)
    t.add_column("step", overflow="fold", ratio=2)
    t.add_column(f"A {result.a.run_id}", overflow="fold", ratio=3)
    t.add_column(f"B {result.b.run_id}", overflow="fold", ratio=3)
    for d in result.differences:
        seqs = f"{'-' if d.seq_a is None else d.seq_a} {'-' if d.seq_b is None else d.seq_b}"
        step = Text(d.kind, style="bold")
        if d.site:
            step.append(f"\n{d.site}", style="dim")
        a_cell, b_cell = Text(), Text()
        for i, f in enumerate(d.fields[:8]):
            sep = "\n" if i else ""
            a_cell.append(f"{sep}{f.path}\n", style="dim")
            a_cell.append(f.a if f.a is not None else "(none)")
            b_cell.append(f"{sep}{f.path}\n", style="dim")
            b_cell.append(f.b if f.b is not None else "(none)")
        t.add_row(seqs, step, a_cell, b_cell)
    return t


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
@click.option("--no-verify", is_flag=True, help="Compare even if a run does not verify.")
@_FROM
@_JSON
@click.pass_context
def diff_cmd(
    ctx: click.Context,
    *,
    run_a: str,
    run_b: str,
    ignore: tuple[str, ...],
    ignore_paths: tuple[str, ...],
    no_verify: bool,
    source: str,
    as_json: bool,
) -> None:
    """Every difference between two runs, aligned by kind, call site and ordinal.

    Each difference shows its seq in both runs and both values side by side. Clock reads
    and random draws differ between any two honest runs: --ignore them, and --ignore-path
    the fields they feed. Exit 0 when nothing else differs, 1 when something does.

    \b
    Example:
      tracevault replay diff run-42 run-43 --ignore clock,random \\
          --ignore-path '$.response.output.took'
    """
    kinds = parse_ignore(ignore)  # refuse a bad flag before loading anything
    sides: list[Any] = []
    for rid in (run_a, run_b):
        _, run = _load(ctx, rid, source)
        sides.append(
            LazyEvents([r["raw"] for r in run.records.rows]) if no_verify else verify(run).events
        )
    result = align_runs(sides[0], sides[1], ignore=kinds, ignore_paths=ignore_paths)
    if as_json:
        echo_json(result.to_json())
    else:
        stdout.print(_summary_table(result.a, result.b))
        if result.same:
            stdout.print("[green]the runs are the same at every step[/]")
        else:
            stdout.print(_differences_table(result))
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
@_FROM
@_log_options
@_WITNESS_STORE
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
    cosigned: tuple[Path, ...],
    source: str,
    trusted_keys: tuple[str, ...],
    witness_keys: tuple[str, ...],
    min_witnesses: int | None,
    witness_stores: tuple[str, ...],
    as_json: bool,
) -> None:
    """Write a self-contained evidence bundle: raw bytes, events, chain, receipts, schemas.

    The run must verify first (with a trusted key, its signed log too); the bundle carries
    a C2SP tlog-proof per event and the checkpoint when the source has them. Check the
    bundle anywhere with `verify --bundle DIR --trusted-key K`. With --otel, verified runs
    (one or many) become OpenTelemetry GenAI spans, sent to a collector (--endpoint) or
    written as OTLP JSON (-o FILE); see README "Seeing runs in Phoenix or Jaeger".

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
    policy = _log_policy(settings, trusted_keys, witness_keys, min_witnesses)
    _witness_stores_need(policy, witness_stores)
    store = open_store(settings.archive_url, settings) if source == "archive" else None
    try:
        with stderr.status(f"loading {run_id} from the {source}…"):
            run = (
                load_from_archive(store, run_id)
                if store is not None
                else load_run(settings, run_id, source="topic", with_log=True)
            )
            run = with_witness_stores(settings, run, policy, witness_stores)
        with _progress() as progress:
            task = progress.add_task("exporting", total=len(run))
            report = export_bundle(
                run,
                out_dir,
                store=store,
                progress=lambda n: progress.advance(task, n),
                log=policy,
                cosigned=[p.read_text(encoding="utf-8") for p in cosigned],
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
    from tracevault.integrations.otel import (  # noqa: PLC0415
        ExportedRun,
        child_runs,
        otlp_json,
        otlp_request,
        send_otlp,
    )

    runs = []
    todo, seen = list(run_ids), set(run_ids)
    while todo:  # each run, then the sub-agent runs it started: one trace per tree
        run_id = todo.pop(0)
        _, loaded = _load(ctx, run_id, source)
        report = verify(loaded)
        hashes = {r.seq: r.hash for r in loaded.records}
        runs.append(ExportedRun(run_id, report.events, hashes, report.head, report.status))
        children = [c for c in child_runs(report.events) if c not in seen]
        seen.update(children)
        todo.extend(children)
    request = otlp_request(runs, content=content)
    spans = sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)
    if endpoint is not None:
        target = send_otlp(request, endpoint)
    else:
        assert out is not None
        out.write_text(json.dumps(otlp_json(request), indent=1) + "\n", encoding="utf-8")
        target = str(out)
    if as_json:
        exported = [r.run_id for r in runs]
        echo_json({"runs": exported, "spans": spans, "to": target, "content": content})
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
@click.option(
    "--engine",
    type=click.Choice(["local", "dask"]),
    default="local",
    show_default=True,
    help="local: --workers processes here; dask: the cluster at --address.",
)
@click.option(
    "--address",
    help="With --engine dask: the scheduler, tcp://HOST:PORT.",
)
@click.option("--workers", type=click.IntRange(1, 64), help="Local processes [1].")
@click.option("--chunk-size", type=click.IntRange(1), help="Runs per task [about 4 per worker].")
@click.option(
    "--ship-credentials",
    is_flag=True,
    help="Send this machine's AWS credentials to the workers (s3:// only).",
)
@click.option(
    "--junit",
    "junit_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also write JUnit XML: a test per run.",
)
@_JSON
@click.pass_context
def batch_cmd(
    ctx: click.Context,
    *,
    agent_spec: str,
    source: str,
    since: str,
    until_: str | None,
    engine: str,
    address: str | None,
    workers: int | None,
    chunk_size: int | None,
    ship_credentials: bool,
    junit_file: Path | None,
    as_json: bool,
) -> None:
    """Replay every run archived in a window; exit 1 if any diverged.

    Which recorded runs would this agent do differently? Diverged runs are grouped
    by their first divergence (kind, JSON path). Workers read the archive directly
    (no Kafka); on a Dask cluster each worker needs tracevault and the agent's
    module importable (docs/replay-batch.md).

    \b
    Examples:
      tracevault replay batch --agent myagents.support:run --since 2026-11-01 \\
          --workers 2 --json
      tracevault replay batch --agent myagents.support:run --since 2026-11-01 \\
          --engine dask --address tcp://10.0.0.5:8786 --junit replay.xml
    """
    settings = _settings(ctx)
    first = _day(since, "--since")
    assert first is not None
    last = _day(until_, "--until") or datetime.now(UTC).date()
    if engine == "dask" and (address is None or workers is not None):
        raise ConfigError("--engine dask needs --address tcp://HOST:PORT and takes no --workers")
    if engine == "local" and address is not None:
        raise ConfigError("--address needs --engine dask")
    with contextlib.ExitStack() as stack:
        runner = None
        if engine == "dask":
            assert address is not None
            with stderr.status(f"connecting to the Dask scheduler at {address}…"):
                runner = stack.enter_context(DaskEngine(address))
        progress = stack.enter_context(_progress())
        task = progress.add_task("replaying", total=None)
        report = run_batch(
            settings,
            agent_spec,
            first,
            last,
            workers=workers or 1,
            engine=runner,
            chunk_size=chunk_size,
            ship_credentials=ship_credentials,
            on_item=lambda _: progress.advance(task, 1),
            on_total=lambda n: progress.update(task, total=n),
        )
    if junit_file is not None:
        junit_file.write_bytes(junit_xml(report))
    if as_json:
        echo_json(report.to_json())
    else:
        print_batch(report, stdout)
    if not report.ok:
        raise click.exceptions.Exit(1)
