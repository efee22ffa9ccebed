"""Operating a retained archive: list runs, purge, and the retention report.

Legal holds are in ``_holds`` (a run with any held object is never purged: purge is all of a
run or nothing, so a segment written after the hold still cannot go while the hold stands).

Purge writes its record (``purges/…``, itself retained) *before* deleting, and deletes a run's
final receipt first, so a crash mid-purge never leaves a run that claims to be complete; the
next purge finishes the job.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from datetime import UTC, date, datetime, timedelta

from tracevault.archive._segment import read_segment
from tracevault.archive._store import ObjectInfo, ObjectStore, ObjectVersion, utc_now
from tracevault.archive.layout import (
    DAY_BATCH_ROOT,
    FinalReceipt,
    SegmentReceipt,
    day_batch_prefix,
    day_batch_runs,
    day_prefix,
    final_key,
    parse_segment_key,
    purge_record_key,
    receipt_key,
    run_id_from_key,
    run_prefix,
)
from tracevault.archive.tlog import RunIndex, parse_run_index_key
from tracevault.config import MIN_RETENTION_DAYS
from tracevault.errors import ArchiveError, NotFoundError, RetentionError, TraceVaultError
from tracevault.schemas import EventKind, decode_event

__all__ = [
    "ObjectRetention",
    "PurgeReport",
    "RunRetention",
    "RunSummary",
    "archived_run",
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


class _RunIds:
    """The run id of each ``runs/`` or ``index/days/`` key. A mapped ``<run>`` segment
    (``layout.run_segment``: a run id too long or odd to be named readably) does not give it
    back: it is read once from the run's own content (a run index, a receipt, the marker)."""

    def __init__(self, store: ObjectStore) -> None:
        self._store = store
        self._mapped: dict[str, str] = {}

    def __call__(self, key: str) -> str:
        rid = run_id_from_key(key)
        if rid is not None:
            return rid
        parts = key.split("/")
        seg = parts[1] if parts[0] == "runs" else parts[3]
        got = self._mapped.get(seg)
        if got is None:
            got = self._mapped[seg] = self._read(seg, key)
        return got

    def _read(self, seg: str, key: str) -> str:
        store = self._store
        keys = [key] if key.startswith("index/days/") else []
        keys += [i.key for i in store.list(f"runs/{seg}/")]
        for k in keys:
            try:
                data = store.get(k)
                if k.startswith("index/days/"):
                    if data:
                        return data.decode("utf-8")
                elif parse_run_index_key(k) is not None:
                    return RunIndex.from_json(data, k).run_id
                elif k.endswith(".receipt.json"):
                    rid = json.loads(data)["run_id"]
                    if isinstance(rid, str):
                        return rid
            except (TraceVaultError, ValueError, KeyError, TypeError):
                continue
        return f"runs/{seg}/"  # nothing names it: the report names the prefix instead


def _summaries(store: ObjectStore, keys: Iterable[str]) -> list[RunSummary]:
    runs: dict[str, list[str]] = {}
    run_of = _RunIds(store)
    for key in keys:
        runs.setdefault(run_of(key), []).append(key)
    out = []
    for run_id, ks in sorted(runs.items()):
        idx = [k for k in ks if parse_run_index_key(k) is not None]
        if idx:  # the static log: one read per index object (a run has few)
            read = [RunIndex.from_json(store.get(k), k) for k in idx]
            seqs = {s for i in read for _, s in i.leaves}
            out.append(RunSummary(run_id, len(idx), len(seqs), any(i.finished for i in read)))
            continue
        ranges = [r for r in map(parse_segment_key, ks) if r is not None]
        last = max((r[1] for r in ranges), default=-1)
        out.append(RunSummary(run_id, len(ranges), last + 1, final_key(run_id) in ks))
    return out


def _day_batch_runs(store: ObjectStore, prefix: str) -> dict[str, list[str]]:
    """run -> day-batch keys listing it (the static log's day index; shared, never purged)."""
    out: dict[str, list[str]] = {}
    for i in store.list(prefix):
        for rid in day_batch_runs(store.get(i.key)):
            out.setdefault(rid, []).append(i.key)
    return out


def runs_on_day(store: ObjectStore, day: date) -> list[str]:
    """The run ids the day index lists for ``day`` (UTC): the segment layout's markers, then
    the static log's per-flush batches, each run once, in that order."""
    seen: dict[str, None] = {}
    run_of = _RunIds(store)
    for m in store.list(day_prefix(day)):
        seen.setdefault(run_of(m.key), None)
    for rid in _day_batch_runs(store, day_batch_prefix(day)):
        seen.setdefault(rid, None)
    return list(seen)


def list_runs(
    store: ObjectStore, *, day: date | None = None, run_id: str | None = None
) -> list[RunSummary]:
    """Every archived run, the runs seen on ``day`` (UTC), or the one ``run_id``."""
    if run_id is not None:
        keys = [i.key for i in store.list(run_prefix(run_id))]
        if not keys:
            raise NotFoundError(f"run {run_id!r} is not in the archive {store.url}")
        return _summaries(store, keys)
    if day is None:
        return _summaries(store, (i.key for i in store.list("runs/")))
    out = []
    for rid in sorted(runs_on_day(store, day)):
        out.extend(_summaries(store, (i.key for i in store.list(run_prefix(rid)))))
    return out


def archived_run(store: ObjectStore, run_id: str) -> tuple[bool, int] | None:
    """(archived to its end, events archived) of ``run_id`` in either layout, or None when
    nothing of it is archived yet: :func:`list_runs` of the one run, for progress displays."""
    try:
        (summary,) = list_runs(store, run_id=run_id)
    except NotFoundError:
        return None
    return summary.complete, summary.events


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
                    f"{key}: retained {days:.1f} days from when it was written, under {min_days}"
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
                    f"{key}: retained {days:.1f} days from when it was written, under {min_days}"
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


def _run_ids(store: ObjectStore) -> list[str]:
    run_of = _RunIds(store)
    return sorted({run_of(i.key) for i in store.list("runs/")})


def _day_index_runs(store: ObjectStore) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    run_of = _RunIds(store)
    for m in store.list("index/days/"):
        out.setdefault(run_of(m.key), []).append(m.key)
    return out


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
