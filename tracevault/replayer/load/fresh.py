"""Check L5: is the archive a run was read from as fresh as what the witnesses and the topic
saw? (docs/log.md, "Freshness").

A consistent rollback (newer checkpoints, tiles, bundles and run indexes deleted) leaves an
archive whose every run verifies; only evidence kept elsewhere shows it. :func:`freshness`
holds the run's partition log to the freshest cosignature in every given witness store and
to the sealed topic's newest checkpoint the archiver committed past. Only the topic proves the
archive current: a witness store shows a floor, and whoever can roll the archive back may have
rolled the store back with it. So a check that compared nothing with the topic (Kafka did not
answer, or holds no checkpoint the archiver committed past) is ``unverified``, not a pass,
unless the caller accepts that knowingly (``offline``, ``--offline``). A run the archive does
not hold is reported as *removed* (:func:`removed`) when the topic's head places it below what
the archiver committed, or when its log was rolled back, instead of "not found".

This module reads stores; the Kafka client is imported only where the topic is asked
(:func:`topic_tails`), so verifying offline loads none.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from tracevault.archive import (
    LOST,
    Freshness,
    ObjectStore,
    TopicTail,
    archive_freshness,
    check_freshness,
    open_store,
    parse_hole_key,
)
from tracevault.archive.layout import quarantine_key
from tracevault.config import Settings
from tracevault.errors import LogError, NotFoundError, TraceVaultError
from tracevault.replayer._results import LoadedRun, VerifyReport
from tracevault.replayer.load.log_policy import LogPolicy
from tracevault.transparency import Checkpoint, split_note

__all__ = [
    "ASK",
    "CHECK",
    "FRESH",
    "NOT_APPLICABLE",
    "OFFLINE",
    "UNVERIFIED",
    "Fresh",
    "Tails",
    "freshness",
    "removed",
    "topic_tails",
    "witness_urls",
]

CHECK = "L5 fresh"
_LINE = (
    "L5 fresh: the archived log is as large as every size a given witness cosigned and the "
    "topic's checkpoint the archiver committed past"
)
#: ``VerifyReport.freshness``: the topic's checkpoint was compared and the archive holds it
FRESH = "fresh"
#: nothing proved the archive current: not a pass (fail closed)
UNVERIFIED = "unverified"
#: the caller accepted an archive nothing proved current (``offline``, ``--offline``)
OFFLINE = "not checked (offline)"
#: not an archive read with trusted log keys: L5 has nothing to hold
NOT_APPLICABLE = "not applicable"

#: ``tails`` not given: :func:`freshness` asks the topic itself
ASK: Literal["ask"] = "ask"
#: The topic's newest archived checkpoint per partition; None: Kafka did not answer.
Tails = Mapping[int, TopicTail] | None


@dataclass(frozen=True, slots=True)
class Fresh:
    """What check L5 said of a run that passed it (a rollback raises), for the report."""

    verdict: str = NOT_APPLICABLE
    notes: tuple[str, ...] = field(default=())

    def annotate(self, report: VerifyReport) -> VerifyReport:
        if self.verdict == NOT_APPLICABLE and not self.notes:
            return report
        checks = (*report.checks, _LINE) if self.verdict == FRESH else report.checks
        return dataclasses.replace(
            report,
            checks=checks,
            warnings=(*report.warnings, *self.notes),
            freshness=self.verdict,
        )


def topic_tails(settings: Settings) -> Tails:
    """The sealed topic's newest archived checkpoint per partition; None if Kafka is down."""
    # Only here does reading an archive need a Kafka client (docs/design.md, "Layout").
    from tracevault.kafka import archived_tails  # noqa: PLC0415

    return archived_tails(settings, timeout=3.0)


def witness_urls(settings: Settings, urls: Sequence[str] | None) -> list[str]:
    """The witness stores given, or else the deployment's (``TRACEVAULT_WITNESS_STORES``)."""
    if urls:
        return list(urls)
    return [u.strip() for u in settings.witness_stores.split(",") if u.strip()]


