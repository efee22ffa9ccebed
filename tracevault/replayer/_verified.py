"""The commands' side of ``tracevault.replayer.load.trust.verify_run``: a spinner on stderr
while the whole verify runs, and the run taken as the record by every command that reads one
(``run``, ``diff``, ``show``, ``export --otel``, ``search --verify``, ``erase``).

Nothing is checked here: the library's ``verify`` is the whole verify (L5 freshness, the
witness stores, the signed log, the records, who wrote them); this only parses and prints.
"""

from __future__ import annotations

from pathlib import Path

import click
from rich.text import Text

from tracevault._clitools import stderr
from tracevault.config import Settings
from tracevault.replayer._cliopts import Trust, load, settings_of
from tracevault.replayer._records import LazyEvents
from tracevault.replayer._results import LoadedRun, Record, VerifyReport
from tracevault.replayer.export.bundle import verify_bundle
from tracevault.replayer.load.log_policy import NOT_VERIFIED
from tracevault.replayer.load.trust import verify_run

__all__ = ["the_record", "verified_bundle", "verified_run"]


def verified_run(
    ctx: click.Context,
    run_id: str,
    source: str,
    trust: Trust,
    *,
    doing: str | None = None,
    rebuild: bool = False,
) -> tuple[Settings, LoadedRun, VerifyReport]:
    """``verify_run`` with the command's settings, said on stderr while it runs.

    ``doing`` (what ``--no-verify`` would do instead, e.g. ``"re-runs"``): the caller takes
    the run as the record, so one that is not a pass is refused (:class:`LogError`, exit 1).
    None (``verify``): such a run is reported ``unverified``.
    """
    settings = settings_of(ctx)
    with stderr.status(f"loading and verifying {run_id} from the {source}…"):
        run, report = verify_run(
            settings,
            run_id,
            trust,
            source="topic" if source == "topic" else "archive",
            rebuild=rebuild,
            doing=doing,
        )
    return settings, run, report


def the_record(ctx: click.Context, run_id: str, source: str, trust: Trust, doing: str) -> Record:
    """The run as the record: verified as ``verify`` does and decoded in its one walk
    (:func:`verified_run`; ``doing`` names what ``--no-verify`` does instead), or, with
    ``trust.skip`` (``--no-verify``), read lazily and unchecked, which stderr says."""
    if not trust.skip:
        settings, run, report = verified_run(ctx, run_id, source, trust, doing=doing, rebuild=True)
        return Record(settings, run, report.events, report.head, report.status)
    settings, run = load(ctx, run_id, source)
    stderr.print(Text(NOT_VERIFIED.format(run=run_id), style="yellow bold"))
    rows = run.records.rows
    head = rows[-1]["hash"].hex() if rows else ""
    events = LazyEvents([r["raw"] for r in rows])
    return Record(settings, run, events, head, "not verified (--no-verify)")


def verified_bundle(bundle: Path, run_id: str | None, checks: Trust) -> VerifyReport:
    """``verify --bundle DIR``: offline, with ``verify``'s trust (its own cosignatures)."""
    if run_id is not None:
        raise click.UsageError("give RUN_ID or --bundle, not both")
    if checks.witness_stores:
        raise click.UsageError(
            "--witness-store reads a run's source; a bundle "
            "carries its cosignatures (export --witness-store)"
        )
    with stderr.status(f"checking bundle {bundle}…"):
        return verify_bundle(
            bundle,
            log=checks.policy,
            end=checks.end,
            chain_only=checks.chain_only,
            agents=checks.agents,
            operators=checks.operators,
            agent_check=checks.agent_check,
        )
