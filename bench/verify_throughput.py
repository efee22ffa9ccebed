"""Verify with proofs: verify + rebuild of one 100,000-event archived run through the signed
log's checks L1-L4, against fastavro reading the same records.

The run is archived to a file:// store by the archiver's own writer (as in
``replay_throughput.py``), and its partition's log is written as the sequencer writes it to
the sealed topic: one signed checkpoint record per transaction of ``--batch`` events (the
sequencer's default batch), each listing its leaves after the compact tree at its start.
Then, in the same process and on the same files, best of ``--reps``:

* **tracevault** (the headline): ``load_from_archive`` + ``verify(rebuild=True, log=keys)``
  with the run's checkpoint records beside it, as ``verify --from topic`` has them: every
  checkpoint record opened (Ed25519 signature, its leaves grow its compact tree to the signed
  root), the run placed on the listed leaves, an inclusion proof built for **every** event
  against the last checkpoint and checked (L2), L3, a consistency proof from every earlier
  checkpoint checked (L4); then checks 1-6 with every event decoded, A1-A3.
* **no_log** (extra field): the same verify without keys (today's path), for the log's cost.
* **baseline**: ``fastavro.reader`` over the same segment files, iterating every record.

What it does not measure: the archive's tile layout (built in parallel; the lead re-runs
this bench over ``verify --from archive`` once it is merged). The evidence path measured here
is the topic's, which is the one this branch owns.

    .venv/bin/python bench/verify_throughput.py [--events 100000] [--reps 3]

Last line: {"events", "seconds", "ratio", ...}. Target: ratio >= 0.45.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
import time
from pathlib import Path

from replay_throughput import RUN, archive, baseline, make_run

from tracevault.archive import open_store
from tracevault.log import (
    CheckpointRecord,
    CompactTree,
    Ed25519Signer,
    FoundCheckpoint,
    leaf_hash,
)
from tracevault.replayer._archive import load_from_archive
from tracevault.replayer._log import LogPolicy
from tracevault.replayer._verify import verify
from tracevault.schemas import SealedEvent

ORIGIN = "tracevault/bench/0"


def checkpoints(
    sealed: list[SealedEvent], batch: int, key: Ed25519Signer
) -> tuple[FoundCheckpoint, ...]:
    """One signed checkpoint record per ``batch`` events, as the sequencer writes them."""
    tree = CompactTree()
    out = []
    for i in range(0, len(sealed), batch):
        leaves = [leaf_hash(s.run_id, s.seq, s.hash) for s in sealed[i : i + batch]]
        rec, tree = CheckpointRecord.build(tree, leaves, ORIGIN, key)
        # through bytes, as a reader of the topic gets them
        out.append(FoundCheckpoint(CheckpointRecord.decode(rec.encode()), f"sealed[0]@{i}"))
    return tuple(out)


def ours(
    root: Path, found: tuple[FoundCheckpoint, ...], policy: LogPolicy | None
) -> tuple[float, int, str | None]:
    store = open_store(f"file://{root}")
    t = time.perf_counter()
    run = load_from_archive(store, RUN)
    if policy is not None:
        run = dataclasses.replace(run, log_origin=ORIGIN, log_checkpoints=found)
    report = verify(run, require_finished=True, rebuild=True, log=policy)
    dt = time.perf_counter() - t
    store.close()
    assert report.finished and report.count == len(run)
    assert isinstance(report.events, list) and len(report.events) == report.count
    assert report.log_checked is (policy is not None)
    return dt, report.count, report.checkpoint


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--per-segment", type=int, default=10_000)
    ap.add_argument("--batch", type=int, default=500, help="events per checkpoint record")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    key = Ed25519Signer.generate("bench.log")
    policy = LogPolicy((key.verifier,))
    with tempfile.TemporaryDirectory(prefix="tv-verify-bench-") as tmp:
        root = Path(tmp) / "archive"
        t = time.perf_counter()
        sealed = make_run(args.events)
        paths = archive(root, sealed, args.per_segment)
        found = checkpoints(sealed, args.batch, key)
        print(json.dumps({"phase": "setup", "seconds": round(time.perf_counter() - t, 3)}))
        best_ours = best_plain = best_base = float("inf")
        checkpoint = None
        for rep in range(args.reps):
            dt_b, nb = baseline(paths)
            dt_o, no, checkpoint = ours(root, found, policy)
            dt_p, np_, _ = ours(root, found, None)
            assert nb == no == np_ == args.events
            best_ours, best_base = min(best_ours, dt_o), min(best_base, dt_b)
            best_plain = min(best_plain, dt_p)
            print(
                json.dumps(
                    {
                        "rep": rep,
                        "ours_s": round(dt_o, 4),
                        "no_log_s": round(dt_p, 4),
                        "baseline_s": round(dt_b, 4),
                    }
                )
            )
    result = {
        "bench": "verify_throughput",
        "events": args.events,
        "checkpoint_records": len(found),
        "checkpoint": checkpoint,
        "evidence": "topic checkpoint records (archive tiles: not merged yet)",
        "decode": "full",
        "seconds": round(best_ours, 4),
        "events_per_s": round(args.events / best_ours),
        "baseline_seconds": round(best_base, 4),
        "baseline_events_per_s": round(args.events / best_base),
        "ratio": round(best_base / best_ours, 3),
        "no_log_seconds": round(best_plain, 4),
        "no_log_ratio": round(best_base / best_plain, 3),
        "with_log_over_no_log": round(best_ours / best_plain, 3),
        "targets": {"ratio": 0.45},
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
