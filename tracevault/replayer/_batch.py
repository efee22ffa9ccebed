"""Offline replay jobs over every archived run in a window, in worker processes.

Runs are found through the archive's day index (``index/days/<day>/<run>`` markers and the
static log's per-flush batches under ``index/day-runs/<day>/``; ``runs_on_day``), so a window
never lists the whole archive. Each worker opens its own store, loads,
verifies and re-runs one run and sends back a plain :class:`BatchItem` (results cross the
process boundary as frozen dataclasses of str/int, never live objects).
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import logging
import multiprocessing
import os
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from datetime import date, timedelta
from typing import Any, Literal

from tracevault.archive import open_store, runs_on_day
from tracevault.config import Settings
from tracevault.errors import ChainError, ConfigError, TraceVaultError
from tracevault.replayer._archive import load_from_archive
from tracevault.replayer._replay import areplay, replay
from tracevault.replayer._results import ReplayResult
from tracevault.replayer._verify import verify

__all__ = ["BatchItem", "BatchReport", "load_agent", "run_batch", "runs_between", "replay_with"]

Status = Literal["ok", "diverged", "verify_failed", "error"]

log = logging.getLogger(__name__)


def load_agent(spec: str) -> Callable[..., Any]:
    """The callable named by ``MODULE:CALLABLE`` (the working directory is importable)."""
    module, sep, attr = spec.partition(":")
    if not sep or not module or not attr:
        raise ConfigError(
            f"--agent must be MODULE:CALLABLE (e.g. myagents.support:run), got {spec!r}"
        )
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        obj: Any = importlib.import_module(module)
    except ImportError as exc:
        raise ConfigError(f"--agent {spec}: cannot import {module!r} ({exc})") from exc
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ConfigError(f"--agent {spec}: {module} has no attribute {attr!r}") from None
    if not callable(obj):
        raise ConfigError(f"--agent {spec} is not callable")
    return obj  # type: ignore[no-any-return]


def replay_with(events: Any, agent: Callable[..., Any], until: int | None) -> ReplayResult:
    """``replay`` or ``areplay`` as the agent needs; divergences are returned, not raised."""
    if inspect.iscoroutinefunction(agent):
        return asyncio.run(areplay(events, agent, until=until, raise_on_divergence=False))
    return replay(events, agent, until=until, raise_on_divergence=False)


def runs_between(settings: Settings, since: date, until: date) -> list[str]:
    """Run ids archived on each UTC day from ``since`` to ``until`` inclusive, first seen first."""
    if until < since:
        raise ConfigError(f"--until {until} is before --since {since}")
    store = open_store(settings.archive_url, settings)
    seen: dict[str, None] = {}
    try:
        day = since
        while day <= until:
            for run_id in runs_on_day(store, day):
                seen.setdefault(run_id, None)
            day += timedelta(days=1)
    finally:
        store.close()
    return list(seen)


@dataclass(frozen=True, slots=True)
class BatchItem:
    """One run's outcome: ``seq`` is the divergent or first bad seq, ``detail`` says why."""

    run_id: str
    status: Status
    count: int = 0
    steps: int = 0
    seq: int | None = None
    obj: str | None = None
    detail: str = ""
    divergence: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "status": self.status,
            "count": self.count,
            "steps": self.steps,
            "seq": self.seq,
            "object": self.obj,
            "detail": self.detail,
            "divergence": self.divergence,
        }


def replay_archived(settings: Settings, run_id: str, agent_spec: str) -> BatchItem:
    """Load, verify and re-run one archived run (the worker's job; never raises)."""
    try:
        agent = load_agent(agent_spec)
        store = open_store(settings.archive_url, settings)
        try:
            run = load_from_archive(store, run_id)
        finally:
            store.close()
        try:
            report = verify(run)
        except ChainError as exc:
            return BatchItem(run_id, "verify_failed", len(run), 0, exc.seq, exc.obj, str(exc))
        result = replay_with(report.events, agent, None)
    except ChainError as exc:
        return BatchItem(run_id, "verify_failed", 0, 0, exc.seq, exc.obj, str(exc))
    except TraceVaultError as exc:
        return BatchItem(run_id, "error", detail=f"{type(exc).__name__}: {exc}")
    except Exception as exc:  # an agent bug must not take the batch down
        return BatchItem(run_id, "error", detail=f"{type(exc).__name__}: {exc}")
    if result.divergence is not None:
        d = result.divergence
        return BatchItem(
            run_id, "diverged", report.count, result.steps, d.seq, None, d.reason, d.to_json()
        )
    return BatchItem(run_id, "ok", report.count, result.steps)


@dataclass(frozen=True, slots=True)
class BatchReport:
    since: date
    until: date
    agent: str
    items: tuple[BatchItem, ...] = field(default=())

    def totals(self) -> dict[str, int]:
        out = {"runs": len(self.items), "ok": 0, "diverged": 0, "verify_failed": 0, "error": 0}
        for it in self.items:
            out[it.status] += 1
        return out

    @property
    def ok(self) -> bool:
        return all(it.status == "ok" for it in self.items)

    def to_json(self) -> dict[str, Any]:
        return {
            "since": self.since.isoformat(),
            "until": self.until.isoformat(),
            "agent": self.agent,
            "ok": self.ok,
            "totals": self.totals(),
            "runs": [it.to_json() for it in self.items],
        }


def _results(
    settings: Settings, run_ids: list[str], agent_spec: str, workers: int
) -> Iterator[BatchItem]:
    if workers <= 1:
        for rid in run_ids:
            yield replay_archived(settings, rid, agent_spec)
        return
    # spawn, not fork: the parent runs a progress-bar thread, and forking a threaded process
    # can deadlock the child on a lock held at fork time
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        futures = [pool.submit(replay_archived, settings, rid, agent_spec) for rid in run_ids]
        for fut in as_completed(futures):
            yield fut.result()


def run_batch(
    settings: Settings,
    agent_spec: str,
    since: date,
    until: date,
    *,
    workers: int = 1,
    on_item: Callable[[BatchItem], None] | None = None,
    on_total: Callable[[int], None] | None = None,
) -> BatchReport:
    """Replay every run archived between ``since`` and ``until`` (UTC days, inclusive)."""
    load_agent(agent_spec)  # a bad --agent is a usage error before any worker starts
    run_ids = runs_between(settings, since, until)
    log.info(
        "batch replay of %d runs archived %s..%s with %d workers",
        len(run_ids),
        since,
        until,
        workers,
    )
    if on_total is not None:
        on_total(len(run_ids))
    order = {rid: i for i, rid in enumerate(run_ids)}
    items: list[BatchItem] = []
    for item in _results(settings, run_ids, agent_spec, workers):
        items.append(item)
        if on_item is not None:
            on_item(item)
    items.sort(key=lambda it: order[it.run_id])
    return BatchReport(since, until, agent_spec, tuple(items))
