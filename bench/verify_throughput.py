"""Verify with proofs: verify + rebuild of one 100,000-event run from the archive's signed,
tiled log (checks L1-L4 first), against fastavro reading the same records.

Setup (not timed): one run of ``--events`` events, chained as the sequencer chains them.

* The **tiled archive** is written the way the archiver writes it (``PartitionLog`` of
  ``tracevault.services.archiver``): the sequencer signs one checkpoint per transaction of
  ``--batch`` events; the archiver appends each checkpoint's leaves and flushes (bundles,
  data bundles, hash tiles, one run index, the checkpoint object last) every
  ``--flush-events`` verified leaves (``archive_segment_max_events``), at a checkpoint.
* The same records as deflate OCF segments of ``--per-segment`` events (the older layout)
  for the fastavro baseline and the topic line.

Timed, in the same process and on the same files, best of ``--reps`` each:

* **archive** (the headline): ``load_from_archive`` (one listing of ``runs/<run>/``, the run
  index objects, the data bundles, the newest checkpoint, the hash tiles, the older
  checkpoints) + ``verify(rebuild=True, require_finished=True, keys=[vkey])``: L1 signature,
  L2 every event proven against the signed root, L3, L4 a consistency proof from every
  checkpoint a run index names; then checks 1-6 with every event decoded, A4. Each sealed
  value is walked once (``sealed_columns``: the columns the checks and L2 read, its event
  decoded in the same pass).
* **archive_no_log**: the same without keys (the log's cost is the difference).
* **topic**: the segment store with the run's checkpoint records beside it, as
  ``verify --from topic`` has them (every record opened, the run placed on its leaves).
* **baseline**: ``fastavro.reader`` over the OCF segments holding the same records, every
  record iterated (the read the target is set against). ``bundle_baseline`` (extra): fastavro
  ``schemaless_reader`` over every value of the archive's data bundles.

With ``--agent-identity`` the run is signed as a Recorder with an agent key signs it (a note
in RUN_STARTED, every 64 events, in RUN_FINISHED; docs/identity.md) and every verify trusts
that key (check I: one signature per note; the digests are read only where a chain differs).

    .venv/bin/python bench/verify_throughput.py [--events 100000] [--reps 5]
    .venv/bin/python bench/verify_throughput.py --agent-identity

Last line: {"events", "seconds", "ratio" (best over best), "ratio_per_rep_median", ...}.
Target: ratio >= 0.45.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import struct
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from io import BytesIO
from pathlib import Path
from typing import Any

import fastavro
from replay_throughput import RUN, archive, baseline, make_run

from tracevault.archive import open_store
from tracevault.archive.tlog import data_key, log_prefix
from tracevault.chain import genesis, link
from tracevault.producer._attest import Attestor
from tracevault.replayer._results import LoadedRun
from tracevault.replayer.load.archive import load_from_archive
from tracevault.replayer.load.log_policy import LogPolicy
from tracevault.replayer.load.verify import verify
from tracevault.schemas import (
    SealedEvent,
    decode_event,
    default_schemas,
    encode_event,
    encode_sealed,
)
from tracevault.services.archiver._logwriter import LeafRecord, PartitionLog
from tracevault.transparency import (
    TILE_WIDTH,
    AgentKeys,
    CheckpointRecord,
    CompactTree,
    Ed25519Signer,
    FoundCheckpoint,
    hash_leaf,
    leaf_data,
    log_origin,
    tile_width,
)

PREFIX = "bench"
ORIGIN = log_origin("tracevault", PREFIX, 0)


AGENTS: list[AgentKeys | None] = [None]  # set by --agent-identity


def signed_run(sealed: list[SealedEvent], key: Ed25519Signer) -> list[SealedEvent]:
    """``sealed``'s events as a Recorder with ``key`` writes them, chained again."""

    def encode(f: Any) -> bytes:
        return encode_event(dataclasses.replace(events[f[0]], attributes=dict(f[10] or {})))

    events = [decode_event(s.raw, check_json=False) for s in sealed]
    att = Attestor(RUN, encode, key, every=64, interval_s=1e9)
    prev, out = genesis(RUN), []
    for s, ev in zip(sealed, events, strict=True):
        raw = att.encode_fields(
            (ev.seq, ev.kind, ev.at, ev.request, ev.response, *(None,) * 5, {}, None)
        )
        h = link(prev, raw)
        out.append(dataclasses.replace(s, prev_hash=prev, hash=h, raw=raw))
        prev = h
    return out


