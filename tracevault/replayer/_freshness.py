"""``replay verify`` from the archive: is the archive as fresh as what witnesses and the topic
saw? (check L5, docs/log.md "Freshness").

A consistent rollback (newer checkpoints, tiles, bundles and run indexes deleted) leaves an
archive whose every run verifies; only evidence kept elsewhere shows it. :func:`load_fresh`
loads the run as ``load`` does and then holds the run's partition log to the freshest
cosignature in every given witness store and to the sealed topic's newest checkpoint the
archiver committed past (when Kafka answers; else it says the topic was not compared). A run
the archive does not hold is reported as *removed* when the topic's head places it below
what the archiver committed, or when its log was rolled back, instead of "not found".

:func:`verified_run` is the whole of ``replay verify``'s check (this, the witness stores,
then ``verify``), shared by every command that takes a run as the record (``run``, ``diff``,
``export --otel``): one without a trusted log key is refused as ``unverified`` (fail closed).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import click
from rich.text import Text

from tracevault._clitools import stderr
from tracevault.archive import (
    LOST,
    Freshness,
    TopicTail,
    archive_freshness,
    open_store,
    parse_hole_key,
)
from tracevault.archive.layout import quarantine_key
from tracevault.config import Settings
from tracevault.errors import LogError, NotFoundError, TraceVaultError
from tracevault.replayer._cliopts import Trust, load, settings_of
from tracevault.replayer._records import LazyEvents
from tracevault.replayer._results import LoadedRun, Record, VerifyReport
from tracevault.replayer.export.bundle import verify_bundle
from tracevault.replayer.load.log_policy import NOT_VERIFIED, LogPolicy, unverified_provenance
from tracevault.replayer.load.verify import verify
from tracevault.replayer.load.witnessed import with_witness_stores
from tracevault.transparency import Checkpoint, split_note

__all__ = [
    "CHECK",
    "Fresh",
    "load_fresh",
    "the_record",
    "topic_tails",
    "verified_bundle",
    "verified_run",
]

CHECK = "L5 fresh"
_LINE = (
    "L5 fresh: the archived log is as large as every size a given witness cosigned and the "
    "topic's checkpoint the archiver committed past"
)


@dataclass(frozen=True, slots=True)
class Fresh:
    """What the freshness check said of a run that passed it, for the report."""

    checked: bool = False
    notes: tuple[str, ...] = field(default=())

    def annotate(self, report: VerifyReport) -> VerifyReport:
        if not self.checked and not self.notes:
            return report
        checks = (*report.checks, _LINE) if self.checked else report.checks
        return dataclasses.replace(report, checks=checks, warnings=(*report.warnings, *self.notes))


def topic_tails(settings: Settings) -> Mapping[int, TopicTail] | None:
    """The sealed topic's newest archived checkpoint per partition; None if Kafka is down."""
    # Only here does reading an archive need a Kafka client (docs/design.md, "Layout").
    from tracevault.kafka import archived_tails  # noqa: PLC0415

    return archived_tails(settings, timeout=3.0)


def _witness_urls(settings: Settings, urls: Sequence[str]) -> list[str]:
    if urls:
        return list(urls)
    return [u.strip() for u in settings.witness_stores.split(",") if u.strip()]


def load_fresh(
    ctx: click.Context,
    run_id: str,
    source: str,
    policy: LogPolicy | None,
    witness_urls: Sequence[str],
) -> tuple[Settings, LoadedRun, Fresh]:
    """``load``, then check L5 for a run read from the archive with trusted keys.

    Raises :class:`LogError` (exit 1) on a rollback, and for a run the archive lacks but
    that the evidence says it held (removed); otherwise the ``NotFoundError`` of ``load``."""
    settings = settings_of(ctx)
    if source != "archive" or policy is None:
        settings, run = load(ctx, run_id, source, with_log=policy is not None)
        return settings, run, Fresh()
    urls = _witness_urls(settings, witness_urls)
    try:
        settings, run = load(ctx, run_id, source, with_log=True)
    except NotFoundError as exc:
        _removed(settings, run_id, policy, urls, exc)
        raise
    origin = _signed_origin(run)
    if origin is None:  # the older segment layout, or a note L1 will name as unreadable
        return settings, run, Fresh()
    fresh = _check(settings, policy, urls, [origin], topic_tails(settings))
    if not fresh.ok:
        rb = fresh.rollbacks[0]
        raise LogError(
            f"{CHECK}: {rb.describe()}: run {run_id!r} is proven against a rolled-back log "
            "(newer checkpoints, tiles and indexes were deleted); the removed part cannot be "
            "verified",
            run=run_id,
            checkpoint=f"{rb.origin}@{rb.archived}",
        )
    return settings, run, Fresh(checked=True, notes=tuple(fresh.notes))


