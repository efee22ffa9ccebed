"""``replay verify`` from the archive: is the archive as fresh as what witnesses and the topic
saw? (check L5, docs/log.md "Freshness").

A consistent rollback (newer checkpoints, tiles, bundles and run indexes deleted) leaves an
archive whose every run verifies; only evidence kept elsewhere shows it. :func:`load_fresh`
loads the run as ``load`` does and then holds the run's partition log to the freshest
cosignature in every given witness store and to the sealed topic's newest checkpoint the
archiver committed past (when Kafka answers; else it says the topic was not compared). A run
the archive does not hold is reported as *removed* when the topic's head places it below
what the archiver committed, or when its log was rolled back, instead of "not found".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import click

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
from tracevault.replayer._cliopts import load, settings_of
from tracevault.replayer._results import LoadedRun, VerifyReport
from tracevault.replayer.load.log_policy import LogPolicy
from tracevault.transparency import Checkpoint, split_note

__all__ = ["CHECK", "Fresh", "load_fresh", "topic_tails"]

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
    store = open_store(settings.archive_url, settings)
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
