"""What recording costs an agent: added latency per edge call and end-to-end throughput.

Against a live broker (``--bootstrap``, default ``$KAFKA_BOOTSTRAP_SERVERS`` or
127.0.0.1:9092), on fresh topics that are deleted afterwards:

1. latency: ``recorder.tool(name, args)`` against calling the same tool function bare, with
   1.5 KB of canonical JSON in the request and 1.5 KB in the response (512 distinct texts
   each, so compression sees prose, not one repeated string); calls alternate so both see
   the same noise. Overhead = quantile(edge) - quantile(bare).
2. throughput: events/s recorded through the edge until Kafka acknowledged them all
   (``publisher.flush``), against raw confluent-kafka ``produce`` of the very same encoded
   bytes with the same producer settings, also until acknowledged; rounds alternate.

3. one raw produce: the median time of one confluent-kafka ``produce`` call of an encoded
   event of the same bytes, timed in the same alternation, so ``overhead_vs_produce`` is the
   Recorder's median overhead in units of that call.

With ``--agent-identity`` every Recorder signs its chain with an agent key (docs/identity.md):
the note every ``--attest-every`` events (default 64), in RUN_STARTED and RUN_FINISHED. The
same Recorder without the key is measured too, in the same process: its calls alternate call
by call with the keyed ones, each Recorder on its own Publisher, for ``added_by_identity_us``
(median with the key minus without, also in units of one raw produce call; before 12-02 the
two were timed in two phases, one after the other, and the drift between them read as
identity's cost); ``publisher_added_us`` is what identity adds per event to the Publisher's
thread (the encoder timed alone); its throughput rounds alternate with the keyed ones for
``identity_vs_without``.

Prints progress lines as JSON, and last one JSON object with ``median_overhead_us``,
``p99_overhead_us``, ``events_per_s``, ``baseline_events_per_s``, ``throughput_ratio``,
``produce_median_us`` and ``overhead_vs_produce``.

    .venv/bin/python bench/producer_overhead.py [--calls 20000] [--events 30000] [--rounds 5]
    .venv/bin/python bench/producer_overhead.py --agent-identity
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import string
import tempfile
import time
from typing import Any

from _topics import bench_prefix, delete_topics
from confluent_kafka import Producer

from tracevault.config import Settings
from tracevault.kafka import ensure_topics
from tracevault.producer import Publisher, Recorder, producer_config
from tracevault.schemas import EventKind, canonical_json
from tracevault.transparency import Ed25519Signer

PAYLOAD = 1536
VARIANTS = 512


def _texts(seed: int) -> list[str]:
    """Distinct word-salad texts: compress like prose (~2x), unlike one repeated string.

    Identical payloads would let zstd shrink every batch to nearly nothing and flatter the
    baseline's broker side; real requests and responses differ call to call.
    """
    rng = random.Random(seed)
    words = ["".join(rng.choices(string.ascii_lowercase, k=rng.randint(2, 9))) for _ in range(5000)]
    return [" ".join(rng.choices(words, k=400)) for _ in range(VARIANTS)]


def _payload(tag: str, text: str) -> dict[str, Any]:
    """A dict whose canonical JSON is exactly PAYLOAD bytes, shaped like a chat request."""
    body: dict[str, Any] = {"messages": [{"role": "user", "content": ""}], "tag": tag}
    base = len(json.dumps(body, separators=(",", ":"), sort_keys=True))
    body["messages"][0]["content"] = text[: PAYLOAD - base]
    return body


ARGS = [_payload("request", t) for t in _texts(1)]
RESULTS = {id(a): _payload("response", t) for a, t in zip(ARGS, _texts(2), strict=True)}


def tool(args: Any) -> Any:
    return RESULTS[id(args)]


def quantile(xs: list[int], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] / 1000.0


AGENT_KEY: list[Ed25519Signer] = []  # set by --agent-identity


def _recorder(publisher: Publisher, keyed: bool | None = None) -> Recorder:
    """A Recorder of the bench's tool; with the agent key when ``--agent-identity`` (or
    ``keyed`` says so)."""
    key = AGENT_KEY[0] if AGENT_KEY and keyed is not False else None
    return Recorder(
        publisher=publisher,
        agent_id="bench",
        agent_version="1",
        tools={"t": tool},
        input=None,
        agent_key=key,
    )


def paired_calls(a: Recorder, b: Recorder, calls: int) -> tuple[list[int], list[int], list[int]]:
    """ns of the bare tool and of ``a.tool`` and ``b.tool`` on the same arguments, call by
    call, after 2,000 warm-up pairs. Which Recorder goes first swaps every call: the second
    of two calls in a row finds more of the first's state in the caches (~1.1 µs here), which
    would read as the cost of whatever the first one adds. Shared with recorder_encrypted.py."""
    bare: list[int] = []
    out_a: list[int] = []
    out_b: list[int] = []
    clock = time.perf_counter_ns
    for i in range(2000):
        a.tool("t", ARGS[i % VARIANTS])
        b.tool("t", ARGS[i % VARIANTS])
    for i in range(calls):
        first, second, out1, out2 = (a, b, out_a, out_b) if i & 1 else (b, a, out_b, out_a)
        args = ARGS[i % VARIANTS]
        t0 = clock()
        tool(args)
        t1 = clock()
        first.tool("t", args)
        t2 = clock()
        second.tool("t", args)
        t3 = clock()
        bare.append(t1 - t0)
        out1.append(t2 - t1)
        out2.append(t3 - t2)
    return bare, out_a, out_b


def bench_identity_latency(pub_id: Publisher, pub_plain: Publisher, calls: int) -> dict[str, float]:
    """The Recorder with and without the agent key, alternating call by call, each with its
    own Publisher (as ``recorder_encrypted.py`` compares encrypted and plain): what identity
    adds on the agent's thread, free of the drift between two phases. What it adds on the
    Publisher's thread (the chain link, a note every ``--attest-every`` events) is timed
    apart, per event, through each Recorder's encoder."""
    keyed, plain = _recorder(pub_id, True), _recorder(pub_plain, False)
    with keyed, plain:
        bare, edge, edge_plain = paired_calls(keyed, plain, calls)
    pub_id.flush(60)
    pub_plain.flush(60)
    return {
        "median_overhead_us": quantile(edge, 0.5) - quantile(bare, 0.5),
        "without_identity_median_overhead_us": quantile(edge_plain, 0.5) - quantile(bare, 0.5),
        "added_by_identity_us": quantile(edge, 0.5) - quantile(edge_plain, 0.5),
        "publisher_added_us": _encode_us(pub_id.settings, True)
        - _encode_us(pub_id.settings, False),
    }


