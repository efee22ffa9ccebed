"""Legal holds: a run, and everything reading and verifying it needs, cannot be deleted.

A hold covers every object the run has and, for a run of the static log, every log object
reading and verifying it needs (``run_log_keys``: the data and entry bundles of its leaves,
the hash tiles of its proofs, its checkpoints). Those log objects are shared between runs,
so each hold and release is recorded (``legal-holds/<run>/``, immutable) with the objects it
covered, and a release clears only the objects no other held run needs (docs/log.md,
"Legal hold"). A run with any held object is never purged (``_purge.purge``).
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta

from tracevault.archive._holes import holes_prefix, parse_hole_key
from tracevault.archive._logread import run_log_keys
from tracevault.archive._store import ObjectInfo, ObjectStore, utc_now
from tracevault.archive.layout import HOLDS_ROOT, hold_record_key, run_prefix
from tracevault.archive.tlog import (
    RunIndex,
    checkpoint_prefix,
    parse_checkpoint_key,
    parse_run_index_key,
)
from tracevault.config import MIN_RETENTION_DAYS
from tracevault.errors import ArchiveError, NotFoundError

__all__ = ["HoldReport", "hold_run"]

log = logging.getLogger(__name__)


def _run_objects(store: ObjectStore, run_id: str) -> list[ObjectInfo]:
    objs = store.list(run_prefix(run_id))
    if not objs:
        raise NotFoundError(
            f"run {run_id!r} has no archived objects in {store.url}; check the id "
            "(tracevault archive ls)"
        )
    return objs


@dataclass(frozen=True, slots=True)
class HoldReport:
    """What one ``hold_run`` did.

    ``objects``: the objects whose hold it placed (hold) or cleared (release); ``kept``
    (release): shared log objects that stay held, each with the other held runs needing it;
    ``missing``: objects reading the run needs that the store does not have (the hold
    covers the rest); ``record``: the ``legal-holds/`` object recording it.
    """

    run_id: str
    on: bool
    objects: list[str]
    kept: dict[str, list[str]]
    missing: list[str]
    record: str


def _needed_keys(store: ObjectStore, run_id: str, newest: dict[str, int | None]) -> set[str]:
    """Every object reading and verifying ``run_id`` needs: the run's own objects and, for a
    run of the static log, the log objects a verify reads now and those it reads when the
    run's own last checkpoint is the newest (so what is held verifies on its own)."""
    keys = {o.key for o in _run_objects(store, run_id)}
    by_log: dict[str, list[RunIndex]] = {}
    for key in sorted(keys):
        if parse_run_index_key(key) is not None:
            idx = RunIndex.from_json(store.get(key), key)
            by_log.setdefault(idx.log, []).append(idx)
    for log_key, indexes in by_log.items():
        if log_key not in newest:
            cps = store.list(checkpoint_prefix(log_key))
            newest[log_key] = parse_checkpoint_key(cps[-1].key) if cps else None
        sizes = {newest[log_key], max(i.size for i in indexes)}
        # the holes a verify reads (docs/log.md, "Holes"), and the checkpoint a run before a
        # gone hole is proven against: where the hole began
        holes = [h for i in store.list(holes_prefix(log_key)) if (h := parse_hole_key(i.key))]
        last = max((leaf for i in indexes for leaf, _ in i.leaves), default=-1)
        after = [h.first for h in holes if h.kind == "gone" and h.first > last]
        if after:
            sizes.add(min(after))
        keys |= {h.key for h in holes}
        for size in sizes:
            if size is not None:
                keys |= run_log_keys(indexes, size, own_entries=True)
    return keys


def _hold_history(store: ObjectStore) -> dict[str, set[str] | None]:
    """run -> the objects its standing hold records cover (None: its last record released it)."""
    out: dict[str, set[str] | None] = {}
    for info in store.list(HOLDS_ROOT):  # key order is time order, per run
        try:
            rec = json.loads(store.get(info.key))
            rid, on, objects = str(rec["run_id"]), bool(rec["on"]), set(rec["objects"])
        except (ValueError, KeyError, TypeError) as exc:
            raise ArchiveError(
                f"legal hold record {info.key} is unreadable ({exc}): no release can tell "
                "what the other held runs need until it is investigated"
            ) from exc
        out[rid] = (out.get(rid) or set()) | objects if on else None
    return out


def _set_holds(store: ObjectStore, keys: Iterable[str], on: bool) -> tuple[list[str], list[str]]:
    """(done, missing): one request per object, a few in flight (a run's log part is many)."""

    def one(key: str) -> bool:
        try:
            store.set_legal_hold(key, on)
        except NotFoundError:
            return False
        return True

    todo = sorted(keys)
    with ThreadPoolExecutor(_HOLD_PARALLEL) as pool:
        found = dict(zip(todo, pool.map(one, todo), strict=True))
    return [k for k in todo if found[k]], [k for k in todo if not found[k]]


_HOLD_PARALLEL = 8


def hold_run(
    store: ObjectStore,
    run_id: str,
    on: bool,
    *,
    retention_days: int = MIN_RETENTION_DAYS,
    now: datetime | None = None,
) -> HoldReport:
    """Place (``on``) or release a legal hold on a run and everything verifying it needs.

    A hold is recorded first, then placed: while it is being placed, a release of another
    run already keeps its objects. A release clears the objects the run's holds placed and
    its own objects, except those another held run needs (by its records and by its index
    objects now), and is recorded after, with what it cleared and what it kept.
    """
    at = now or utc_now()
    until = max(at, utc_now()) + timedelta(days=retention_days)
    record = hold_record_key(run_id, at, uuid.uuid4().hex[:12])
    newest: dict[str, int | None] = {}
    if on:
        keys = _needed_keys(store, run_id, newest)
        body = {"run_id": run_id, "on": True, "at": at.isoformat(), "objects": sorted(keys)}
        store.put(record, _canonical_json(body), retain_until=until)
        done, missing = _set_holds(store, keys, True)
        log.info("legal hold placed on run %s (%d objects)", run_id, len(done))
        return HoldReport(run_id, True, done, {}, missing, record)
    history = _hold_history(store)
    mine = {o.key for o in _run_objects(store, run_id)} | (history.get(run_id) or set())
    kept: dict[str, list[str]] = {}
    for other, placed in sorted(history.items()):
        if other == run_id or placed is None:
            continue
        try:
            needs = placed | _needed_keys(store, other, newest)
        except NotFoundError:
            needs = placed  # its run objects are gone; what its holds placed still stands
        for key in mine & needs:
            kept.setdefault(key, []).append(other)
    done, missing = _set_holds(store, mine - kept.keys(), False)
    body = {
        "run_id": run_id,
        "on": False,
        "at": at.isoformat(),
        "objects": done,
        "kept": {k: v for k, v in sorted(kept.items())},
    }
    store.put(record, _canonical_json(body), retain_until=until)
    log.info(
        "legal hold released from run %s (%d objects; %d stay held for other runs)",
        run_id,
        len(done),
        len(kept),
    )
    return HoldReport(run_id, False, done, kept, missing, record)


def _canonical_json(obj: dict[str, object]) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()
