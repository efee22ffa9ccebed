"""``tracevault replay batch``: every archived run of a window, replayed on local processes
or a Dask cluster (docs/replay-batch.md); registered on the ``replay`` group by ``commands``.
"""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click
from rich.text import Text

from tracevault._clitools import echo_json, stderr, stdout
from tracevault.config import Settings
from tracevault.errors import ConfigError
from tracevault.replayer._cliopts import (
    JSON,
    no_verify_option,
    parse_day,
    settings_of,
    trust,
    trust_options,
)
from tracevault.replayer._views import chain_failure, progress_bar
from tracevault.replayer.batch._dask import DaskEngine
from tracevault.replayer.batch._junit import junit_xml
from tracevault.replayer.batch._view import print_batch
from tracevault.replayer.batch.jobs import run_batch
from tracevault.replayer.load.log_policy import NOT_VERIFIED
from tracevault.replayer.load.trust import Trust

__all__ = ["batch_cmd"]


def _batch_checks(
    settings: Settings, no_verify: bool, as_json: bool, trust_flags: dict[str, Any]
) -> Trust:
    """How each worker verifies its runs: ``verify``'s trust (the one ``trust()``, witness
    stores and ``--offline`` included); the batch is refused first without a trusted log
    key or agent vkey (``unverified``)."""
    checks = trust(settings, no_verify=no_verify, **trust_flags)
    refused = checks.refusal(None, "re-runs")
    if refused is not None:
        chain_failure(refused, as_json)
    if no_verify:
        stderr.print(Text(NOT_VERIFIED.format(run="of the batch"), style="yellow bold"))
    return checks


@click.command("batch")
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
@no_verify_option("Re-run the records")
@trust_options
@JSON
@click.pass_context
def batch_cmd(
    ctx: click.Context,
    /,
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
    no_verify: bool,
    as_json: bool,
    **trust_flags: Any,
) -> None:
    """Replay every run archived in a window; exit 1 if any diverged.

    Which recorded runs would this agent do differently? Diverged runs are grouped
    by their first divergence (kind, JSON path). Workers read the archive directly
    (no Kafka); on a Dask cluster each worker needs tracevault and the agent's
    module importable (docs/replay-batch.md).

    Each run is verified first, as `verify` does, with the trusted log keys
    (--trusted-key or TRACEVAULT_LOG_VKEYS), the witness stores (--witness-store or
    TRACEVAULT_WITNESS_STORES: their cosignatures count for --min-witnesses, and an
    archive smaller than a size they cosigned is a rollback) and the sealed topic's
    checkpoint (read once here; without Kafka each run is `unverified freshness`
    unless --offline): one that does not verify is `verify_failed`. Without a trusted
    key the batch is refused (`unverified`, exit 1), and so it is without a trusted
    agent vkey (--agent-key; --no-agent-check waives it); --no-verify re-runs the
    records unverified, knowingly.

    \b
    Examples:
      tracevault replay batch --agent myagents.support:run --since 2026-11-01 \\
          --workers 2 --json
      tracevault replay batch --agent myagents.support:run --since 2026-11-01 \\
          --engine dask --address tcp://10.0.0.5:8786 --junit replay.xml
    """
    settings = settings_of(ctx)
    first = parse_day(since, "--since")
    assert first is not None
    last = parse_day(until_, "--until") or datetime.now(UTC).date()
    if engine == "dask" and (address is None or workers is not None):
        raise ConfigError("--engine dask needs --address tcp://HOST:PORT and takes no --workers")
    if engine == "local" and address is not None:
        raise ConfigError("--address needs --engine dask")
    checks = _batch_checks(settings, no_verify, as_json, trust_flags)
    with contextlib.ExitStack() as stack:
        runner = None
        if engine == "dask":
            assert address is not None
            with stderr.status(f"connecting to the Dask scheduler at {address}…"):
                runner = stack.enter_context(DaskEngine(address))
        progress = stack.enter_context(progress_bar())
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
            checks=checks,
        )
    if junit_file is not None:
        junit_file.write_bytes(junit_xml(report))
    if as_json:
        echo_json(report.to_json())
    else:
        print_batch(report, stdout)
    if not report.ok:
        raise click.exceptions.Exit(1)
