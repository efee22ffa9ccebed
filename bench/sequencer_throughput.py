"""Sequencer throughput against a passthrough baseline, and end-to-end latency at a steady rate.

Phase 1 (throughput): N raw events of R interleaved runs are produced once. The baseline is
the same consume -> transactional produce -> send offsets -> commit loop with the same batch
size, copying each value unchanged to ``<prefix>.passthrough`` (no decoding, chaining or
heads). The sequencer then seals the very same records (its own consumer group), signing a
checkpoint of every sealed partition in each transaction (docs/log.md) with a key made for
the run. Both run in this process's main thread, timed from the first consumed batch to the
last commit.

Phase 2 (latency): the sequencer runs as its own process (``python -m tracevault sequencer``)
while this process produces new runs at a steady rate (default 5,000 events/s) and a
``read_committed`` consumer reads ``<prefix>.sealed``; latency = the moment a sealed record
becomes readable minus the moment its raw event was handed to the producer (carried in the
event's ``at`` field). The first second is a warm-up and is not counted.

With ``--agent-identity`` the throughput phase's runs are signed as a Recorder with an agent
key signs them (a note in RUN_STARTED, every 64 events and in RUN_FINISHED, docs/identity.md),
and the sequencer trusts that key (``agent_vkeys``), so it checks every note as it seals it.

Usage::

    .venv/bin/python bench/sequencer_throughput.py [--events 100000] [--rate 5000]
    .venv/bin/python bench/sequencer_throughput.py --agent-identity

The last output line is one JSON object with ``events_per_s``, ``baseline_events_per_s``,
``ratio``, ``latency_p50_ms``, ``latency_p99_ms`` (and the parameters used).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
from typing import Any

from _topics import bench_prefix, delete_topics
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from tracevault.config import Settings
from tracevault.content import RunCipher
from tracevault.kafka import ensure_topics
from tracevault.producer._attest import Attestor
from tracevault.producer._wire import EventFields
from tracevault.schemas import (
    AgentInfo,
    EventKind,
    TraceEvent,
    canonical_json,
    decode_event,
    decode_sealed,
    encode_event,
)
from tracevault.services.runtime import Transaction
from tracevault.services.sequencer import Sequencer
from tracevault.transparency import LOG_KEY_ENV, Ed25519Signer, is_checkpoint_record

AGENT = AgentInfo("bench-agent", "1.0.0", "bench-host", "bench", "0.1.0")
SIGNER = Ed25519Signer.generate("bench-log")


def emit(obj: dict[str, Any]) -> None:
    print(json.dumps(obj, sort_keys=True), flush=True)


#: --encrypted: each run's request/response sealed as the Recorder does with a key provider
#: (docs/confidentiality.md), one data key per run; the envelopes are ~1.4 x the plaintext.
CIPHERS: dict[str, RunCipher] | None = None


def _payloads(run_id: str, seq: int) -> tuple[bytes, bytes]:
    request = canonical_json({"tool": "search", "args": {"q": f"query {seq}", "k": 5}})
    response = canonical_json({"hits": [f"doc-{seq}-{i}" for i in range(5)]})
    if CIPHERS is None:
        return request, response
    cipher = CIPHERS.get(run_id)
    if cipher is None:
        cipher = CIPHERS[run_id] = RunCipher(run_id, os.urandom(32))
    return cipher.seal_tool_request(seq, request), cipher.seal(seq, "response", response)


def event(run_id: str, seq: int, last: int, at: int) -> bytes:
    request, response = _payloads(run_id, seq)
    kind = (
        EventKind.RUN_STARTED
        if seq == 0
        else EventKind.RUN_FINISHED
        if seq == last
        else EventKind.TOOL_CALL
    )
    return encode_event(
        TraceEvent(
            run_id=run_id,
            seq=seq,
            kind=kind,
            at=at,
            agent=AGENT,
            request=request,
            response=response,
        )
    )


AGENT_KEY: list[Ed25519Signer] = []  # set by --agent-identity


def signed_runs(plan: list[tuple[str, int, int]], now: int) -> dict[tuple[str, int], bytes]:
    """Each run's events as the Recorder's attestor writes them (notes every 64 events)."""
    out: dict[tuple[str, int], bytes] = {}
    attestors: dict[str, Attestor] = {}
    for run, seq, last in sorted(plan, key=lambda x: (x[0], x[1])):
        att = attestors.get(run)
        if att is None:
            att = attestors[run] = Attestor(
                run, _fields_encoder(run), AGENT_KEY[0], every=64, interval_s=1e9
            )
        plain = decode_event(event(run, seq, last, now), check_json=False)
        fields: EventFields = (
            seq, plain.kind, now, plain.request, plain.response, *(None,) * 5, {}, None
        )  # fmt: skip
        out[run, seq] = att.encode_fields(fields)
    return out


def _fields_encoder(run: str) -> Any:
    def encode(f: Any) -> bytes:
        return encode_event(
            TraceEvent(run_id=run, seq=f[0], kind=f[1], at=f[2], agent=AGENT, request=f[3],
                       response=f[4], attributes=dict(f[10] or {})),
        )  # fmt: skip

    return encode


def interleaved(n_events: int, n_runs: int, stem: str) -> list[tuple[str, int, int]]:
    """(run_id, seq, last) round-robin over runs, so every batch touches many runs."""
    per_run = n_events // n_runs
    return [(f"{stem}-{r}", s, per_run - 1) for s in range(per_run) for r in range(n_runs)]


def producer(settings: Settings) -> Producer:
    return Producer(
        settings.kafka_config(**{"partitioner": "murmur2_random", "linger.ms": 5, "log_level": 0})
    )


def produce_all(settings: Settings, plan: list[tuple[str, int, int]]) -> None:
    p = producer(settings)
    now = time.time_ns() // 1000
    signed = signed_runs(plan, now) if AGENT_KEY else {}
    for run, seq, last in plan:
        value = signed[run, seq] if signed else event(run, seq, last, now)
        while True:
            try:
                p.produce(settings.topics.raw, value, run)
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    assert p.flush(60) == 0


def passthrough(settings: Settings, out_topic: str, n: int, batch: int, wait_s: float) -> float:
    """The baseline loop; returns events/s from the first batch to the last commit."""
    consumer = Consumer(
        settings.kafka_config(
            **{
                "group.id": f"{settings.topic_prefix}.passthrough",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "auto.offset.reset": "earliest",
                "log_level": 3,
            }
        )
    )
    prod = Producer(
        settings.kafka_config(
            **{
                "transactional.id": f"{settings.topic_prefix}.passthrough",
                "linger.ms": 2,
                "queue.buffering.max.messages": 100_000,
                "log_level": 3,
            }
        )
    )
    prod.init_transactions(30)
    consumer.subscribe([settings.topics.raw])
    done = 0
    t0 = 0.0
    try:
        while done < n:
            msgs = consumer.consume(batch, timeout=wait_s)
            if not msgs:
                continue
            if not t0:
                t0 = time.perf_counter()
            prod.begin_transaction()
            for m in msgs:
                if m.error() is None:
                    part = m.partition()
                    assert part is not None  # a consumed record always has its partition
                    prod.produce(out_topic, m.value(), m.key(), partition=part)
                    done += 1
            prod.send_offsets_to_transaction(
                consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), 30
            )
            prod.commit_transaction(30)
        return n / (time.perf_counter() - t0)
    finally:
        consumer.close()


def sequencer_rate(settings: Settings, n: int) -> float:
    """The real sequencer, timed from its first transaction to the commit that reaches ``n``
    (its step's ``write`` and ``committed`` wrapped on this one instance)."""
    seq = Sequencer(settings, instance_id="bench", signer=SIGNER)
    step = seq.step
    write, committed = step.write, step.committed
    times = [0.0, 0.0]

    def timed_write(txn: Transaction) -> None:
        if not times[0]:
            times[0] = time.perf_counter()
        write(txn)

    def timed_committed() -> None:
        committed()
        # the counter itself, not a registry snapshot: the bench must not time its own probe
        if seq.metrics.sealed._value.get() >= n:
            times[1] = time.perf_counter()
            seq.stop()

    step.write = timed_write  # type: ignore[method-assign]
    step.committed = timed_committed  # type: ignore[method-assign]
    seq.run()
    return n / (times[1] - times[0])


def latency(settings: Settings, rate: int, seconds: float, batch_size: int) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRACEVAULT_")}
    env[LOG_KEY_ENV] = SIGNER.skey
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "tracevault", "--bootstrap-servers",
            settings.bootstrap_servers, "--prefix", settings.topic_prefix, "sequencer",
            # the throughput phase's id: a static member taking its own place rejoins at
            # once, a new id would wait for the old member's session to time out
            "--instance-id", "bench", "--batch-size", str(batch_size),
            "--batch-wait-ms", "5",
        ],
        env=env,
    )  # fmt: skip
    consumer = Consumer(
        settings.kafka_config(
            **{
                "group.id": f"bench-reader-{uuid.uuid4().hex[:6]}",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "auto.offset.reset": "latest",
                "fetch.wait.max.ms": 5,
                "log_level": 0,
            }
        )
    )
    consumer.subscribe([settings.topics.sealed])
    # Join the group before producing, so "latest" means "from now".
    deadline = time.monotonic() + 30
    while not consumer.assignment() and time.monotonic() < deadline:
        consumer.poll(0.1)
    # Wait until the sequencer process seals a probe event: startup is not latency.
    probe = producer(settings)
    probe.produce(settings.topics.raw, event("probe", 0, 0, time.time_ns() // 1000), "probe")
    probe.flush(30)
    deadline = time.monotonic() + 60
    ready = False
    while not ready and time.monotonic() < deadline:
        ready = any(m.error() is None for m in consumer.consume(10, timeout=0.1))
    if not ready:
        raise SystemExit("the sequencer process sealed nothing within 60 s")
    total = int(rate * seconds)
    n_runs = max(1, rate // 10)  # ~10 events/s per run, like a busy fleet of agents
    plan = interleaved(total, n_runs, f"lat-{uuid.uuid4().hex[:6]}")
    latencies: list[float] = []
    warmup_us = time.time_ns() // 1000 + 1_000_000
    produced_at = [0.0]

    def produce() -> None:
        p = producer(settings)
        start = time.perf_counter()
        tick = 0.01
        sent = 0
        while sent < len(plan):
            due = min(len(plan), int((time.perf_counter() - start) * rate) + 1)
            now = time.time_ns() // 1000
            for run, seq, last in plan[sent:due]:
                p.produce(settings.topics.raw, event(run, seq, last, now), run)
            sent = due
            p.poll(0)
            time.sleep(tick)
        p.flush(30)
        produced_at[0] = time.perf_counter() - start

    thread = threading.Thread(target=produce, daemon=True)
    try:
        thread.start()
        seen = 0
        end = time.monotonic() + seconds + 60
        while seen < total and time.monotonic() < end:
            for m in consumer.consume(1000, timeout=0.05):
                value = m.value()
                if m.error() is not None or value is None:
                    continue
                if is_checkpoint_record(m.headers()):
                    continue
                now = time.time_ns() // 1000
                at = decode_event(decode_sealed(value).raw, check_json=False).at
                seen += 1
                if at >= warmup_us:
                    latencies.append((now - at) / 1000.0)
        thread.join(60)
    finally:
        consumer.close()
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    latencies.sort()
    return {
        "latency_rate_per_s": rate,
        "latency_events": total,
        "latency_sealed_seen": seen,
        "latency_achieved_rate_per_s": round(total / produced_at[0], 1) if produced_at[0] else 0,
        "latency_p50_ms": round(statistics.median(latencies), 2) if latencies else None,
        "latency_p99_ms": round(latencies[int(0.99 * (len(latencies) - 1))], 2)
        if latencies
        else None,
    }


def _fresh(args: argparse.Namespace, admin: AdminClient) -> tuple[Settings, str]:
    prefix = bench_prefix("seq")
    settings = Settings(
        bootstrap_servers=args.bootstrap_servers,
        topic_prefix=prefix,
        partitions=args.partitions,
        sequencer_batch_size=args.batch_size,
        sequencer_batch_wait_ms=20,
        agent_vkeys=json.dumps({AGENT.agent_id: [AGENT_KEY[0].verifier.vkey]}) if AGENT_KEY else "",
    )
    ensure_topics(settings)
    out_topic = f"{prefix}.passthrough"
    admin.create_topics([NewTopic(out_topic, args.partitions, 1)])[out_topic].result(30)
    return settings, out_topic


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--bootstrap-servers",
        default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092"),
    )
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--runs", type=int, default=500)
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=500)
    ap.add_argument(
        "--repeats", type=int, default=3, help="alternating baseline/sequencer rounds (median)"
    )
    ap.add_argument("--rate", type=int, default=5_000, help="events/s for the latency phase")
    ap.add_argument("--latency-seconds", type=float, default=10.0)
    ap.add_argument("--agent-identity", action="store_true", help="runs signed by an agent key")
    ap.add_argument(
        "--encrypted", action="store_true", help="payloads sealed as with a key provider"
    )
    args = ap.parse_args()
    if args.agent_identity:
        AGENT_KEY.append(Ed25519Signer.generate("bench.agents.example"))
    if args.encrypted:
        global CIPHERS  # noqa: PLW0603 - one switch for the event maker
        CIPHERS = {}

    admin = AdminClient({"bootstrap.servers": args.bootstrap_servers, "log_level": 0})
    bases: list[float] = []
    seqs: list[float] = []
    made: list[str] = []
    try:
        for i in range(args.repeats):
            # Each round gets fresh topics (a sequencer must seal, not skip duplicates) and the
            # same data; the order alternates so drift in the machine's load cancels out.
            settings, out_topic = _fresh(args, admin)
            made += [*settings.topics.all(), out_topic]
            plan = interleaved(args.events, args.runs, "thr")
            produce_all(settings, plan)
            n = len(plan)
            for which in ("base", "seq") if i % 2 == 0 else ("seq", "base"):
                if which == "base":
                    bases.append(passthrough(settings, out_topic, n, args.batch_size, 0.02))
                else:
                    seqs.append(sequencer_rate(settings, n))
            emit(
                {
                    "phase": f"round {i + 1}",
                    "baseline_events_per_s": round(bases[-1], 1),
                    "events_per_s": round(seqs[-1], 1),
                }
            )
        base = statistics.median(bases)
        seq = statistics.median(seqs)
        lat = latency(settings, args.rate, args.latency_seconds, args.batch_size)
        emit({"phase": "latency", **lat})
        emit(
            {
                "events": n,
                "runs": args.runs,
                "partitions": args.partitions,
                "batch_size": args.batch_size,
                "repeats": args.repeats,
                "encrypted": args.encrypted,
                "events_per_s": round(seq, 1),
                "baseline_events_per_s": round(base, 1),
                "ratio": round(seq / base, 3),
                "agent_identity": bool(AGENT_KEY),
                **lat,
            }
        )
    finally:
        delete_topics(args.bootstrap_servers, made)


if __name__ == "__main__":
    main()