def _encode_us(settings: Settings, keyed: bool, n: int = 6400) -> float:
    """µs per event of a fresh Recorder's encoder (what its Publisher's thread runs), notes
    included; median of 5 passes over ``n`` events, the run started afresh each pass."""
    at = time.time_ns() // 1000
    passes = []
    for _ in range(5):
        rec = _recorder(Publisher(settings), keyed)  # never started: only its encoder runs
        encode = rec._encode
        items = []
        for seq in range(n):
            args = ARGS[seq % VARIANTS]
            req = canonical_json({"tool": "t", "args": args})
            resp = canonical_json(tool(args))
            items.append((seq, EventKind.TOOL_CALL, at, req, resp, *(None,) * 5, 3, None))
        t0 = time.perf_counter_ns()
        for f in items:
            encode(f)
        passes.append((time.perf_counter_ns() - t0) / n / 1000)
    return statistics.median(passes)


def bench_latency(publisher: Publisher, calls: int) -> dict[str, float]:
    rec = _recorder(publisher)
    raw = Producer(producer_config(publisher.settings))
    topic = publisher.settings.topics.raw
    value = rec._enc.encode(
        1, EventKind.TOOL_CALL, time.time_ns() // 1000, canonical_json(ARGS[0]),
        canonical_json(tool(ARGS[0])), attributes={"duration_us": "3"},
    )  # fmt: skip
    key = rec.run_id.encode()
    bare: list[int] = []
    edge: list[int] = []
    produce: list[int] = []
    clock = time.perf_counter_ns
    with rec:
        for i in range(2000):  # warm up: producer connected, caches hot
            rec.tool("t", ARGS[i % VARIANTS])
            tool(ARGS[i % VARIANTS])
            raw.produce(topic, value, key)
            raw.poll(0)
        for i in range(calls):
            args = ARGS[i % VARIANTS]
            t0 = clock()
            tool(args)
            t1 = clock()
            rec.tool("t", args)
            t2 = clock()
            raw.produce(topic, value, key)
            t3 = clock()
            raw.poll(0)
            bare.append(t1 - t0)
            edge.append(t2 - t1)
            produce.append(t3 - t2)
    publisher.flush(60)
    raw.flush(60)
    return {
        "produce_median_us": quantile(produce, 0.5),
        "bare_median_us": quantile(bare, 0.5),
        "edge_median_us": quantile(edge, 0.5),
        "edge_p99_us": quantile(edge, 0.99),
        "median_overhead_us": quantile(edge, 0.5) - quantile(bare, 0.5),
        "p99_overhead_us": quantile(edge, 0.99) - quantile(bare, 0.99),
    }


def recorder_round(publisher: Publisher, events: int) -> tuple[float, list[tuple[bytes, bytes]]]:
    """Events/s through the edge until acknowledged; also returns the bytes it produced."""
    captured: list[tuple[bytes, bytes]] = []
    rec = _recorder(publisher)
    t0 = time.perf_counter()
    with rec:
        for i in range(events - 2):
            rec.tool("t", ARGS[i % VARIANTS])
    if not publisher.flush(300):
        raise RuntimeError("recorder events not acknowledged within 300s")
    elapsed = time.perf_counter() - t0
    # The same bytes for the baseline: re-encode this run's events outside the timed part.
    enc = rec._enc
    at = time.time_ns() // 1000
    for seq in range(events):
        args = ARGS[seq % VARIANTS]
        req = canonical_json({"tool": "t", "args": args})
        resp = canonical_json(tool(args))
        value = enc.encode(seq, EventKind.TOOL_CALL, at, req, resp, attributes={"duration_us": "3"})
        captured.append((rec.run_id.encode(), value))
    return events / elapsed, captured


