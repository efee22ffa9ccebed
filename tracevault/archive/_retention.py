"""The retention report: each run's objects checked against what its receipts state.

Flags, per run, objects unlocked or retained too briefly, a store lock that disagrees with
its receipt, missing and extra objects, and on S3 what is layered over a locked original.
Purge (``_purge``) reads the same evidence (``_read_content``, ``_object_retention``,
``_versions``) before it deletes anything; listing runs is ``_runs``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from tracevault.archive._runs import (
    Progress,
    _day_batch_runs,
    _day_index_runs,
    _noop,
    _RunIds,
)
from tracevault.archive._segment import read_segment
from tracevault.archive._store import ObjectInfo, ObjectStore, ObjectVersion
from tracevault.archive.layout import (
    DAY_BATCH_ROOT,
    FinalReceipt,
    SegmentReceipt,
    final_key,
    parse_segment_key,
    receipt_key,
    run_prefix,
)
from tracevault.archive.tlog import parse_run_index_key
from tracevault.config import MIN_RETENTION_DAYS
from tracevault.errors import ArchiveError, NotFoundError, TraceVaultError
from tracevault.schemas import EventKind, decode_event

__all__ = [
    "ObjectRetention",
    "RunRetention",
    "retention_report",
]


@dataclass(frozen=True, slots=True)
class ObjectRetention:
    """One object's lock as the store reports it, what its receipt says, and what disagrees.

    ``retain_until`` is the store's lock (metadata); ``stated_until`` what the run's receipt
    says (content: docs/design.md, "Archive"); ``retention_days`` is counted from the
    receipt's written-at when there is one.
    """

    key: str
    lock_mode: str | None
    retain_until: str | None
    retention_days: float | None
    legal_hold: bool
    problems: list[str]
    stated_until: str | None = None


@dataclass(frozen=True, slots=True)
class RunRetention:
    """A run's retention evidence, checked against its receipts and the day index.

    ``missing``: objects the final receipt, the receipts or the day index call for that the
    store does not show (``runs/<run>/`` itself when the day index lists a run with nothing
    left); ``extra``: objects under the run no receipt accounts for; ``delete_markers`` and
    ``extra_versions`` (S3): keys with something layered over their locked original.
    """

    run_id: str
    objects: list[ObjectRetention]
    earliest_retain_until: str | None
    held: bool
    problems: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)
    delete_markers: list[str] = field(default_factory=list)
    extra_versions: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


# The writer takes retain-until and written-at from its own clock; the store stamps
# Last-Modified (S3) or ctime (file://) with its own. Minutes between the two are not tampering.
_CLOCK_SKEW = timedelta(minutes=5)
# The store keeps the lock the writer asked for; S3 may round it to the millisecond.
_LOCK_TOLERANCE = timedelta(seconds=2)


def _parse_time(text: str) -> datetime | None:
    if not text:
        return None
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        return None
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


@dataclass(slots=True)
class _Content:
    """What a run's receipts state about retention, per object key."""

    until: dict[str, datetime] = field(default_factory=dict)
    written: dict[str, datetime] = field(default_factory=dict)
    derived: set[str] = field(default_factory=set)  # version-1 receipts: a lower bound
    receipts: dict[str, SegmentReceipt] = field(default_factory=dict)
    final: FinalReceipt | None = None
    problems: list[str] = field(default_factory=list)


def _state(
    content: _Content,
    keys: list[str],
    *,
    receipt: str,
    created_at: str,
    retain_until: str,
    retention: timedelta,
) -> None:
    """Record one receipt's facts for the ``keys`` it covers.

    A version-1 receipt has no retain-until: it is taken as written-at + the configured
    retention (at least 183 days) and treated as a lower bound, since the writer may have
    used a longer one. A receipt with neither fact states nothing, and its run is never
    purged on metadata alone.
    """
    written = _parse_time(created_at)
    until = _parse_time(retain_until)
    derived = False
    if until is None and not retain_until and written is not None:
        until, derived = written + retention, True
    if until is None:
        content.problems.append(f"{receipt}: states no usable retain-until or written-at")
        return
    for key in keys:
        content.until[key] = until
        if written is not None:
            content.written[key] = written
        if derived:
            content.derived.add(key)