def freshness(
    settings: Settings | None,
    run: LoadedRun,
    policy: LogPolicy,
    urls: Sequence[str] | None = None,
    *,
    tails: Tails | Literal["ask"] = ASK,
    offline: bool = False,
    archive: ObjectStore | None = None,
) -> Fresh:
    """Check L5 for ``run`` (read from ``settings``' archive, or the open ``archive`` it was
    read from) with the trusted ``policy``.

    Raises :class:`LogError` (exit 1) on a rollback. Not an archive run: not applicable.
    Without ``settings`` nothing can be compared: ``unverified`` (or offline, accepted)."""
    if run.source != "archive":
        return Fresh()
    origin = _signed_origin(run)
    if origin is None:  # the older segment layout, or a note L1 will name as unreadable
        return Fresh()
    if settings is None:
        why = "verify was given no settings to find the witness stores and the topic by"
        return _unproven(origin, why, offline, ())
    if tails == ASK:
        tails = None if offline else topic_tails(settings)
    urls = witness_urls(settings, urls)
    fresh = _check(settings, policy, urls, [origin], tails, archive=archive)
    if not fresh.ok:
        rb = fresh.rollbacks[0]
        raise LogError(
            f"{CHECK}: {rb.describe()}: run {run.run_id!r} is proven against a rolled-back "
            "log (newer checkpoints, tiles and indexes were deleted); the removed part cannot "
            "be verified",
            run=run.run_id,
            checkpoint=f"{rb.origin}@{rb.archived}",
        )
    if origin in fresh.topic_checked:
        return Fresh(FRESH, tuple(fresh.notes))
    if tails is None:
        why = "the sealed topic was not compared (Kafka not reachable"
        why += ", --offline)" if offline else ")"
    else:
        why = (
            "the sealed topic holds no checkpoint record of it that the archiver committed "
            "past (expired, or never archived)"
        )
    return _unproven(origin, why, offline, fresh.compared)


def _unproven(origin: str, why: str, offline: bool, compared: Sequence[str]) -> Fresh:
    """L5 found no rollback, but nothing proved the archive current."""
    floor = (
        "; " + "; ".join(compared) + " (a witness store shows a floor, not that the archive "
        "is current: whoever rolls the archive back may roll the store back with it)"
        if compared
        else "; no witness store holds a larger size"
    )
    if offline:
        return Fresh(OFFLINE, (f"{CHECK} not checked (--offline): {origin}: {why}{floor}",))
    return Fresh(
        UNVERIFIED,
        (
            f"{CHECK} unverified: nothing proved the archive of {origin} current: {why}"
            f"{floor}. Verify where Kafka answers, or give --offline to accept the archive "
            "as it is, knowingly",
        ),
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
    tails: Tails,
    *,
    archive: ObjectStore | None = None,
) -> Freshness:
    """L5 over ``origins`` (None: every origin of this deployment the evidence knows), in
    ``archive`` when the caller holds it open (a batch worker's store has its credentials)."""
    if archive is not None and origins is not None:
        stores = [open_store(u, settings, create=False) for u in urls]
        try:
            return check_freshness(archive, settings.topic_prefix, origins, keys=policy.keys,
                                   witness_stores=stores, witnesses=policy.witnesses,
                                   tails=tails)  # fmt: skip
        finally:
            for s in stores:
                s.close()
    return archive_freshness(
        settings,
        keys=policy.keys,
        witnesses=policy.witnesses,
        witness_urls=urls,
        tails=tails,
        origins=origins,
    )


def _head_evidence(settings: Settings, run_id: str, tails: Tails) -> str | None:
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


def removed(
    settings: Settings,
    run_id: str,
    policy: LogPolicy,
    urls: Sequence[str] | None,
    exc: NotFoundError,
    *,
    offline: bool = False,
) -> None:
    """Raise :class:`LogError` when evidence says the archive held ``run_id`` (or its
    logs were rolled back); return (so ``exc`` stands) otherwise."""
    tails = None if offline else topic_tails(settings)
    proof = _head_evidence(settings, run_id, tails)
    fresh = _check(settings, policy, witness_urls(settings, urls), None, tails)
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
