"""What the ``tracevault replay`` commands share: their options, settings and run loading.

Defined once, so every command that reads a run or checks a log spells its options the
same way (tests/test_cli_help.py).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import date
from typing import Any

import click
from rich.text import Text

from tracevault._clitools import settings_from, stderr
from tracevault.archive import ObjectStore
from tracevault.config import Settings
from tracevault.errors import ConfigError, NotFoundError
from tracevault.replayer._results import LoadedRun
from tracevault.replayer.load.log_policy import NO_AGENT_CHECK as NO_AGENT_CHECK_SAID
from tracevault.replayer.load.source import load_archived, load_run, refuse_bad_run_id
from tracevault.replayer.load.trust import Trust

__all__ = [
    "AGENT_KEY",
    "FROM",
    "JSON",
    "NO_AGENT_CHECK",
    "NO_LOG_CHECK",
    "OFFLINE",
    "WITNESS_STORE",
    "Trust",
    "end_options",
    "load",
    "log_options",
    "load_for_export",
    "parse_day",
    "no_verify_option",
    "settings_of",
    "trust",
    "trust_options",
]

FROM = click.option(
    "--from",
    "source",
    type=click.Choice(["topic", "archive"]),
    default="archive",
    show_default=True,
    help="Read the run from the sealed Kafka topic or from the archive.",
)
JSON = click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")


def log_options(f: Any) -> Any:
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


WITNESS_STORE = click.option(
    "--witness-store",
    "witness_stores",
    multiple=True,
    metavar="URL",
    help="A witness's store (file:// or s3://) to read its cosigned checkpoint of the "
    "run from (repeatable) [env TRACEVAULT_WITNESS_STORES, comma-separated].",
)


AGENT_KEY = click.option(
    "--agent-key",
    "agent_key_pairs",
    multiple=True,
    metavar="AGENT_ID=VKEY",
    help="An agent key allowed to record as AGENT_ID (repeatable; adds to "
    "TRACEVAULT_AGENT_VKEYS): check I names every event its run's agent did not write.",
)


NO_AGENT_CHECK = click.option(
    "--no-agent-check",
    is_flag=True,
    help="Skip check I (who wrote each event), knowingly: said on stderr, and the status "
    "says `provenance not checked`. Without it, a run no trusted agent vkey can check (none "
    "given, or recorded before agent identity) is `unverified`, exit 1.",
)


NO_LOG_CHECK = click.option(
    "--no-log-check",
    is_flag=True,
    help="Check the hash chain alone, without a trusted log key (exit 0 if it holds). It "
    "proves nothing against whoever can write the store: without a key (and without this) "
    "verify fails closed, `unverified`, exit 1.",
)


def end_options(f: Any) -> Any:
    """--allow-unfinished and --require-finished: when a run without RUN_FINISHED fails."""
    f = click.option(
        "--require-finished",
        is_flag=True,
        help="Fail (exit 1) on any unfinished run, even one the sequencer still has open.",
    )(f)
    return click.option(
        "--allow-unfinished",
        is_flag=True,
        help="Accept a run still in progress (no RUN_FINISHED yet). By default an unfinished "
        "run fails L3 unless the sequencer's head says it is open and its last event is "
        "younger than sequencer_idle_close_s (--from topic).",
    )(f)


OFFLINE = click.option(
    "--offline",
    is_flag=True,
    help="Accept an archive that nothing proved current, knowingly: check L5 does not ask "
    "the sealed topic (said in the status: `freshness not checked`). Without it, an archive "
    "read where Kafka does not answer is `unverified freshness`, exit 1: a witness store "
    "shows a floor, and a rolled-back archive verifies by itself.",
)


def trust(settings: Settings, **flags: Any) -> Trust:
    """The :class:`Trust` of ``verify``'s options (the flags of :func:`trust_options`, as
    ``Trust.of`` takes them): the deployment's settings plus the flags. What a flag waives
    is said on stderr, every time."""
    checks = Trust.of(settings, **flags)
    if flags.get("no_agent_check") and not flags.get("no_verify"):
        stderr.print(Text(NO_AGENT_CHECK_SAID, style="yellow bold"))
    return checks


def trust_options(f: Any) -> Any:
    """``verify``'s trust flags, for the commands that take a run as the record (``run``,
    ``diff``, ``batch``): the end rule, the log's and witnesses' keys, agent keys, witness
    stores. Without a trusted log key such a command refuses the run (``unverified``)."""
    for option in (OFFLINE, WITNESS_STORE, NO_AGENT_CHECK, AGENT_KEY, log_options, end_options):
        f = option(f)
    return f


def no_verify_option(doing: str) -> Callable[[Any], Any]:
    """``--no-verify``: take the run as it is, unverified; ``doing``: what the command does."""
    return click.option(
        "--no-verify",
        is_flag=True,
        help=f"{doing} without verifying: no trusted log key needed, nothing checked (said on "
        "stderr). By default the run must verify as `verify` checks it, or it is refused "
        "(exit 1, `unverified` without a trusted key).",
    )


def settings_of(ctx: click.Context) -> Settings:
    meta = ctx.find_root().meta
    return settings_from(
        ctx,
        archive_url=meta.get("replay.archive_url"),
        s3_endpoint_url=meta.get("replay.s3_endpoint_url"),
    )


def load(
    ctx: click.Context, run_id: str, source: str, *, with_log: bool = False
) -> tuple[Settings, LoadedRun]:
    settings = settings_of(ctx)
    try:
        with stderr.status(f"loading {run_id} from the {source}…"):
            run = load_run(
                settings,
                run_id,
                source="topic" if source == "topic" else "archive",
                with_log=with_log,
            )
    except NotFoundError as exc:
        refuse_bad_run_id(run_id, exc)
        raise
    return settings, run


def load_for_export(settings: Settings, store: ObjectStore | None, run_id: str) -> LoadedRun:
    """The run ``replay export`` writes, from the archive's ``store`` or else the topic; an
    id outside the grammar that is not found is refused with the grammar."""
    try:
        if store is not None:
            return load_archived(store, run_id)
        return load_run(settings, run_id, source="topic", with_log=True)
    except NotFoundError as exc:
        refuse_bad_run_id(run_id, exc)
        raise


def parse_day(value: str | None, name: str) -> date | None:
    if value is None:
        return None
    try:
        return date.fromisoformat(value[:10])
    except ValueError:
        raise ConfigError(f"{name} must be a date like 2026-11-29, got {value!r}") from None
