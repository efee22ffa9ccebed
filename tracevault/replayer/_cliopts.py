"""What the ``tracevault replay`` commands share: their options, settings and run loading.

Defined once, so every command that reads a run or checks a log spells its options the
same way (tests/test_cli_help.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import date
from typing import Any

import click
from rich.text import Text

from tracevault._clitools import settings_from, stderr
from tracevault.archive import ObjectStore
from tracevault.config import Settings
from tracevault.errors import ConfigError, LogError, NotFoundError
from tracevault.replayer._results import LoadedRun
from tracevault.replayer.load.log_policy import NO_AGENT_CHECK as NO_AGENT_CHECK_SAID
from tracevault.replayer.load.log_policy import (
    EndRule,
    LogPolicy,
    unverified_provenance,
    unverified_record,
)
from tracevault.replayer.load.source import load_archived, load_run
from tracevault.runid import run_id_problem
from tracevault.transparency import AgentKeys, Ed25519Verifier, operator_verifiers

__all__ = [
    "AGENT_KEY",
    "FROM",
    "JSON",
    "NO_AGENT_CHECK",
    "NO_LOG_CHECK",
    "WITNESS_STORE",
    "Trust",
    "agent_keys",
    "end_options",
    "end_rule",
    "load",
    "log_options",
    "log_policy",
    "load_for_export",
    "parse_day",
    "refuse_bad_run_id",
    "no_verify_option",
    "settings_of",
    "trust",
    "trust_options",
    "verify_policy",
    "witness_stores_need",
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


def agent_keys(settings: Settings, pairs: tuple[str, ...]) -> AgentKeys:
    """The trusted agent vkeys: the deployment's ``agent_vkeys`` plus ``--agent-key``."""
    return AgentKeys.from_setting(settings.agent_vkeys).merged(AgentKeys.from_pairs(pairs))


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


def end_rule(settings: Settings, *, allow_unfinished: bool, required: bool) -> EndRule:
    """The CLI's rule for a run without RUN_FINISHED (``log_policy.EndRule``)."""
    if allow_unfinished and required:
        raise click.UsageError("--allow-unfinished and --require-finished contradict each other")
    if allow_unfinished:
        return EndRule()
    return EndRule(required, settings.sequencer_idle_close_s, settings.sequencer_clock_skew_s)


def verify_policy(
    settings: Settings,
    trusted: tuple[str, ...],
    witness: tuple[str, ...],
    least: int | None,
    *,
    no_log_check: bool,
) -> LogPolicy | None:
    """The keys ``verify`` trusts; none with ``--no-log-check`` (which takes no key flag)."""
    if not no_log_check:
        return log_policy(settings, trusted, witness, least)
    if trusted or witness or least:
        raise click.UsageError(
            "--no-log-check skips the signed log: drop it, or drop --trusted-key/--witness-key"
        )
    return None


def log_policy(
    settings: Settings, trusted: tuple[str, ...], witness: tuple[str, ...], least: int | None
) -> LogPolicy | None:
    return LogPolicy.of(settings, trusted, witness, least)


@dataclass(frozen=True, slots=True)
class Trust:
    """How a command checks a run before it takes it as the record: ``verify``'s options.

    ``policy`` None: no trusted log key, so the run is ``unverified`` (fail closed), unless
    ``chain_only`` (``verify --no-log-check``) waived the signed log. ``skip``: the command's
    ``--no-verify``, nothing checked (and said so)."""

    policy: LogPolicy | None
    end: EndRule
    agents: AgentKeys
    witness_stores: tuple[str, ...] = ()
    chain_only: bool = False
    skip: bool = False
    #: the operator vkeys an erasure record must be signed by (``operator_vkeys``)
    operators: tuple[Ed25519Verifier, ...] = ()
    #: False with ``--no-agent-check``: a run whose provenance was not proven may pass.
    agent_check: bool = True

    def refusal(self, run_id: str | None, doing: str) -> LogError | None:
        """Why a command taking ``run_id`` as the record refuses it before loading anything
        (``unverified``: no trusted log key, or no trusted agent vkey), or None."""
        if self.skip:
            return None
        if self.policy is None and not self.chain_only:
            return unverified_record(run_id, doing)
        if self.agent_check and not self.agents:
            return unverified_provenance(run_id, doing)
        return None


def trust(
    settings: Settings,
    *,
    trusted_keys: tuple[str, ...] = (),
    witness_keys: tuple[str, ...] = (),
    min_witnesses: int | None = None,
    agent_key_pairs: tuple[str, ...] = (),
    witness_stores: tuple[str, ...] = (),
    allow_unfinished: bool = False,
    require_finished: bool = False,
    no_log_check: bool = False,
    no_verify: bool = False,
    no_agent_check: bool = False,
) -> Trust:
    """The :class:`Trust` of ``verify``'s options (the flags of :func:`trust_options`), as
    ``verify`` builds it: the deployment's settings plus the flags."""
    policy = verify_policy(
        settings, trusted_keys, witness_keys, min_witnesses, no_log_check=no_log_check
    )
    end = end_rule(settings, allow_unfinished=allow_unfinished, required=require_finished)
    witness_stores_need(policy, witness_stores)
    agents = agent_keys(settings, agent_key_pairs)
    operators = tuple(operator_verifiers(settings.operator_vkeys))
    if no_agent_check and agent_key_pairs:
        raise click.UsageError("--no-agent-check skips check I: drop it, or drop --agent-key")
    if no_agent_check and not no_verify:
        stderr.print(Text(NO_AGENT_CHECK_SAID, style="yellow bold"))
    return Trust(
        policy,
        end,
        agents,
        witness_stores,
        no_log_check,
        no_verify,
        operators=operators,
        agent_check=not no_agent_check,
    )


def trust_options(f: Any) -> Any:
    """``verify``'s trust flags, for the commands that take a run as the record (``run``,
    ``diff``, ``batch``): the end rule, the log's and witnesses' keys, agent keys, witness
    stores. Without a trusted log key such a command refuses the run (``unverified``)."""
    for option in (WITNESS_STORE, NO_AGENT_CHECK, AGENT_KEY, log_options, end_options):
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


def witness_stores_need(policy: LogPolicy | None, stores: tuple[str, ...]) -> None:
    if stores and policy is None:
        raise ConfigError("--witness-store needs the log's key too: give --trusted-key")


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


def refuse_bad_run_id(run_id: str, exc: NotFoundError) -> None:
    """A run not found whose id breaks the grammar is a usage error naming the grammar, not
    "not in the archive": no new run can have that id. A run recorded before the grammar is
    still read (it is found), so the rule is applied only once the lookup failed
    (docs/design.md, "Run ids")."""
    problem = run_id_problem(run_id)
    if problem is not None:
        raise ConfigError(f"{problem}; no run can have that id") from exc


def parse_day(value: str | None, name: str) -> date | None:
    if value is None:
        return None
    try:
        return date.fromisoformat(value[:10])
    except ValueError:
        raise ConfigError(f"{name} must be a date like 2026-11-29, got {value!r}") from None
