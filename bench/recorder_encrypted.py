"""What encryption costs the Recorder: per-call overhead and throughput with content sealed.

Against a live broker (``--bootstrap``, default ``$KAFKA_BOOTSTRAP_SERVERS`` or
127.0.0.1:9092), on fresh topics deleted afterwards, with the keyring provider
(docs/confidentiality.md) and the 1.5 KB payloads of ``producer_overhead.py``:

1. latency: ``recorder.tool(name, args)`` with encryption on, against the bare tool call,
   alternating; overhead = median(edge) - median(bare). It is compared with **one raw
   produce of the same bytes**: the median time of one confluent-kafka ``produce`` call of
   the encrypted event values this Recorder wrote (target: overhead ≤ 1.0 × that).
2. throughput: events/s recorded with encryption until Kafka acknowledged them all, against
   a raw ``produce`` of the very same (encrypted) bytes until acknowledged, rounds
   alternating (target ≥ 0.8); the plaintext Recorder is measured in the same rounds too.

Prints progress lines as JSON, and last one JSON object with ``median_overhead_us``,
``raw_produce_median_us``, ``overhead_per_raw_produce``, ``events_per_s``,
``baseline_events_per_s``, ``throughput_ratio`` and the plaintext figures.

    .venv/bin/python bench/recorder_encrypted.py [--calls 20000] [--events 30000] [--rounds 5]
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path

from _topics import bench_prefix, delete_topics
from confluent_kafka import Producer
from producer_overhead import ARGS, VARIANTS, options, paired_calls, quantile, tool

from tracevault.config import Settings
from tracevault.kafka import ensure_topics
from tracevault.producer import Publisher, Recorder, producer_config
from tracevault.producer._wire import EventFields
from tracevault.schemas import EventKind, canonical_json

Values = list[tuple[bytes, bytes]]


def _recorder(publisher: Publisher) -> Recorder:
    return Recorder(
        publisher=publisher, agent_id="bench", agent_version="1", tools={"t": tool}, input=None
    )


def bench_latency(pub_enc: Publisher, pub_plain: Publisher, calls: int) -> dict[str, float]:
    """Bare call, plaintext edge and encrypted edge, alternating call by call; and what
    sealing adds to an event's encoding on the Publisher's thread (encrypted minus plain)."""
    enc, plain = _recorder(pub_enc), _recorder(pub_plain)
    with enc, plain:
        bare, edge, edge_plain = paired_calls(enc, plain, calls)
        encode_enc, encode_plain = _encode_ns(enc), _encode_ns(plain)
    pub_enc.flush(60)
    pub_plain.flush(60)
    return {
        "bare_median_us": quantile(bare, 0.5),
        "edge_median_us": quantile(edge, 0.5),
        "median_overhead_us": quantile(edge, 0.5) - quantile(bare, 0.5),
        "p99_overhead_us": quantile(edge, 0.99) - quantile(bare, 0.99),
        "plaintext_median_overhead_us": quantile(edge_plain, 0.5) - quantile(bare, 0.5),
        "encode_median_us": quantile(encode_enc, 0.5),
        "plaintext_encode_median_us": quantile(encode_plain, 0.5),
    }


def _fields(seq: int, at: int) -> EventFields:
    args = ARGS[seq % VARIANTS]
    req = canonical_json({"tool": "t", "args": args})
    resp = canonical_json(tool(args))
    return (seq, EventKind.TOOL_CALL, at, req, resp, None, None, None, None, None, 3, None)


def _encode_ns(rec: Recorder, n: int = 5000) -> list[int]:
    """ns per event of the Recorder's encoder (what runs on the Publisher's thread)."""
    at = time.time_ns() // 1000
    items = [_fields(seq, at) for seq in range(n)]
    encode, clock, out = rec._encode, time.perf_counter_ns, []
    for f in items:
        t0 = clock()
        encode(f)
        out.append(clock() - t0)
    return out


def recorder_round(publisher: Publisher, events: int) -> tuple[float, Values]:
    """Events/s through the edge until acknowledged; and the bytes such a run produces
    (made with the same Recorder's encoder, encryption included, outside the timed part)."""
    rec = _recorder(publisher)
    t0 = time.perf_counter()
    with rec:
        for i in range(events - 2):
            rec.tool("t", ARGS[i % VARIANTS])
    if not publisher.flush(300):
        raise RuntimeError("recorder events not acknowledged within 300s")
    elapsed = time.perf_counter() - t0
    at = time.time_ns() // 1000
    key, encode = rec.run_id.encode(), rec._encode
    return events / elapsed, [(key, encode(_fields(seq, at))) for seq in range(events)]


def baseline_round(settings: Settings, values: Values) -> tuple[float, list[int]]:
    """Raw produce of ``values`` until acknowledged: events/s, and each produce call's ns."""
    producer = Producer(producer_config(settings))
    topic = settings.topics.raw
    producer.list_topics(topic, timeout=30)
    calls: list[int] = []
    clock = time.perf_counter_ns
    t0 = time.perf_counter()
    for key, value in values:
        while True:
            try:
                c0 = clock()
                producer.produce(topic, value, key)
                calls.append(clock() - c0)
                break
            except BufferError:
                producer.poll(0.01)
    if producer.flush(300) != 0:
        raise RuntimeError("baseline events not acknowledged within 300s")
    return len(values) / (time.perf_counter() - t0), calls


def _settings(bootstrap: str, spool: str, keyring: str | None = None) -> Settings:
    """Fresh topics; content encrypted with the keyring provider when ``keyring`` names
    its file, else as the environment says (in clear by default)."""
    settings = Settings(
        bootstrap_servers=bootstrap,
        topic_prefix=bench_prefix("crypt"),
        partitions=3,
        spool_dir=spool,
    )
    if keyring is None:
        return settings
    return settings.model_copy(update={"key_provider": "keyring", "keyring_path": keyring})


def main() -> None:
    opts = options(__doc__ or "")

    with tempfile.TemporaryDirectory() as tmp:
        keyring = str(Path(tmp) / "keyring.json")
        enc = _settings(opts.bootstrap, f"{tmp}/s1", keyring)
        plain = _settings(opts.bootstrap, f"{tmp}/s2")
        for s in (enc, plain):
            ensure_topics(s)
        try:
            pub_enc, pub_plain = Publisher(enc), Publisher(plain)
            latency = bench_latency(pub_enc, pub_plain, opts.calls)
            print(json.dumps({"phase": "latency", **latency}), flush=True)
            rates: dict[str, list[float]] = {"enc": [], "base": [], "plain": []}
            produce_ns: list[int] = []
            for r in range(opts.rounds):
                rate, values = recorder_round(pub_enc, opts.events)
                base, calls = baseline_round(enc, values)
                plain_rate, _ = recorder_round(pub_plain, opts.events)
                rates["enc"].append(rate)
                rates["base"].append(base)
                rates["plain"].append(plain_rate)
                produce_ns += calls
                line = {"phase": "throughput", "round": r, "events_per_s": round(rate),
                        "baseline_events_per_s": round(base),
                        "plaintext_events_per_s": round(plain_rate)}  # fmt: skip
                print(json.dumps(line), flush=True)
            undelivered = pub_enc.close(timeout=30).undelivered
            undelivered += pub_plain.close(timeout=30).undelivered
        finally:
            delete_topics(opts.bootstrap, [*enc.topics.all(), *plain.topics.all()])
    eps, base = statistics.median(rates["enc"]), statistics.median(rates["base"])
    produce_us = quantile(produce_ns, 0.5)
    print(
        json.dumps(
            {
                "median_overhead_us": round(latency["median_overhead_us"], 2),
                "p99_overhead_us": round(latency["p99_overhead_us"], 2),
                "raw_produce_median_us": round(produce_us, 2),
                "overhead_per_raw_produce": round(latency["median_overhead_us"] / produce_us, 3),
                "plaintext_median_overhead_us": round(latency["plaintext_median_overhead_us"], 2),
                # what encryption adds per call: on the agent's thread, and in the encoding
                # on the Publisher's thread; each against one raw produce of the same bytes
                "added_by_encryption_us": round(
                    latency["median_overhead_us"] - latency["plaintext_median_overhead_us"], 2
                ),
                "encode_added_us": round(
                    latency["encode_median_us"] - latency["plaintext_encode_median_us"], 2
                ),
                "encode_added_per_raw_produce": round(
                    (latency["encode_median_us"] - latency["plaintext_encode_median_us"])
                    / produce_us,
                    3,
                ),
                "events_per_s": round(eps),
                "baseline_events_per_s": round(base),
                "throughput_ratio": round(eps / base, 3),
                "plaintext_events_per_s": round(statistics.median(rates["plain"])),
                "encrypted_bytes_per_event": len(values[1][1]),
                "rounds": opts.rounds,
                "events_per_round": opts.events,
                "undelivered": undelivered,
            }
        )
    )


if __name__ == "__main__":
    main()
