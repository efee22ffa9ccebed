"""Offline replay jobs over every archived run in a window, on local processes or a cluster.

Runs are found through the archive's day index (``index/days/<day>/<run>`` markers and the
static log's per-flush batches under ``index/day-runs/<day>/``; ``runs_on_day``), so a window
never lists the whole archive. Runs are cut into chunks; each chunk is one task that opens its
own store from plain :class:`ArchiveAccess` settings (never a pickled client), loads the agent
once, and loads, verifies and re-runs each of its runs, sending back plain :class:`BatchItem`
values. The engine that runs the tasks is the local process pool (``--workers``, the default)
or a Dask cluster (``tracevault.replayer.batch._dask``); the task is the same on both
(docs/replay-batch.md).
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import logging
import math
import multiprocessing
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from datetime import date, timedelta
from typing import Any, Literal, Protocol
from urllib.parse import urlsplit

from tracevault.archive import ObjectStore, TopicTail, open_store, runs_on_day
from tracevault.config import Settings
from tracevault.errors import ChainError, ConfigError, LogError
from tracevault.replayer._records import LazyEvents
from tracevault.replayer._results import ReplayResult, VerifyReport
from tracevault.replayer.batch._report import BatchItem, BatchReport
from tracevault.replayer.load.fresh import topic_tails
from tracevault.replayer.load.log_policy import unverified_provenance, unverified_record
from tracevault.replayer.load.opened import opened
from tracevault.replayer.load.source import load_archived
from tracevault.replayer.load.trust import Trust, unverified_freshness
from tracevault.replayer.rerun.replay import areplay, replay

__all__ = [
    "ArchiveAccess",
    "BatchItem",
    "BatchReport",
    "Engine",
    "LocalEngine",
    "chunked",
    "load_agent",
    "lost",
    "replay_chunk",
    "replay_with",
    "run_batch",
    "runs_between",
]

log = logging.getLogger(__name__)

MAX_CHUNK = 32  # runs per task: enough to amortise a task's cost, small enough to balance


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
    store = open_store(settings.archive_url, settings, create=False)
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
class S3Credentials:
    """Credentials resolved where the job was started, for workers that have none of their own."""

    access_key: str
    secret_key: str = field(repr=False)
    token: str | None = field(default=None, repr=False)

    @classmethod
    def resolve(cls) -> S3Credentials:
        """The boto3 default chain's credentials here (env, profile, role), frozen."""
        import boto3  # noqa: PLC0415 - only an s3:// archive with --ship-credentials needs it

        found = boto3.Session().get_credentials()
        if found is None:
            raise ConfigError(
                "--ship-credentials: no AWS credentials here to ship (set AWS_ACCESS_KEY_ID "
                "and AWS_SECRET_ACCESS_KEY, or a profile)"
            )
        frozen = found.get_frozen_credentials()
        if not frozen.access_key or not frozen.secret_key:
            raise ConfigError("--ship-credentials: the AWS credentials here are incomplete")
        return cls(frozen.access_key, frozen.secret_key, frozen.token)


