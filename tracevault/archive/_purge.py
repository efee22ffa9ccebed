"""Purge: delete every run past its retention, unheld and undisputed, record first.

Legal holds are in ``_holds`` (a run with any held object is never purged: purge is all of a
run or nothing, so a segment written after the hold still cannot go while the hold stands).

Purge writes its record (``purges/…``, itself retained) *before* deleting, and deletes a run's
final receipt first, so a crash mid-purge never leaves a run that claims to be complete; the
next purge finishes the job. Its own module because deleting is the one thing here that
cannot be undone: what it reads to decide is the retention report's evidence (``_retention``).
"""

from __future__ import annotations

import json
import logging
import uuid
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta

from tracevault.archive._retention import _object_retention, _read_content, _versions
from tracevault.archive._runs import Progress, _day_index_runs, _noop, _run_ids
from tracevault.archive._store import ObjectStore, utc_now
from tracevault.archive.layout import (
    final_key,
    parse_segment_key,
    purge_record_key,
    receipt_key,
    run_prefix,
)
from tracevault.archive.tlog import parse_run_index_key
from tracevault.config import MIN_RETENTION_DAYS
from tracevault.errors import RetentionError

__all__ = [
    "PurgeReport",
    "purge",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PurgeReport:
    """What a purge deleted (or, dry, would delete), and which runs it kept and why.

    ``refused``: runs the store itself would not delete (its own clock says the lock holds);
    they are not in ``deleted`` and a second record says so.
    """

    at: str
    dry_run: bool
    deleted: dict[str, list[str]]
    kept: dict[str, str]
    record: str | None
    refused: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":")).encode()


def _delete_order(keys: list[str], run_id: str) -> list[str]:
    """Final receipt first, then each segment before its receipt, then anything else.

    The final receipt first: a purge that dies half-way never leaves a run that looks
    complete. Each receipt after its segment: whatever is left still has a receipt stating
    its retention, so the next purge can finish the job from content alone.
    """
    fk = final_key(run_id)
    present = set(keys)
    order = [fk] if fk in present else []
    for key in sorted(keys):
        rng = parse_segment_key(key)
        if rng is not None:
            order.append(key)
            if (rk := receipt_key(run_id, *rng)) in present:
                order.append(rk)
    return order + sorted(present - set(order))


def _why_kept(
    store: ObjectStore, run_id: str, at: datetime, *, retention_days: int
) -> tuple[str | None, list[str]]:
    """(why the run must stay, or None; its keys). Retention comes from the receipts.

    The store's lock is checked against them, never used instead: a lock that disagrees with
    its receipt (a file's mtime reset with ``touch``, say) keeps the run and names the object.
    """
    keys = [i.key for i in store.list(run_prefix(run_id))]
    if any(parse_run_index_key(k) is not None for k in keys):
        # A run of the static log shares its bundles and tiles with the runs archived with
        # it: deleting its index alone would hide it, not remove it (docs/log.md, "Archive").
        return "its events are in the shared static log: it goes with its partition log", keys
    content = _read_content(store, run_id, keys, retention_days)
    infos = [store.head(k) for k in keys]
    held = [i.key for i in infos if i.legal_hold]
    if held:
        return f"legal hold on {len(held)} object(s)", keys
    if content.problems:
        return f"its receipts cannot be read: {content.problems[0]}", keys
    markers, later = _versions(store.history(run_prefix(run_id)))
    if markers or later:
        # What is read now may not be what was locked: leave it for an investigation.
        return f"objects were layered over their locked originals: {(markers + later)[0]}", keys
    bad = [
        p
        for i in infos
        for p in _object_retention(i, content, MIN_RETENTION_DAYS).problems
        if "disagree" in p or "shortened" in p or "no receipt states" in p or "not locked" in p
    ]
    if bad:
        return f"retention facts disagree, refusing to delete: {bad[0]}", keys
    untils = [u for k in keys if (u := content.until.get(k)) is not None]
    untils += [i.retain_until for i in infos if i.retain_until is not None]
    until = max(untils, default=None)
    if until is not None and at < until:
        return f"retained until {until.isoformat()}", keys
    return None, keys


def purge(
    store: ObjectStore,
    *,
    now: datetime | None = None,
    dry_run: bool = False,
    retention_days: int = MIN_RETENTION_DAYS,
    progress: Progress = _noop,
) -> PurgeReport:
    """Delete every run whose receipts say it is past retain-until, unheld, and undisputed.

    A run is deleted only when every object's retain-until, as its receipt states it, has
    passed at ``now`` and the store's locks agree with the receipts (docs/design.md,
    "Archive"). ``now`` is injectable; on S3 the store's own clock has the last word, and a
    run it refuses is reported in ``refused``.
    """
    at = now or utc_now()
    deleted: dict[str, list[str]] = {}
    kept: dict[str, str] = {}
    run_ids = _run_ids(store)
    for n, run_id in enumerate(run_ids, 1):
        why, keys = _why_kept(store, run_id, at, retention_days=retention_days)
        if why is not None:
            kept[run_id] = why
        else:
            deleted[run_id] = _delete_order(keys, run_id)
        progress(n, len(run_ids))
    if deleted:
        markers = _day_index_runs(store)
        for rid, keys in deleted.items():
            keys.extend(markers.get(rid, []))
    record = None
    purge_id = uuid.uuid4().hex[:12]
    if deleted and not dry_run:
        record = purge_record_key(at, purge_id)
    report = PurgeReport(at.isoformat(), dry_run, deleted, kept, record)
    if record is None:
        return report
    # The record first: a purge that dies half-way is still on file, and is finished by
    # the next purge (the run is still expired and unheld).
    # Retained from whichever is later, the purge's clock or the wall clock: a store refuses
    # a retain-until in the past.
    until = max(at, utc_now()) + timedelta(days=retention_days)
    store.put(record, report.to_json(), retain_until=until)
    refused: dict[str, str] = {}
    for rid, keys in deleted.items():
        try:
            for key in keys:
                store.delete(key, now=at)
        except RetentionError as exc:
            refused[rid] = str(exc)
            log.warning("purge of run %s refused by the store: %s", rid, exc)
            continue
        log.info("purged run %s (%d objects)", rid, len(keys))
    if not refused:
        return report
    report = PurgeReport(
        at.isoformat(),
        dry_run,
        {r: k for r, k in deleted.items() if r not in refused},
        kept,
        purge_record_key(at, f"{purge_id}-refused"),
        refused,
    )
    # A second record: the first said what this purge set out to delete.
    store.put(report.record or record, report.to_json(), retain_until=until)
    return report
