"""Archiver throughput to file:// against fastavro writing the same records to one OCF.

Both sides write the same SealedEvent records to the same disk, in the same run. The
archiver's figure is end to end from the sealed topic, as the sequencer writes it (one
transaction per 500 records with a signed checkpoint record per partition): fetch from Kafka
(read_committed), parse, verify each checkpoint (Ed25519 + root), match the leaves, write the
partition's tiled log (bundles, tiles, run index objects, day markers, checkpoint), each
object fsynced and locked; it is timed from its first consumed message to its last written
object (the consumer group join before that is not archiving work). The baseline is
``fastavro.writer`` over the already-decoded records into a single deflate file, fsynced once.

    .venv/bin/python bench/archiver_throughput.py [--events 60000] [--per-run 20] [--reps 5]
        [--dir /dev/shm] [--index-step | --index-beside]

The archiver runs with its index step (the default, ``archive_index``); ``--index-step``
alternates it with and without, each beside fastavro, for what the index costs.

``--dir`` picks the filesystem both sides write to (default: the system temp directory). On
a tmpfs (``/dev/shm``) creating a file costs microseconds of kernel time, on a VM's ext4 it
can cost hundreds: running both separates the filesystem's cost from the archiver's own.

Last line: {"events_per_s", "baseline_events_per_s", "ratio", "objects_per_run", ...,
"archiver_cpu_us_per_event", "archiver_consumer_cpu_us_per_event", "baseline_cpu_us_per_event"}:
the CPU keys (µs of CPU per event: the archiver's whole process while it ran, its consumer
thread alone, fastavro) are what to compare on a shared machine, where the wall ratio moves
with the load. ``--index-step`` reports them as ``alone_...`` and ``with_index_...``.
Target (issue 11): ratio >= 0.5 with 20-event runs.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import fastavro
from _topics import bench_prefix, delete_topics

from tracevault.archive import open_store
from tracevault.chain import genesis, link
from tracevault.config import Settings
from tracevault.index import IndexWorker
from tracevault.kafka import ensure_topics
from tracevault.schemas import (
    AgentInfo,
    EventKind,
    SealedEvent,
    TraceEvent,
    canonical_json,
    default_schemas,
    encode_event,
    encode_sealed,
)
from tracevault.services.archiver import Archiver

# The sealed records are made as the sequencer makes them (with its checkpoint records) by the
# tests' SealedLog, so the bench and the tests share one maker of the contract's format.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.services.archiver.helpers import SealedLog

AGENT = AgentInfo("bench-agent", "1.0.0", "bench-host", "bench", "0.1.0")
INDEX_PASSES: list[float] = []  # --index-beside: the duration of each `index update` pass
INDEX_CPU_US: list[float] = []  # the index step's CPU time per event, per archiver run
# Per archiver run, CPU time per archived event (µs): the whole process while the archiver ran
# (its consumer thread, flush and put threads, librdkafka's threads), and its consumer thread
# alone. On a shared machine wall-clock ratios move with the load; CPU per event moves less.
CPU_US: list[float] = []
CONSUMER_CPU_US: list[float] = []
BASELINE_CPU_US: list[float] = []  # fastavro's, per baseline write


def _process_cpu() -> float:
    """User + system CPU seconds of this process so far (every thread)."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def make_runs(runs: int, per_run: int) -> dict[str, list[SealedEvent]]:
    out: dict[str, list[SealedEvent]] = {}
    for r in range(runs):
        run_id = f"bench-{r:04d}"
        prev = genesis(run_id)
        events = []
        for seq in range(per_run):
            kind = (
                EventKind.RUN_STARTED
                if seq == 0
                else EventKind.RUN_FINISHED
                if seq == per_run - 1
                else EventKind.MODEL_CALL
            )
            raw = encode_event(
                TraceEvent(
                    run_id=run_id,
                    seq=seq,
                    kind=kind,
                    at=1_767_225_600_000_000 + seq,
                    agent=AGENT,
                    model="model-2025-01-01" if kind is EventKind.MODEL_CALL else None,
                    request=canonical_json({"messages": [{"role": "user", "content": f"q{seq}"}]}),
                    response=canonical_json({"content": f"answer {seq} " + "lorem ipsum " * 8}),
                )
            )
            h = link(prev, raw)
            events.append(
                SealedEvent(run_id, seq, prev, h, raw, 1_767_225_600_000_000 + seq, 0, seq, "b")
            )
            prev = h
        out[run_id] = events
    return out