def verified_run(
    ctx: click.Context,
    run_id: str,
    source: str,
    trust: Trust,
    *,
    doing: str | None = None,
    rebuild: bool = False,
) -> tuple[Settings, LoadedRun, VerifyReport]:
    """Load ``run_id`` and verify it as ``replay verify`` does: L5 (``load_fresh``), the
    witness stores' cosignatures, then ``verify`` with the log policy, end rule and agent
    keys, in its one walk (``rebuild``: the events decoded there, ``report.events``).

    ``doing`` (what ``--no-verify`` would do instead, e.g. ``"re-runs"``): the caller takes
    the run as the record, so one with no trusted log key is refused, ``unverified``
    (:class:`LogError`, exit 1), before anything is loaded. None (``verify``): such a run
    is reported ``unverified``. A failed check raises ``ChainError``/``LogError``.
    """
    refused = None if doing is None else trust.refusal(run_id, doing)
    if refused is not None:
        raise refused
    settings, run, fresh = load_fresh(ctx, run_id, source, trust.policy, trust.witness_stores)
    run = with_witness_stores(settings, run, trust.policy, trust.witness_stores)
    with stderr.status(f"verifying {len(run)} events…"):
        report = verify(
            run,
            rebuild=rebuild,
            log=trust.policy,
            end=trust.end,
            chain_only=trust.chain_only,
            agents=trust.agents,
            operators=trust.operators,
            agent_check=trust.agent_check,
        )
    if doing is not None and not report.ok:  # e.g. recorded before agent identity
        raise unverified_provenance(run_id, doing, f"it was {report.provenance}")
    return settings, run, fresh.annotate(report)


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


def _signed_origin(run: LoadedRun) -> str | None:
    """The origin the run's checkpoint note names (signed, unlike the run index's field)."""
    if run.log_evidence is None:
        return None
    try:
        return Checkpoint.parse(split_note(run.log_evidence.checkpoint)[0]).origin
    except LogError:
        return None


def _check(
    settings: Settings,
    policy: LogPolicy,
    urls: Sequence[str],
    origins: Sequence[str] | None,
    tails: Mapping[int, TopicTail] | None,
) -> Freshness:
    """L5 over ``origins`` (None: every origin of this deployment the evidence knows)."""
    return archive_freshness(
        settings,
        keys=policy.keys,
        witnesses=policy.witnesses,
        witness_urls=urls,
        tails=tails,
        origins=origins,
    )


def _head_evidence(
    settings: Settings, run_id: str, tails: Mapping[int, TopicTail] | None
) -> str | None:
    """What the topic's head of ``run_id`` proves the archive held, or None."""
    if tails is None:
        return None
    from tracevault.heads import find_head  # noqa: PLC0415 - a Kafka client, as above

    try:
        head = find_head(settings, run_id, timeout=5.0)
    except TraceVaultError:
        return None
    tail = tails.get(head.partition) if head is not None and head.last_offset >= 0 else None
    committed = getattr(tail, "committed", None)
    if head is None or not isinstance(committed, int) or committed <= head.last_offset:
        return None
    if _not_archivable(settings, head.partition, (head.first_offset, head.last_offset)):
        return None  # a hole may have taken it, or its records were quarantined
    return (
        f"the topic's head ({settings.topics.heads}) says run {run_id!r} was sealed in "
        f"partition {head.partition} at offsets {head.first_offset}..{head.last_offset} "
        f"(seqs 0..{head.last_seq}), and the archiver committed partition {head.partition} "
        f"through offset {committed - 1}, so the archive held it"
    )


def _not_archivable(settings: Settings, partition: int, offsets: tuple[int, int]) -> bool:
    """Whether the archive itself says why a run the archiver committed past may be absent:
    a hole of lost records in ``partition``'s log (any generation; the not-found message
    names the holes, docs/log.md "Holes"), or a quarantined record of the partition at the
    run's ``offsets`` (the archiver refused it)."""
    try:
        store = open_store(settings.archive_url, settings, create=False)
    except NotFoundError:
        return False  # no archive at all: it says nothing about this run
    try:
        if any(
            (h := parse_hole_key(i.key)) is not None
            and h.kind in LOST
            and i.key.rsplit("/", 2)[-2] == str(partition)
            for i in store.list("holes/")
        ):
            return True
        where = quarantine_key(settings.topics.sealed, partition, 0).rsplit("/", 1)[0] + "/"
        first, last = offsets
        return any(
            first <= int(i.key.rsplit("/", 1)[-1].removesuffix(".json")) <= last
            for i in store.list(where)
            if i.key.rsplit("/", 1)[-1].removesuffix(".json").isdigit()
        )
    finally:
        store.close()


def _removed(
    settings: Settings,
    run_id: str,
    policy: LogPolicy,
    urls: Sequence[str],
    exc: NotFoundError,
) -> None:
    """Raise :class:`LogError` when evidence says the archive held ``run_id`` (or its
    logs were rolled back); return (so ``exc`` stands) otherwise."""
    tails = topic_tails(settings)
    proof = _head_evidence(settings, run_id, tails)
    fresh = _check(settings, policy, urls, None, tails)
    if proof is not None:
        rolled = "; ".join(rb.describe() for rb in fresh.rollbacks)
        raise LogError(
            f"{CHECK}: run {run_id!r} was removed from the archive: {proof}"
            + (f"; {rolled}" if rolled else ""),
            run=run_id,
        ) from exc
    if fresh.rollbacks:
        rb = fresh.rollbacks[0]
        more = "".join(f"; {r.describe()}" for r in fresh.rollbacks[1:])
        raise LogError(
            f"{CHECK}: the archive of partition {rb.partition} was rolled back from "
            f"{rb.proof.size} to {rb.archived} ({rb.describe()}){more}; run {run_id!r} may "
            "have been in the removed part",
            run=run_id,
            checkpoint=f"{rb.origin}@{rb.archived}",
        ) from exc