def baseline_round(settings: Settings, values: list[tuple[bytes, bytes]]) -> float:
    producer = Producer(producer_config(settings))
    topic = settings.topics.raw
    producer.list_topics(topic, timeout=30)  # connect first: the recorder's was warm too
    t0 = time.perf_counter()
    for key, value in values:
        while True:
            try:
                producer.produce(topic, value, key)
                break
            except BufferError:
                producer.poll(0.01)
    if producer.flush(300) != 0:
        raise RuntimeError("baseline events not acknowledged within 300s")
    return len(values) / (time.perf_counter() - t0)


def options(doc: str) -> argparse.Namespace:
    """--bootstrap, --calls, --events, --rounds (also bench/recorder_encrypted.py's)."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument(
        "--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
    )
    ap.add_argument("--calls", type=int, default=20_000, help="latency samples")
    ap.add_argument("--events", type=int, default=30_000, help="events per throughput round")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--agent-identity", action="store_true", help="Recorders sign their chain")
    ap.add_argument("--attest-every", type=int, default=64, help="events per agent note")
    return ap.parse_args()


def main() -> None:
    opts = options(__doc__ or "")
    if opts.agent_identity:
        AGENT_KEY.append(Ed25519Signer.generate("bench.agents.example"))

    with tempfile.TemporaryDirectory() as spool:
        settings = Settings(
            bootstrap_servers=opts.bootstrap,
            topic_prefix=bench_prefix("producer"),
            partitions=3,
            spool_dir=spool,
            agent_attest_every=opts.attest_every,
        )
        ensure_topics(settings)
        try:
            publisher = Publisher(settings)
            latency = bench_latency(publisher, opts.calls)
            print(json.dumps({"phase": "latency", **latency}), flush=True)
            keys = list(AGENT_KEY)
            if keys:  # the same Recorder without the key, call by call, in the same minutes
                with Publisher(settings) as pub_plain:
                    identity = bench_identity_latency(publisher, pub_plain, opts.calls)
                print(json.dumps({"phase": "identity latency, alternating", **identity}))
            rec_rates: list[float] = []
            base_rates: list[float] = []
            plain_rates: list[float] = []
            for r in range(opts.rounds):
                rate, values = recorder_round(publisher, opts.events)
                rec_rates.append(rate)
                base = baseline_round(settings, values)
                base_rates.append(base)
                row = {"phase": "throughput", "round": r, "events_per_s": round(rate),
                       "baseline_events_per_s": round(base)}  # fmt: skip
                if keys:
                    AGENT_KEY.clear()
                    plain_rates.append(recorder_round(publisher, opts.events)[0])
                    AGENT_KEY.extend(keys)
                    row["without_identity_events_per_s"] = round(plain_rates[-1])
                print(json.dumps(row), flush=True)
            report = publisher.close(timeout=30)
        finally:
            delete_topics(opts.bootstrap, settings.topics.all())
    events_per_s = statistics.median(rec_rates)
    baseline = statistics.median(base_rates)
    print(
        json.dumps(
            {
                "median_overhead_us": round(latency["median_overhead_us"], 2),
                "p99_overhead_us": round(latency["p99_overhead_us"], 2),
                "bare_median_us": round(latency["bare_median_us"], 2),
                "payload_bytes": {"request": PAYLOAD, "response": PAYLOAD},
                "events_per_s": round(events_per_s),
                "baseline_events_per_s": round(baseline),
                "throughput_ratio": round(events_per_s / baseline, 3),
                "produce_median_us": round(latency["produce_median_us"], 2),
                "overhead_vs_produce": round(
                    latency["median_overhead_us"] / latency["produce_median_us"], 3
                ),
                "agent_identity": bool(AGENT_KEY),
                **(
                    {
                        "without_identity_median_overhead_us": round(
                            identity["without_identity_median_overhead_us"], 2
                        ),
                        "added_by_identity_us": round(identity["added_by_identity_us"], 2),
                        "added_by_identity_vs_produce": round(
                            identity["added_by_identity_us"] / latency["produce_median_us"], 3
                        ),
                        "publisher_added_us": round(identity["publisher_added_us"], 2),
                        "without_identity_events_per_s": round(statistics.median(plain_rates)),
                        "identity_vs_without": round(
                            events_per_s / statistics.median(plain_rates), 3
                        ),
                    }
                    if keys
                    else {}
                ),
                "rounds": opts.rounds,
                "events_per_round": opts.events,
                "undelivered": report.undelivered,
            }
        )
    )


if __name__ == "__main__":
    main()