def fleet_order(runs: dict[str, list[SealedEvent]], concurrent: int) -> list[SealedEvent]:
    """Events as a fleet makes them: ``concurrent`` runs at a time, interleaved; when one
    finishes the next starts. (All runs interleaved from the start would end together.)"""
    pending = list(runs.values())
    active: list[list[SealedEvent]] = []
    out: list[SealedEvent] = []
    while pending or active:
        while pending and len(active) < concurrent:
            active.append(list(reversed(pending.pop(0))))
        for evs in active:
            out.append(evs.pop())
        active = [evs for evs in active if evs]
    return out


def produce(settings: Settings, events: list[SealedEvent]) -> str:
    """Write the events as the sequencer does (checkpoints in each transaction); the vkey."""
    sl = SealedLog(settings)
    items = [(ev.run_id, encode_sealed(ev)) for ev in events]
    for i in range(0, len(items), 500):
        sl.transaction(items[i : i + 500])
    return sl.vkey


def baseline(records: list[dict[str, object]], directory: Path) -> float:
    schema = fastavro.parse_schema(default_schemas().get("SealedEvent").source)
    path = directory / f"baseline-{uuid.uuid4().hex}.avro"
    t0, cpu0 = time.perf_counter(), _process_cpu()
    with open(path, "wb") as f:
        fastavro.writer(f, schema, records, codec="deflate")
        f.flush()
        os.fsync(f.fileno())
    BASELINE_CPU_US.append((_process_cpu() - cpu0) / len(records) * 1e6)
    return time.perf_counter() - t0


def _index_beside(url: str, stop: threading.Event, passes: list[float]) -> None:
    """``tracevault index update`` in a loop, in its own process, while the archiver runs:
    the deployment docs/index.md recommends (the index is not built on the archiver's
    thread). Each pass's duration is appended to ``passes``."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    cmd = [sys.executable, "-m", "tracevault", "index", "update", "--archive", url]
    while not stop.is_set():
        t0 = time.perf_counter()
        subprocess.run(cmd, env=env, capture_output=True, check=True, timeout=600)
        passes.append(time.perf_counter() - t0)


def archive_once(
    settings: Settings,
    directory: Path,
    runs: int,
    expected: int,
    *,
    index: bool = False,
    step: bool = True,
) -> tuple[float, int, int]:
    """One archiver over the whole topic: ``index``, `index update` looping beside it;
    ``step``, the archiver's own index step on (the default) or off."""
    url = f"file://{directory / ('archive-' + uuid.uuid4().hex)}"
    s = settings.model_copy(
        update={
            "archive_url": url,
            "archive_group_id": f"bench-{uuid.uuid4().hex}",
            "archive_index": step,
        }
    )
    archiver = Archiver(s, store=open_store(url, s))
    consumer_cpu: list[float] = []

    def run() -> None:
        started = time.thread_time()
        try:
            archiver.run()
        finally:
            consumer_cpu.append(time.thread_time() - started)

    worker = threading.Thread(target=run, daemon=True)
    stop_index = threading.Event()
    indexer = threading.Thread(target=_index_beside, args=(url, stop_index, INDEX_PASSES))
    if index:
        indexer.start()
    cpu0 = _process_cpu()
    worker.start()
    deadline = time.monotonic() + 300
    pause = threading.Event()
    while archiver.stats.runs_finished < runs and worker.is_alive():
        if time.monotonic() > deadline:
            sys.exit("archiver did not finish within 300 s")
        pause.wait(0.02)
    archiver.stop()
    worker.join(60)
    cpu_s = _process_cpu() - cpu0
    stop_index.set()
    if index:
        indexer.join(600)
    index_step = archiver.flusher.index
    if isinstance(index_step, IndexWorker):
        cpu_s += index_step.child_cpu_s  # the index's child process: its cost, counted here
    if index_step is not None and index_step.events:
        INDEX_CPU_US.append(index_step.cpu_s / index_step.events * 1e6)
    stats = archiver.stats
    if stats.events_archived != expected or stats.first_message_at is None:
        sys.exit(f"archiver archived {stats.events_archived} of {expected} events")
    CPU_US.append(cpu_s / expected * 1e6)
    CONSUMER_CPU_US.append(sum(consumer_cpu) / expected * 1e6)
    assert stats.last_write_at is not None
    size = sum(f.stat().st_size for f in Path(url[7:], "objects").rglob("*") if f.is_file())
    return stats.last_write_at - stats.first_message_at, size, stats.objects_written