@dataclass(frozen=True, slots=True)
class ArchiveAccess:
    """Everything a worker needs to open the archive, as plain values that travel anywhere.

    A worker builds its own client from these; a client object is never sent (it holds
    sockets and threads). Without ``credentials`` an s3:// store uses the worker's own AWS
    credential chain (its role or environment), which is how a cluster is usually run.
    """

    url: str
    s3_endpoint_url: str | None = None
    s3_region: str = "us-east-1"
    lock_mode: Literal["COMPLIANCE", "GOVERNANCE"] = "COMPLIANCE"
    credentials: S3Credentials | None = None
    # the key provider that opens encrypted runs (docs/confidentiality.md): names, no keys
    key_provider: Literal["none", "keyring", "kms"] = "none"
    keyring_path: str = "./.tracevault/keyring.json"
    kms_endpoint_url: str | None = None
    kms_region: str = "us-east-1"
    tenant: str = "default"
    #: how each run is verified (``replay verify``'s trust: public keys, witness store URLs
    #: and plain values, so it pickles), or ``skip`` (``--no-verify``); None: the
    #: deployment's (``Trust.of``, built where the job starts)
    checks: Trust | None = None
    #: the deployment a run's L5 is checked in: its topic prefix and log origin
    topic_prefix: str = "tracevault"
    log_origin: str = "tracevault.local/log"
    #: the sealed topic's archived checkpoints, read once where the job started (None:
    #: Kafka did not answer, or --offline): workers hold each run's archive to them (L5)
    tails: Mapping[int, TopicTail] | None = None
    #: the job's brokers: a worker that must ask Kafka (no tails) asks the job's, not a default
    bootstrap_servers: str | None = None

    @classmethod
    def of(
        cls,
        settings: Settings,
        *,
        ship_credentials: bool = False,
        checks: Trust | None = None,
        tails: Mapping[int, TopicTail] | None = None,
    ) -> ArchiveAccess:
        s3 = urlsplit(settings.archive_url).scheme == "s3"
        return cls(
            settings.archive_url,
            settings.s3_endpoint_url,
            settings.s3_region,
            settings.lock_mode,
            S3Credentials.resolve() if ship_credentials and s3 else None,
            settings.key_provider,
            settings.keyring_path,
            settings.kms_endpoint_url,
            settings.kms_region,
            settings.tenant,
            checks or Trust.of(settings),
            settings.topic_prefix,
            settings.log_origin,
            tails,
            settings.bootstrap_servers,
        )

    def content_settings(self) -> Settings:
        """Settings naming the key provider a worker opens encrypted runs with."""
        return Settings(
            key_provider=self.key_provider,
            keyring_path=self.keyring_path,
            kms_endpoint_url=self.kms_endpoint_url,
            kms_region=self.kms_region,
            tenant=self.tenant,
        )

    def deployment(self) -> Settings:
        """The archive's settings, as L5 and the witness stores read them in a worker."""
        settings = Settings(
            archive_url=self.url,
            s3_endpoint_url=self.s3_endpoint_url,
            s3_region=self.s3_region,
            lock_mode=self.lock_mode,
            topic_prefix=self.topic_prefix,
            log_origin=self.log_origin,
        )
        if self.bootstrap_servers is None:
            return settings
        return settings.model_copy(update={"bootstrap_servers": self.bootstrap_servers})

    def open(self) -> ObjectStore:
        settings = self.deployment()
        creds = self.credentials
        parts = urlsplit(self.url)
        if creds is None or parts.scheme != "s3":
            return open_store(self.url, settings, create=False)
        import boto3  # noqa: PLC0415 - slow to import; only s3:// needs it
        from botocore.config import Config  # noqa: PLC0415

        from tracevault.archive import S3Store  # noqa: PLC0415

        client = boto3.client(
            "s3",
            endpoint_url=self.s3_endpoint_url,
            region_name=self.s3_region,
            aws_access_key_id=creds.access_key,
            aws_secret_access_key=creds.secret_key,
            aws_session_token=creds.token,
            config=Config(retries={"max_attempts": 5, "mode": "standard"}),
        )
        return S3Store(parts.netloc, parts.path.strip("/"), lock_mode=self.lock_mode, client=client)


def lost(run_ids: Sequence[str], exc: BaseException, where: str) -> list[BatchItem]:
    """Error items for a task the engine lost (its worker died, it could not be sent)."""
    detail = f"{where} lost the task of {len(run_ids)} run(s): {type(exc).__name__}: {exc}"
    return [BatchItem(rid, "error", detail=detail) for rid in run_ids]


def _failed(run_id: str, exc: BaseException, started: float) -> BatchItem:
    took = time.perf_counter() - started
    if isinstance(exc, ChainError | LogError):
        return BatchItem(run_id, "verify_failed", 0, 0, exc.seq, exc.obj, str(exc), seconds=took)
    return BatchItem(run_id, "error", detail=f"{type(exc).__name__}: {exc}", seconds=took)


