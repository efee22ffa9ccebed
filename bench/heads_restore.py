"""The sequencer's restore for many open heads: reading them, and proving them (docs/design.md,
"Sequencer rules": state is evidence).

N open runs (three events each, over 6 partitions) are sealed by a real Sequencer; then the
restore's two steps are timed on that committed state, five times each (medians):
``read_state`` (the heads topic, as before the proof existed) and ``prove_state`` (each head
checked against the sealed records it names, each partition's tree against its newest
checkpoint). Every head must prove itself (nothing rejected).

Usage::

    .venv/bin/python bench/heads_restore.py [--heads 10000]

The last output line is one JSON object.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import statistics
import threading
import time

from _topics import bench_prefix, delete_topics
from confluent_kafka import Producer
from pydantic import SecretStr

from tracevault.config import Settings
from tracevault.heads import prove_state, read_state
from tracevault.kafka import ensure_topics
from tracevault.schemas import AgentInfo, EventKind, TraceEvent, canonical_json, encode_event
from tracevault.services.sequencer import Sequencer
from tracevault.transparency import Ed25519Signer

AGENT = AgentInfo("bench-agent", "1.0.0", "bench-host", "bench", "0.1.0")
PARTITIONS = 6


def seal(settings: Settings, n: int) -> None:
    """N open runs of three events, sealed by a real sequencer, which is then stopped."""
    p = Producer(settings.kafka_config(**{"partitioner": "murmur2_random", "linger.ms": 20}))
    now = time.time_ns() // 1000
    for i in range(n):
        rid = f"open-{i:06d}"
        for seq in range(3):
            kind = EventKind.RUN_STARTED if seq == 0 else EventKind.TOOL_CALL
            ev = TraceEvent(
                run_id=rid, seq=seq, kind=kind, at=now, agent=AGENT,
                request=canonical_json({"i": i, "s": seq}), response=canonical_json(None),
            )  # fmt: skip
            p.produce(settings.topics.raw, encode_event(ev), rid.encode())
            p.poll(0)
    p.flush(60)
    sequencer = Sequencer(settings, instance_id="bench")
    t = threading.Thread(target=sequencer.run, daemon=True)
    t.start()
    deadline = time.monotonic() + 600
    done = threading.Event()
    while sequencer.metrics.snapshot().get("tracevault_sequencer_sealed_total", 0) < 3 * n:
        if time.monotonic() > deadline:
            raise RuntimeError("the sequencer did not seal everything in 600 s")
        done.wait(0.5)
    sequencer.stop()
    t.join(60)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--heads", type=int, default=10_000)
    ap.add_argument(
        "--bootstrap-servers", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
    )
    args = ap.parse_args()
    signer = Ed25519Signer.generate("bench-log")
    settings = Settings(
        bootstrap_servers=args.bootstrap_servers,
        topic_prefix=bench_prefix("heads"),
        partitions=PARTITIONS,
        log_key=SecretStr(signer.skey),
        sequencer_batch_size=2000,
    )
    ensure_topics(settings)
    atexit.register(delete_topics, settings.bootstrap_servers, settings.topics.all())
    seal(settings, args.heads)
    parts = list(range(PARTITIONS))
    reads, proofs = [], []
    for _ in range(5):
        t0 = time.monotonic()
        state = read_state(settings, parts, stable=True, keep_heads=False)
        t1 = time.monotonic()
        proven = prove_state(
            settings, state, parts, partition_count=PARTITIONS, verifiers=[signer.verifier],
            horizon_us=172_800_000_000, now_us=time.time_ns() // 1000,
        )  # fmt: skip
        t2 = time.monotonic()
        if proven.rejected or len(proven.heads) != args.heads:
            raise RuntimeError(f"{len(proven.rejected)} rejected, {len(proven.heads)} proven")
        reads.append(t1 - t0)
        proofs.append(t2 - t1)
    r, q = statistics.median(reads), statistics.median(proofs)
    print(json.dumps({
        "open_heads": args.heads, "partitions": PARTITIONS, "read_state_s": round(r, 3),
        "prove_state_s": round(q, 3), "restore_ratio": round((r + q) / r, 2),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