def _forget_warm_up() -> None:
    """The CPU figures of the warm-up runs are not reported."""
    for figures in (CPU_US, CONSUMER_CPU_US, BASELINE_CPU_US):
        figures.clear()


def _med(xs: list[float]) -> float | None:
    return round(statistics.median(xs), 2) if xs else None


def _cpu_keys(name: str, process: list[float], consumer: list[float]) -> dict[str, object]:
    """The CPU per event of ``name``'s runs: each run's, and the medians."""
    return {
        f"{name}_cpu_us_per_event": _med(process),
        f"{name}_cpu_us_per_event_runs": [round(x, 2) for x in process],
        f"{name}_consumer_cpu_us_per_event": _med(consumer),
    }


def _fs_type(path: Path) -> str:
    """The filesystem type under ``path`` (from /proc/mounts; "unknown" elsewhere)."""
    best, fs = "", "unknown"
    target = str(path.resolve())
    try:
        lines = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return fs
    for line in lines:
        _dev, mnt, typ, *_ = line.split()
        if (target == mnt or target.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best):
            best, fs = mnt, typ
    return fs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=60_000)
    ap.add_argument("--per-run", type=int, default=20, help="events per run")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--concurrent", type=int, default=10, help="runs in flight at a time")
    ap.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="directory both sides write under (default: the system temp directory)",
    )
    ap.add_argument(
        "--bootstrap-servers", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
    )
    ap.add_argument(
        "--index-beside",
        action="store_true",
        help="alternate each rep's archiver with one that has `tracevault index update` "
        "looping beside it (its own process), and report the throughput ratio",
    )
    ap.add_argument(
        "--index-step",
        action="store_true",
        help="alternate each rep's archiver with and without its index step "
        "(archive_index), each beside fastavro, and report both ratios",
    )
    args = ap.parse_args()
    if args.index_beside:
        index_main(args, beside=True)
        return
    if args.index_step:
        index_main(args, beside=False)
        return
    per_run = args.per_run
    args.runs = args.events // per_run
    n = per_run * args.runs
    settings = Settings(
        bootstrap_servers=args.bootstrap_servers,
        topic_prefix=bench_prefix("archiver"),
        partitions=3,
        archive_segment_max_events=5000,
        archive_segment_max_age_s=0.25,
    )
    ensure_topics(settings)
    try:
        runs = make_runs(args.runs, per_run)
        events = fleet_order(runs, args.concurrent)
        settings = settings.model_copy(update={"log_vkeys": produce(settings, events)})
        records = [e.to_avro() for e in events]
        with tempfile.TemporaryDirectory(prefix="tv-bench-", dir=args.dir) as tmp:
            d = Path(tmp)
            baseline(records, d)  # warm-up: page cache, first-use schema parsing
            archive_once(settings, d, args.runs, n)
            _forget_warm_up()
            # Interleaved pairs: on a shared machine the load changes between reps; a ratio of
            # two figures taken moments apart survives that, a ratio of global medians not.
            base: list[float] = []
            arch: list[tuple[float, int, int]] = []
            for _ in range(args.reps):
                base.append(baseline(records, d))
                arch.append(archive_once(settings, d, args.runs, n))
        base_s = statistics.median(base)
        arch_s = statistics.median(t for t, _, _ in arch)
        ratio = statistics.median(b / a for b, (a, _, _) in zip(base, arch, strict=True))
        result = {
            "dir": str(args.dir or tempfile.gettempdir()),
            "filesystem": _fs_type(args.dir or Path(tempfile.gettempdir())),
            "events": n,
            "runs": args.runs,
            "events_per_run": per_run,
            "concurrent_runs": args.concurrent,
            "reps": args.reps,
            "baseline_codec": "deflate",
            "flush_every": "5000 leaves or 0.25 s per partition",
            "events_per_s": round(n / arch_s),
            "baseline_events_per_s": round(n / base_s),
            "ratio": round(ratio, 3),
            "archive_bytes": arch[0][1],
            "objects_per_run": round(arch[0][2] / args.runs, 2),
            "timing": "medians of interleaved reps after a warm-up; ratio = median of per-rep "
            "ratios; archiver from first consumed message to last object written",
            **_cpu_keys("archiver", CPU_US, CONSUMER_CPU_US),
            "baseline_cpu_us_per_event": _med(BASELINE_CPU_US),
            "cpu": "us of CPU per event: the archiver process's (every thread) while it ran, "
            "its consumer thread's, fastavro's",
        }
        print(
            json.dumps(
                {
                    "archiver_s": [round(t, 3) for t, _, _ in arch],
                    "baseline_s": [round(t, 3) for t in base],
                }
            )
        )
        print(json.dumps(result))
    finally:
        delete_topics(settings.bootstrap_servers, settings.topics.all())