def _read_content(
    store: ObjectStore, run_id: str, keys: Iterable[str], retention_days: int
) -> _Content:
    content = _Content()
    retention = timedelta(days=max(retention_days, MIN_RETENTION_DAYS))
    fkey = final_key(run_id)
    for key in sorted(keys):
        try:
            if key == fkey:
                final = FinalReceipt.from_json(store.get(key), key)
                content.final = final
                _state(
                    content,
                    [key],
                    receipt=key,
                    created_at=final.created_at,
                    retain_until=final.retain_until,
                    retention=retention,
                )
            elif key.endswith(_RECEIPT_SUFFIX):
                r = SegmentReceipt.from_json(store.get(key), key)
                content.receipts[key] = r
                seg = key[: -len(_RECEIPT_SUFFIX)] + ".avro"
                _state(
                    content,
                    [seg, key],
                    receipt=key,
                    created_at=r.created_at,
                    retain_until=r.retain_until,
                    retention=retention,
                )
        except NotFoundError:
            content.problems.append(f"{key}: listed but gone when read")
        except (ArchiveError, TypeError) as exc:
            content.problems.append(f"{key}: unreadable receipt ({exc})")
    return content


_RECEIPT_SUFFIX = ".receipt.json"


def _object_retention(info: ObjectInfo, content: _Content, min_days: int) -> ObjectRetention:
    problems = []
    key = info.key
    stated = content.until.get(key)
    written = content.written.get(key)
    meta = info.retain_until
    days: float | None = None
    if info.lock_mode is None or meta is None:
        problems.append(f"{key}: not locked")
    if stated is None:
        if meta is not None and info.last_modified is not None:
            days = (meta - info.last_modified) / timedelta(days=1)
            if meta - info.last_modified < timedelta(days=min_days) - _CLOCK_SKEW:
                problems.append(
                    f"{key}: retained {days:.3f} days from when it was written, under {min_days}"
                )
        if parse_run_index_key(key) is None:
            problems.append(f"{key}: no receipt states its retention")
        # else: a static-log index object has no receipt; its lock, checked above against
        # when it was written, is its retention (docs/log.md, "Archive")
    else:
        if meta is not None:
            if key in content.derived:
                if meta < stated - _LOCK_TOLERANCE:
                    problems.append(
                        f"{key}: the store's lock ends {meta.isoformat()}, before the "
                        f"{stated.isoformat()} its receipt implies: the lock was shortened"
                    )
            elif abs(meta - stated) > _LOCK_TOLERANCE:
                problems.append(
                    f"{key}: the store's lock ends {meta.isoformat()} but its receipt says "
                    f"{stated.isoformat()}: metadata and content disagree"
                )
        if written is not None:
            days = (stated - written) / timedelta(days=1)
            if stated - written < timedelta(days=min_days) - _CLOCK_SKEW:
                problems.append(
                    f"{key}: retained {days:.3f} days from when it was written, under {min_days}"
                )
            if (
                key.endswith(".json")
                and info.last_modified is not None
                and abs(info.last_modified - written) > _CLOCK_SKEW
            ):
                problems.append(
                    f"{key}: written at {written.isoformat()} by its own account, but the store "
                    f"last changed it at {info.last_modified.isoformat()}: metadata and content "
                    "disagree"
                )
    return ObjectRetention(
        key,
        info.lock_mode,
        meta.isoformat() if meta else None,
        None if days is None else round(days, 3),
        bool(info.legal_hold),
        problems,
        stated.isoformat() if stated else None,
    )


def _finishes(store: ObjectStore, key: str) -> bool:
    """True when the segment ``key`` ends with RUN_FINISHED (so a final receipt is due)."""
    try:
        events = read_segment(store.get(key), key=key)
        return bool(events) and decode_event(events[-1].raw).kind is EventKind.RUN_FINISHED
    except TraceVaultError:
        return False  # an unreadable segment: verify names it; no claim here