def _replay_one(store: ObjectStore, run_id: str, agent: Callable[..., Any],
                access: ArchiveAccess) -> BatchItem:  # fmt: skip
    """Load, verify (the whole ``verify``, with the job's trust: L5 against the tails read
    where the job started, the witness stores, the log, the records, who wrote them) and
    re-run one run; every failure becomes an item, never an exception."""
    started = time.perf_counter()
    checks = access.checks if access.checks is not None else Trust.of(access.deployment())
    try:
        run = load_archived(store, run_id)
        if checks.skip:
            events: Any = LazyEvents([r["raw"] for r in run.records.rows])
            count = len(run)
        else:
            try:
                report = checks.verify(
                    access.deployment(), run, rebuild=True, tails=access.tails, archive=store
                )
            except (ChainError, LogError) as exc:
                took = time.perf_counter() - started
                return BatchItem(
                    run_id, "verify_failed", len(run), 0, exc.seq, exc.obj, str(exc), seconds=took
                )
            if not report.ok:  # unverified: not the record
                took = time.perf_counter() - started
                detail = str(_unverified(run_id, report))
                return BatchItem(run_id, "verify_failed", len(run), detail=detail, seconds=took)
            events, count = report.events, report.count
        result = replay_with(opened(access.content_settings(), events), agent, None)
    except Exception as exc:  # an agent bug must not take the batch down
        return _failed(run_id, exc, started)
    except (SystemExit, GeneratorExit) as exc:  # an agent calling sys.exit() neither
        return _failed(run_id, exc, started)
    took = time.perf_counter() - started
    if result.divergence is not None:
        d = result.divergence
        return BatchItem(
            run_id, "diverged", count, result.steps, d.seq, None, d.reason, d.to_json(), took
        )
    return BatchItem(run_id, "ok", count, result.steps, seconds=took)


def _unverified(run_id: str, report: VerifyReport) -> LogError:
    """Why a run whose checks held is still not the record."""
    if not report.log_checked and not report.chain_only:
        return unverified_record(run_id, "re-runs")
    if report.freshness == "unverified":
        return unverified_freshness(run_id, "re-runs")
    return unverified_provenance(run_id, "re-runs", f"it was {report.provenance}")


def replay_chunk(access: ArchiveAccess, run_ids: Sequence[str], agent_spec: str) -> list[BatchItem]:
    """One task: the agent loaded and the store opened once for several runs (never raises).

    This is what runs on a worker, local or remote: it must import only what a worker has
    (tracevault and the agent's module) and take and return plain values.
    """
    started = time.perf_counter()
    try:
        agent = load_agent(agent_spec)
        store = access.open()
    except Exception as exc:
        return [_failed(rid, exc, started) for rid in run_ids]
    try:
        return [_replay_one(store, rid, agent, access) for rid in run_ids]
    finally:
        store.close()


def chunked(run_ids: Sequence[str], parallelism: int, size: int | None = None) -> list[list[str]]:
    """Runs cut into tasks: ``size`` each, or about four tasks per worker, at most MAX_CHUNK."""
    if size is None:
        size = max(1, min(MAX_CHUNK, math.ceil(len(run_ids) / (4 * max(1, parallelism)))))
    return [list(run_ids[i : i + size]) for i in range(0, len(run_ids), size)]


class Engine(Protocol):
    """Runs chunks of runs somewhere and yields each chunk's items as they complete."""

    @property
    def name(self) -> str: ...

    @property
    def parallelism(self) -> int: ...

    def map_chunks(
        self, access: ArchiveAccess, chunks: list[list[str]], agent_spec: str
    ) -> Iterator[list[BatchItem]]: ...


