"""Operating a retained archive: list runs, legal holds, purge, and the retention report.

Legal hold is per run: ``hold_run`` places a hold on every object the run has, and a run with
any held object is never purged (purge is all of a run or nothing), so a segment written after
the hold still cannot go while the hold stands. Purge writes its record (``purges/…``, itself
retained) *before* deleting, and deletes a run's final receipt first, so a crash mid-purge
never leaves a run that claims to be complete; the next purge finishes the job.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from datetime import date, datetime, timedelta

from tracevault.archive._store import ObjectInfo, ObjectStore, utc_now
from tracevault.archive.layout import (
    day_prefix,
    final_key,
    parse_segment_key,
    purge_record_key,
    run_id_from_key,
    run_prefix,
)
from tracevault.config import MIN_RETENTION_DAYS
from tracevault.errors import NotFoundError

__all__ = [
    "ObjectRetention",
    "PurgeReport",
    "RunRetention",
    "RunSummary",
    "hold_run",
    "list_runs",
    "purge",
    "retention_report",
]

log = logging.getLogger(__name__)

Progress = Callable[[int, int], None]


def _noop(done: int, total: int) -> None:
    return None


@dataclass(frozen=True, slots=True)
class RunSummary:
    """One run as ``archive ls`` shows it (from keys alone: nothing is fetched)."""

    run_id: str
    segments: int
    events: int
    complete: bool


def _summaries(keys: Iterable[str]) -> list[RunSummary]:
    runs: dict[str, list[str]] = {}
    for key in keys:
        runs.setdefault(run_id_from_key(key), []).append(key)
    out = []
    for run_id, ks in sorted(runs.items()):
        ranges = [r for r in map(parse_segment_key, ks) if r is not None]
        last = max((r[1] for r in ranges), default=-1)
        out.append(RunSummary(run_id, len(ranges), last + 1, final_key(run_id) in ks))
    return out


def list_runs(
    store: ObjectStore, *, day: date | None = None, run_id: str | None = None
) -> list[RunSummary]:
    """Every archived run, the runs seen on ``day`` (UTC), or the one ``run_id``."""
    if run_id is not None:
        keys = [i.key for i in store.list(run_prefix(run_id))]
        if not keys:
            raise NotFoundError(f"run {run_id!r} is not in the archive {store.url}")
        return _summaries(keys)
    if day is None:
        return _summaries(i.key for i in store.list("runs/"))
    out = []
    for marker in store.list(day_prefix(day)):
        rid = run_id_from_key(marker.key)
        out.extend(_summaries(i.key for i in store.list(run_prefix(rid))))
    return out


def _run_objects(store: ObjectStore, run_id: str) -> list[ObjectInfo]:
    objs = store.list(run_prefix(run_id))
    if not objs:
        raise NotFoundError(
            f"run {run_id!r} has no archived objects in {store.url}; check the id "
            "(tracevault archive ls)"
        )
    return objs


def hold_run(store: ObjectStore, run_id: str, on: bool) -> int:
    """Place (``on``) or release a legal hold on every object of the run; returns the count."""
    objs = _run_objects(store, run_id)
    for obj in objs:
        store.set_legal_hold(obj.key, on)
    log.info(
        "legal hold %s on run %s (%d objects)", "placed" if on else "released", run_id, len(objs)
    )
    return len(objs)


@dataclass(frozen=True, slots=True)
class ObjectRetention:
    key: str
    lock_mode: str | None
    retain_until: str | None
    retention_days: float | None
    legal_hold: bool
    problems: list[str]


@dataclass(frozen=True, slots=True)
class RunRetention:
    """A run's retention evidence: every object's lock, and what is wrong with any of them."""

    run_id: str
    objects: list[ObjectRetention]
    earliest_retain_until: str | None
    held: bool
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


# The writer takes retain-until from its own clock; the store stamps Last-Modified with its
# own (whole seconds on S3). A few seconds between the two is not a short retention.
_CLOCK_SKEW = timedelta(minutes=5)


def _object_retention(info: ObjectInfo, min_days: int) -> ObjectRetention:
    problems = []
    days: float | None = None
    if info.lock_mode is None or info.retain_until is None:
        problems.append(f"{info.key}: not locked")
    elif info.last_modified is not None:
        held_for = info.retain_until - info.last_modified
        days = held_for / timedelta(days=1)
        if held_for < timedelta(days=min_days) - _CLOCK_SKEW:
            problems.append(
                f"{info.key}: retained {days:.1f} days from when it was written, under {min_days}"
            )
    return ObjectRetention(
        info.key,
        info.lock_mode,
        info.retain_until.isoformat() if info.retain_until else None,
        None if days is None else round(days, 3),
        bool(info.legal_hold),
        problems,
    )


def _run_ids(store: ObjectStore) -> list[str]:
    return sorted({run_id_from_key(i.key) for i in store.list("runs/")})


def retention_report(
    store: ObjectStore,
    *,
    min_days: int = MIN_RETENTION_DAYS,
    progress: Progress = _noop,
) -> list[RunRetention]:
    """For every run: each object's lock mode and retain-until; flags unlocked or short ones."""
    run_ids = _run_ids(store)
    out = []
    for n, run_id in enumerate(run_ids, 1):
        objs = [
            _object_retention(store.head(i.key), min_days) for i in store.list(run_prefix(run_id))
        ]
        untils = [o.retain_until for o in objs if o.retain_until]
        out.append(
            RunRetention(
                run_id,
                objs,
                min(untils) if untils else None,
                any(o.legal_hold for o in objs),
                [p for o in objs for p in o.problems],
            )
        )
        progress(n, len(run_ids))
    return out