def index_main(args: argparse.Namespace, *, beside: bool) -> None:
    """The archiver without the index and with it (``beside``: `index update` looping in
    its own process; else the archiver's own index step), alternated (the order swapped
    every rep), each rep beside fastavro: the index's cost is the throughput it takes from
    the archiver, and the archiver with it must stay >= 0.5 of fastavro."""
    per_run = args.per_run
    args.runs = args.events // per_run
    n = per_run * args.runs
    settings = Settings(
        bootstrap_servers=args.bootstrap_servers,
        topic_prefix=bench_prefix("archiver"),
        partitions=3,
        archive_segment_max_events=5000,
        archive_segment_max_age_s=0.25,
    )
    ensure_topics(settings)
    try:
        events = fleet_order(make_runs(args.runs, per_run), args.concurrent)
        settings = settings.model_copy(update={"log_vkeys": produce(settings, events)})
        records = [e.to_avro() for e in events]
        alone: list[float] = []
        with_: list[float] = []
        base: list[float] = []
        with tempfile.TemporaryDirectory(prefix="tv-bench-", dir=args.dir) as tmp:
            d = Path(tmp)
            baseline(records, d)  # warm-up
            archive_once(settings, d, args.runs, n, step=not beside)
            _forget_warm_up()
            cpu: dict[bool, tuple[list[float], list[float]]] = {False: ([], []), True: ([], [])}
            for rep in range(args.reps):
                base.append(baseline(records, d))
                for on in (False, True) if rep % 2 == 0 else (True, False):
                    kw = {"index": on, "step": False} if beside else {"step": on}
                    t = archive_once(settings, d, args.runs, n, **kw)[0]
                    (with_ if on else alone).append(t)
                    cpu[on][0].append(CPU_US[-1])
                    cpu[on][1].append(CONSUMER_CPU_US[-1])
        ratios = [a / b for a, b in zip(alone, with_, strict=True)]
        print(json.dumps({
            "bench": f"archiver_throughput --index-{'beside' if beside else 'step'}",
            "events": n,
            "reps": args.reps,
            "alone_events_per_s": round(n / statistics.median(alone)),
            "with_index_events_per_s": round(n / statistics.median(with_)),
            "baseline_events_per_s": round(n / statistics.median(base)),
            "ratio_with_to_alone": round(statistics.median(ratios), 3),
            "ratios": [round(r, 3) for r in ratios],
            "fastavro_ratio_alone": round(
                statistics.median(b / a for b, a in zip(base, alone, strict=True)), 3),
            "fastavro_ratio_with_index": round(
                statistics.median(b / a for b, a in zip(base, with_, strict=True)), 3),
            "index_step_cpu_us_per_event": [round(x, 2) for x in INDEX_CPU_US],
            **_cpu_keys("alone", *cpu[False]),
            **_cpu_keys("with_index", *cpu[True]),
            "baseline_cpu_us_per_event": _med(BASELINE_CPU_US),
            "index_pass_s_median": round(statistics.median(INDEX_PASSES), 2) if INDEX_PASSES
            else None,
            "target": "ratio_with_to_alone >= 0.9 (the index costs <= 10 %); "
            "fastavro_ratio_with_index >= 0.5",
        }))  # fmt: skip
    finally:
        delete_topics(settings.bootstrap_servers, settings.topics.all())


if __name__ == "__main__":
    main()
