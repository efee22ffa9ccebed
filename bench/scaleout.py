"""What a second sequencer (and archiver) instance buys: sealed and archived events/s, 1 vs 2.

The same raw records (``--events`` in 20-event runs, over ``--partitions`` 12) are sealed by
1 and then by 2 sequencer processes in one consumer group (``python -m tracevault
sequencer``, each its own instance id), each time on fresh topics; then archived by 1 and by 2
archiver processes (``python -m tracevault archiver``, one group) into a fresh file archive.
A phase's rate is its events divided by the time from the processes' start until the group's
committed offsets reach the topic's end (read with the AdminClient, as ``doctor`` does), so
group joins and partition assignment are part of what a second instance costs.

The baseline is the single instance, measured in the same run; the result is the ratio.
On this 2-core machine two processes share the cores with the broker: read the ratio as
what two instances on the *same* host buy, not what they buy on two hosts
(docs/operations.md, "Scaling").

Usage::

    .venv/bin/python bench/scaleout.py [--events 200000] [--partitions 12]

The last output line is one JSON object.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Any

from _topics import bench_prefix, delete_topics
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from tracevault.config import Settings
from tracevault.kafka import ensure_topics
from tracevault.schemas import AgentInfo, EventKind, TraceEvent, canonical_json, encode_event
from tracevault.transparency import Ed25519Signer

AGENT = AgentInfo("bench-agent", "1.0.0", "bench-host", "bench", "0.1.0")
RUN_LEN = 20


def emit(obj: dict[str, Any]) -> None:
    print(json.dumps(obj, sort_keys=True), flush=True)


def produce(settings: Settings, n_events: int) -> None:
    p = Producer(
        settings.kafka_config(
            **{"partitioner": "murmur2_random", "enable.idempotence": True, "linger.ms": 20}
        )
    )
    now = time.time_ns() // 1000
    for r in range(n_events // RUN_LEN):
        run = f"so-{r:06d}-{uuid.uuid4().hex[:4]}"
        for s in range(RUN_LEN):
            kind = (
                EventKind.RUN_STARTED
                if s == 0
                else EventKind.RUN_FINISHED
                if s == RUN_LEN - 1
                else EventKind.TOOL_CALL
            )
            ev = TraceEvent(
                run_id=run,
                seq=s,
                kind=kind,
                at=now + s,
                agent=AGENT,
                request=canonical_json({"tool": "search", "args": {"q": f"q{s}", "k": 5}}),
                response=canonical_json({"hits": [f"doc-{s}-{i}" for i in range(5)]}),
            )
            p.produce(settings.topics.raw, encode_event(ev), run.encode())
        if r % 500 == 0:
            p.poll(0)
    assert p.flush(120) == 0


def ends(settings: Settings, topic: str, partitions: int) -> dict[int, int]:
    c = Consumer(settings.kafka_config(**{"group.id": "scaleout-probe", "log_level": 0}))
    try:
        return {
            p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(partitions)
        }
    finally:
        c.close()


def committed(admin: AdminClient, group: str, topic: str, partitions: int) -> dict[int, int]:
    req = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(partitions)])
    try:
        res = admin.list_consumer_group_offsets([req])[group].result(timeout=10)
    except Exception:  # the group may not exist yet
        return {}
    return {tp.partition: tp.offset for tp in res.topic_partitions if tp.offset >= 0}


def timed(
    settings: Settings,
    cmds: list[list[str]],
    *,
    env: dict[str, str],
    group: str,
    topic: str,
    partitions: int,
) -> float:
    """Seconds from starting ``cmds`` until ``group`` has committed ``topic`` to its end."""
    target = ends(settings, topic, partitions)
    admin = AdminClient(settings.kafka_config(log_level=0))
    t0 = time.monotonic()
    procs = [subprocess.Popen(c, env=env, stderr=subprocess.DEVNULL) for c in cmds]
    try:
        while True:
            got = committed(admin, group, topic, partitions)
            # a transactional topic's end is one past the last commit marker
            if all(got.get(p, 0) >= end - 1 for p, end in target.items() if end > 0):
                return time.monotonic() - t0
            if any(proc.poll() is not None for proc in procs):
                raise RuntimeError("an instance exited early")
            time.sleep(0.1)
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            proc.wait(60)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--partitions", type=int, default=12)
    args = ap.parse_args()
    boot = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
    key = Ed25519Signer.generate("bench")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRACEVAULT_")}
    env["TRACEVAULT_LOG_KEY"] = key.skey
    env["TRACEVAULT_LOG_VKEYS"] = key.verifier.vkey
    base = [sys.executable, "-m", "tracevault", "--bootstrap-servers", boot]
    out: dict[str, Any] = {"events": args.events, "partitions": args.partitions}
    for n in (1, 2):
        prefix = bench_prefix(f"scale-{n}")
        s = Settings(bootstrap_servers=boot, topic_prefix=prefix, partitions=args.partitions)
        ensure_topics(s)
        atexit.register(delete_topics, boot, s.topics.all())
        produce(s, args.events)
        seq_cmds = [
            [*base, "--prefix", prefix, "sequencer", "--instance-id", f"s{i}",
             "--batch-size", "2000"]
            for i in range(n)
        ]  # fmt: skip
        secs = timed(
            s,
            seq_cmds,
            env=env,
            group=s.sequencer_group_id,
            topic=s.topics.raw,
            partitions=args.partitions,
        )
        out[f"sequencer_{n}_events_per_s"] = round(args.events / secs)
        with tempfile.TemporaryDirectory() as tmp:
            arc_cmds = [
                [*base, "--prefix", prefix, "archiver", "--archive", f"file://{tmp}",
                 "--instance-id", f"a{i}"]
                for i in range(n)
            ]  # fmt: skip
            secs = timed(
                s,
                arc_cmds,
                env=env,
                group=s.archiver_group_id,
                topic=s.topics.sealed,
                partitions=args.partitions,
            )
        out[f"archiver_{n}_events_per_s"] = round(args.events / secs)
        emit({"instances": n, **{k: v for k, v in out.items() if k.endswith(f"_{n}_events_per_s")}})
    out["sequencer_ratio_2_vs_1"] = round(
        out["sequencer_2_events_per_s"] / out["sequencer_1_events_per_s"], 2
    )
    out["archiver_ratio_2_vs_1"] = round(
        out["archiver_2_events_per_s"] / out["archiver_1_events_per_s"], 2
    )
    out["cores"] = os.cpu_count()
    emit({"bench": "scaleout", **out})


if __name__ == "__main__":
    main()