@dataclass(frozen=True, slots=True)
class LocalEngine:
    """This machine: ``workers`` spawned processes (1: in this process)."""

    workers: int = 1

    @property
    def name(self) -> str:
        return f"local ({self.workers} worker{'s' if self.workers > 1 else ''})"

    @property
    def parallelism(self) -> int:
        return self.workers

    def map_chunks(
        self, access: ArchiveAccess, chunks: list[list[str]], agent_spec: str
    ) -> Iterator[list[BatchItem]]:
        if self.workers <= 1:
            for chunk in chunks:
                yield replay_chunk(access, chunk, agent_spec)
            return
        # spawn, not fork: the parent runs a progress-bar thread, and forking a threaded
        # process can deadlock the child on a lock held at fork time
        ctx = multiprocessing.get_context("spawn")
        unfinished: list[list[str]] = []
        with ProcessPoolExecutor(max_workers=self.workers, mp_context=ctx) as pool:
            futures = {pool.submit(replay_chunk, access, c, agent_spec): c for c in chunks}
            for fut in as_completed(futures):
                try:
                    yield fut.result()
                except BrokenProcessPool:  # a process died: every unfinished task fails
                    unfinished.append(futures[fut])
                except Exception as exc:  # the task or its result could not cross
                    yield lost(futures[fut], exc, "a local worker process")
        if unfinished:
            log.warning(
                "a local worker process died; %d tasks again, one at a time", len(unfinished)
            )
            yield from self._isolated(access, unfinished, agent_spec, ctx)

    def _isolated(
        self, access: ArchiveAccess, chunks: list[list[str]], agent_spec: str, ctx: Any
    ) -> Iterator[list[BatchItem]]:
        """After a worker died (which fails the whole pool), one task at a time, so the task
        that kills its process is known; its runs again one by one, so only the run that
        kills loses (and is an error), never an innocent beside it."""
        queue = list(chunks)
        pool = ProcessPoolExecutor(max_workers=1, mp_context=ctx)
        try:
            while queue:
                chunk = queue.pop(0)
                try:
                    yield pool.submit(replay_chunk, access, chunk, agent_spec).result()
                except BrokenProcessPool as exc:
                    pool.shutdown(wait=True)
                    pool = ProcessPoolExecutor(max_workers=1, mp_context=ctx)
                    if len(chunk) > 1:
                        queue[:0] = [[rid] for rid in chunk]
                    else:
                        yield lost(chunk, exc, "a local worker process")
        finally:
            pool.shutdown(wait=True)


def run_batch(
    settings: Settings,
    agent_spec: str,
    since: date,
    until: date,
    *,
    workers: int = 1,
    engine: Engine | None = None,
    chunk_size: int | None = None,
    ship_credentials: bool = False,
    on_item: Callable[[BatchItem], None] | None = None,
    on_total: Callable[[int], None] | None = None,
    checks: Trust | None = None,
) -> BatchReport:
    """Replay every run archived between ``since`` and ``until`` (UTC days, inclusive).

    ``engine`` runs the tasks (default: :class:`LocalEngine` with ``workers`` processes).
    ``checks``: how each run is verified first, as ``replay verify`` does (default: the
    deployment's, ``Trust.of(settings)``; without a trusted log key or agent vkey every run
    is ``verify_failed``, unverified). The sealed topic's archived checkpoints are read once,
    here, for every run's L5 (not with ``checks.offline``): workers need no Kafka.
    """
    load_agent(agent_spec)  # a bad --agent is a usage error before any worker starts
    eng: Engine = engine if engine is not None else LocalEngine(workers)
    if checks is None:
        checks = Trust.of(settings)
    tails = None
    if not checks.skip and not checks.offline and checks.policy is not None:
        tails = topic_tails(settings)
    access = ArchiveAccess.of(
        settings, ship_credentials=ship_credentials, checks=checks, tails=tails
    )
    run_ids = runs_between(settings, since, until)
    chunks = chunked(run_ids, eng.parallelism, chunk_size)
    log.info(
        "batch replay of %d runs archived %s..%s in %d tasks on %s",
        len(run_ids),
        since,
        until,
        len(chunks),
        eng.name,
    )
    if on_total is not None:
        on_total(len(run_ids))
    started = time.perf_counter()
    order = {rid: i for i, rid in enumerate(run_ids)}
    items: list[BatchItem] = []
    for chunk_items in eng.map_chunks(access, chunks, agent_spec) if chunks else ():
        for item in chunk_items:
            items.append(item)
            if on_item is not None:
                on_item(item)
    items.sort(key=lambda it: order[it.run_id])
    took = time.perf_counter() - started
    return BatchReport(since, until, agent_spec, tuple(items), eng.name, took)