def _structure(
    store: ObjectStore, run_id: str, present: set[str], content: _Content, indexed: bool
) -> tuple[list[str], list[str]]:
    """(missing, extra) of one run, against its final receipt, its receipts and the index."""
    missing: set[str] = set()
    extra: set[str] = set()
    fkey = final_key(run_id)
    if not present:
        why = "; the day index still lists the run" if indexed else ""
        missing.add(f"{run_prefix(run_id)} (every object{why})")
    if not indexed and present:
        missing.add(f"index/days/…/{run_prefix(run_id)[5:-1]} (no day-index entry)")
    ranges: dict[tuple[int, int], str] = {}
    for key in present:
        rng = parse_segment_key(key)
        if rng is not None:
            ranges[rng] = key
        elif key.endswith(_RECEIPT_SUFFIX) and key != fkey:
            seg = key[: -len(_RECEIPT_SUFFIX)] + ".avro"
            srng = parse_segment_key(seg)
            if srng is None:
                extra.add(key)
                continue
            ranges.setdefault(srng, seg)
            if seg not in present:
                missing.add(seg)
        elif key != fkey and parse_run_index_key(key) is None:  # run index: the static log
            extra.add(key)
    ordered = sorted(ranges)
    expect = 0
    for first, last in ordered:
        if first > expect:
            missing.add(f"{run_prefix(run_id)}seg-… (seqs {expect}..{first - 1})")
        expect = max(expect, last + 1)
    for n, (first, last) in enumerate(ordered):
        seg = ranges[(first, last)]
        not_last = n < len(ordered) - 1 or content.final is not None
        if seg in present and receipt_key(run_id, first, last) not in present and not_last:
            # The last segment of an open run may be a crash's leftover the archiver receipts
            # when it resumes; any other one has lost its receipt.
            missing.add(receipt_key(run_id, first, last))
    final = content.final
    if final is not None:
        listed = set(final.segments)
        for seg in final.segments:
            rng = parse_segment_key(seg)
            for k in (seg, None if rng is None else receipt_key(run_id, *rng)):
                if k is not None and k not in present:
                    missing.add(k)
        extra.update(k for k in present if parse_segment_key(k) is not None and k not in listed)
    elif fkey not in present and ordered:
        last_seg = ranges[ordered[-1]]
        if last_seg in present and _finishes(store, last_seg):
            missing.add(fkey)
    return sorted(missing), sorted(extra)


def _versions(history: list[ObjectVersion]) -> tuple[list[str], list[str]]:
    """(keys under a delete marker, keys with versions after their original)."""
    seen: set[str] = set()
    markers: set[str] = set()
    later: set[str] = set()
    for v in history:
        if v.delete_marker:
            markers.add(v.key)
        elif v.key in seen:
            later.add(v.key)
        seen.add(v.key)
    return sorted(markers), sorted(later)


def _check_run(
    store: ObjectStore,
    run_id: str,
    present: list[str],
    history: list[ObjectVersion],
    indexed: bool,
    *,
    min_days: int,
    retention_days: int,
) -> RunRetention:
    content = _read_content(store, run_id, present, retention_days)
    objs = [_object_retention(store.head(k), content, min_days) for k in present]
    missing, extra = _structure(store, run_id, set(present), content, indexed)
    markers, later = _versions(history)
    problems = [p for o in objs for p in o.problems] + content.problems
    problems += [f"missing: {k}" for k in missing]
    problems += [f"extra (no receipt accounts for it): {k}" for k in extra]
    problems += [f"{k}: a delete marker hides its locked original" for k in markers]
    problems += [f"{k}: a later version lies over its locked original" for k in later]
    untils = [o.retain_until for o in objs if o.retain_until]
    return RunRetention(
        run_id,
        objs,
        min(untils) if untils else None,
        any(o.legal_hold for o in objs),
        problems,
        missing,
        extra,
        markers,
        later,
    )


def retention_report(
    store: ObjectStore,
    *,
    min_days: int = MIN_RETENTION_DAYS,
    retention_days: int = MIN_RETENTION_DAYS,
    progress: Progress = _noop,
) -> list[RunRetention]:
    """Every run's retention, checked against its receipts, its final receipt and the index.

    Flags, per run: objects unlocked, retained under ``min_days``, or whose store lock
    disagrees with what their receipt states; missing and extra objects; and on S3 delete
    markers and later versions over a locked original. ``retention_days`` is what a
    version-1 receipt (no retain-until) is taken to promise from its written-at.
    """
    present: dict[str, list[str]] = {}
    run_of = _RunIds(store)
    for i in store.list("runs/"):
        present.setdefault(run_of(i.key), []).append(i.key)
    history: dict[str, list[ObjectVersion]] = {}
    for v in store.history("runs/"):
        history.setdefault(run_of(v.key), []).append(v)
    indexed = _day_index_runs(store)
    for rid, keys in _day_batch_runs(store, DAY_BATCH_ROOT).items():
        indexed.setdefault(rid, []).extend(keys)
    run_ids = sorted(present.keys() | history.keys() | indexed.keys())
    out = []
    for n, run_id in enumerate(run_ids, 1):
        out.append(
            _check_run(
                store,
                run_id,
                present.get(run_id, []),
                history.get(run_id, []),
                run_id in indexed,
                min_days=min_days,
                retention_days=retention_days,
            )
        )
        progress(n, len(run_ids))
    return out