def checkpoints(
    sealed: list[SealedEvent], batch: int, key: Ed25519Signer
) -> list[tuple[CheckpointRecord, list[LeafRecord]]]:
    """One signed checkpoint record per ``batch`` events, as the sequencer writes them."""
    tree = CompactTree()
    out = []
    for i in range(0, len(sealed), batch):
        recs = []
        for s in sealed[i : i + batch]:
            data = leaf_data(s.run_id, s.seq, s.hash)
            fin = s.seq == len(sealed) - 1
            value = encode_sealed(s)
            recs.append(
                LeafRecord(s.run_id, s.seq, s.hash, fin, s.sealed_at, data, hash_leaf(data), value)
            )
        rec, tree = CheckpointRecord.build(tree, [r.leaf_hash for r in recs], ORIGIN, key)
        # through bytes, as a reader of the topic gets them
        out.append((CheckpointRecord.decode(rec.encode()), recs))
    return out


def archive_log(
    root: Path,
    cps: list[tuple[CheckpointRecord, list[LeafRecord]]],
    key: Ed25519Signer,
    flush_events: int,
) -> int:
    """The archiver's write of the verified checkpoints: flush every ``flush_events`` leaves."""
    store = open_store(f"file://{root}")
    plog = PartitionLog.open(store, PREFIX, ORIGIN, 0, [key.verifier])
    until = datetime.now(UTC) + timedelta(days=183)
    flushes = 0
    with ThreadPoolExecutor(4) as pool:
        for rec, leaves in cps:
            for r in leaves:
                plog.append(r)
            plog.note, plog.note_size = rec.note, rec.end
            if plog.unflushed >= flush_events:
                plog.flush(until, pool)
                flushes += 1
        if plog.unflushed:
            plog.flush(until, pool)
            flushes += 1
    store.close()
    return flushes


def ours(
    root: Path, keys: LogPolicy | None, found: tuple[FoundCheckpoint, ...] = ()
) -> tuple[float, LoadedRun, str | None]:
    store = open_store(f"file://{root}")
    t = time.perf_counter()
    run = load_from_archive(store, RUN)
    if found:  # the topic's evidence: checkpoint records beside the records
        run = dataclasses.replace(run, log_origin=ORIGIN, log_checkpoints=found)
    report = verify(run, require_finished=True, rebuild=True, log=keys, agents=AGENTS[0])
    dt = time.perf_counter() - t
    assert AGENTS[0] is None or any(c.startswith("I identity") for c in report.checks)
    store.close()
    assert report.finished and report.count == len(run)
    assert isinstance(report.events, list) and len(report.events) == report.count
    assert report.log_checked is (keys is not None)
    return dt, run, report.checkpoint