@dataclass(frozen=True, slots=True)
class PurgeReport:
    """What a purge deleted (or, dry, would delete), and which runs it kept and why."""

    at: str
    dry_run: bool
    deleted: dict[str, list[str]]
    kept: dict[str, str]
    record: str | None

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":")).encode()


def _delete_order(keys: list[str], run_id: str) -> list[str]:
    """Final receipt first, then receipts, then segments: never a run that looks complete."""
    fk = final_key(run_id)
    return [k for k in keys if k == fk] + sorted(
        (k for k in keys if k != fk), key=lambda k: (not k.endswith(".json"), k)
    )


def purge(
    store: ObjectStore,
    *,
    now: datetime | None = None,
    dry_run: bool = False,
    retention_days: int = MIN_RETENTION_DAYS,
    progress: Progress = _noop,
) -> PurgeReport:
    """Delete every run whose objects are all past retain-until and none held.

    ``now`` is injectable for tests; on S3 the store's clock must agree, or it refuses.
    """
    at = now or utc_now()
    deleted: dict[str, list[str]] = {}
    kept: dict[str, str] = {}
    run_ids = _run_ids(store)
    for n, run_id in enumerate(run_ids, 1):
        infos = [store.head(i.key) for i in store.list(run_prefix(run_id))]
        held = [i.key for i in infos if i.legal_hold]
        live = [i for i in infos if not i.expired(at)]
        if held:
            kept[run_id] = f"legal hold on {len(held)} object(s)"
        elif live:
            until = max(i.retain_until for i in live if i.retain_until is not None)
            kept[run_id] = f"retained until {until.isoformat()}"
        else:
            deleted[run_id] = _delete_order([i.key for i in infos], run_id)
        progress(n, len(run_ids))
    markers: dict[str, list[str]] = {}
    if deleted:
        for m in store.list("index/days/"):
            rid = run_id_from_key(m.key)
            if rid in deleted:
                markers.setdefault(rid, []).append(m.key)
        for rid, ms in markers.items():
            deleted[rid].extend(ms)
    record = None
    if deleted and not dry_run:
        record = purge_record_key(at, uuid.uuid4().hex[:12])
    report = PurgeReport(at.isoformat(), dry_run, deleted, kept, record)
    if record is not None:
        # The record first: a purge that dies half-way is still on file, and is finished by
        # the next purge (the run is still expired and unheld).
        store.put(record, report.to_json(), retain_until=at + timedelta(days=retention_days))
        for rid, keys in deleted.items():
            for key in keys:
                store.delete(key, now=at)
            log.info("purged run %s (%d objects)", rid, len(keys))
    return report