def bundle_baseline(root: Path, size: int) -> tuple[float, int]:
    """fastavro's schemaless reader over every value of the data bundles of ``size`` leaves."""
    schema = fastavro.parse_schema(default_schemas().get("SealedEvent").source)
    log = log_prefix(PREFIX, 0)
    paths = [
        root / "objects" / data_key(log, n, tile_width(0, n, size))
        for n in range((size + TILE_WIDTH - 1) // TILE_WIDTH)
    ]
    u32 = struct.Struct(">I")
    t = time.perf_counter()
    n = 0
    read = fastavro.schemaless_reader
    for p in paths:
        data = p.read_bytes()
        pos = 0
        while pos < len(data):
            (m,) = u32.unpack_from(data, pos)
            buf = BytesIO(data[pos + 14 : pos + 4 + m])  # past the single-object header
            read(buf, schema, None)
            pos += 4 + m
            n += 1
    return time.perf_counter() - t, n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--per-segment", type=int, default=10_000)
    ap.add_argument("--batch", type=int, default=500, help="events per checkpoint record")
    ap.add_argument("--flush-events", type=int, default=10_000, help="leaves per archive flush")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--agent-identity", action="store_true", help="the run signed by its agent")
    args = ap.parse_args()
    agent = Ed25519Signer.generate("bench.agents.example") if args.agent_identity else None
    key = Ed25519Signer.generate("bench.log")
    policy = LogPolicy((key.verifier,))
    with tempfile.TemporaryDirectory(prefix="tv-verify-bench-") as tmp:
        segs, tiled = Path(tmp) / "segments", Path(tmp) / "tiled"
        t = time.perf_counter()
        sealed = make_run(args.events)
        if agent is not None:
            sealed = signed_run(sealed, agent)
            agent_id = decode_event(sealed[0].raw, check_json=False).agent.agent_id
            AGENTS[0] = AgentKeys({agent_id: [agent.verifier]})
        paths = archive(segs, sealed, args.per_segment)
        cps = checkpoints(sealed, args.batch, key)
        flushes = archive_log(tiled, cps, key, args.flush_events)
        found = tuple(FoundCheckpoint(r, f"sealed[0]@{r.start}") for r, _ in cps)
        objects = sum(1 for p in (tiled / "objects").rglob("*") if p.is_file())
        print(json.dumps({"phase": "setup", "seconds": round(time.perf_counter() - t, 3)}))
        best: dict[str, float] = {}
        paired: list[float] = []  # each rep's baseline over its own archive verify
        checkpoint = None
        for rep in range(args.reps):
            times = {}
            times["baseline"], nb = baseline(paths)
            times["bundle_baseline"], nd = bundle_baseline(tiled, args.events)
            times["archive"], run, checkpoint = ours(tiled, policy)
            times["archive_no_log"], _, _ = ours(tiled, None)
            times["topic"], trun, _ = ours(segs, policy, found)
            assert nb == nd == len(run) == len(trun) == args.events
            assert run.log_evidence is not None  # the archive path, with the tiles' proofs
            for k, v in times.items():
                best[k] = min(best.get(k, float("inf")), v)
            paired.append(times["baseline"] / times["archive"])
            line = {f"{k}_s": round(v, 4) for k, v in times.items()}
            print(json.dumps({"rep": rep, **line, "ratio": round(paired[-1], 3)}))
    base = best["baseline"]
    result = {
        "bench": "verify_throughput",
        "events": args.events,
        "evidence": "archive tiles (tlog-tiles), proofs against the newest checkpoint",
        "archive_objects": objects,
        "flushes": flushes,
        "checkpoint": checkpoint,
        "decode": "full",
        "seconds": round(best["archive"], 4),
        "events_per_s": round(args.events / best["archive"]),
        "baseline_seconds": round(base, 4),
        "baseline_events_per_s": round(args.events / base),
        "ratio": round(base / best["archive"], 3),
        "ratio_per_rep_median": round(statistics.median(paired), 3),
        "no_log_seconds": round(best["archive_no_log"], 4),
        "no_log_ratio": round(base / best["archive_no_log"], 3),
        "with_log_over_no_log": round(best["archive"] / best["archive_no_log"], 3),
        "topic_seconds": round(best["topic"], 4),
        "topic_ratio": round(base / best["topic"], 3),
        "bundle_baseline_seconds": round(best["bundle_baseline"], 4),
        "ratio_vs_bundle_baseline": round(best["bundle_baseline"] / best["archive"], 3),
        "targets": {"ratio": 0.45},
        "agent_identity": agent is not None,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
