"""Test helpers: raw events like a producer's, an independent read of the output topics.

Nothing here uses the sequencer's own code: events are encoded with the shared codec, the
expected chains are computed with ``tracevault.chain`` directly from the raw bytes, and topics
are read back with a plain ``read_committed`` consumer.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition

from tests.conftest import NOW_US
from tracevault.chain import genesis, link
from tracevault.config import Settings
from tracevault.errors import LogError
from tracevault.kafka import sealed_generation
from tracevault.schemas import (
    AgentInfo,
    EventKind,
    SealedEvent,
    TraceEvent,
    canonical_json,
    decode_sealed,
    encode_event,
)
from tracevault.services.sequencer import Sequencer
from tracevault.transparency import (
    CHECKPOINT_KEY,
    RECORD_HEADER,
    TREE_KEY,
    CheckpointRecord,
    CompactTree,
    NoteVerifier,
    VerifiedCheckpoint,
    consistency_proof,
    leaf_hash,
    list_source,
    log_origin,
    verify_consistency,
)

#: The agent of the hand-made raw events here: unsigned on purpose, so the suite's
#: deployment lists it with no key (tests/conftest.py) and the sequencer does not contest them.
AGENT = AgentInfo("unsigned-test-agent", "1.0.0", "test-host", "pytest", "0.1.0")


def raw_event(
    run_id: str,
    seq: int,
    *,
    last: int | None = None,
    kind: EventKind | None = None,
    note: str = "",
    at: int | None = None,
) -> bytes:
    """The value a Recorder would publish for ``run_id``'s ``seq`` (RUN_FINISHED at ``last``)."""
    if kind is None:
        if seq == 0:
            kind = EventKind.RUN_STARTED
        elif last is not None and seq == last:
            kind = EventKind.RUN_FINISHED
        else:
            kind = EventKind.TOOL_CALL
    request = {"tool": "search", "args": {"q": f"{run_id}/{seq}{note}"}}
    if kind is EventKind.RUN_FINISHED:
        request = {}
    return encode_event(
        TraceEvent(
            run_id=run_id,
            seq=seq,
            kind=kind,
            at=NOW_US + seq if at is None else at,
            agent=AGENT,
            request=canonical_json(request),
            response=canonical_json({"ok": seq}),
        )
    )


def interleaved_runs(
    n_runs: int, events_per_run: int, seed: int = 7, stem: str = "run"
) -> list[tuple[str, bytes]]:
    """``(run_id, value)`` for many complete runs, interleaved randomly, each run in order."""
    rng = random.Random(seed)
    run_ids = [f"{stem}-{i:04d}-{uuid.uuid4().hex[:6]}" for i in range(n_runs)]
    streams: dict[str, list[bytes]] = {
        run: [raw_event(run, s, last=events_per_run - 1) for s in range(events_per_run)]
        for run in run_ids
    }
    pos = dict.fromkeys(streams, 0)
    out: list[tuple[str, bytes]] = []
    live = list(streams)
    while live:
        run = rng.choice(live)
        out.append((run, streams[run][pos[run]]))
        pos[run] += 1
        if pos[run] == events_per_run:
            live.remove(run)
    return out


def producer(settings: Settings) -> Producer:
    return Producer(
        settings.kafka_config(
            **{
                "partitioner": "murmur2_random",
                "enable.idempotence": True,
                "linger.ms": 5,
                "log_level": 0,
            }
        )
    )


def produce_raw(
    settings: Settings,
    items: list[tuple[str | bytes | None, bytes | None]],
    *,
    partition: int | None = None,
) -> list[tuple[int, int]]:
    """Publish ``(key, value)`` pairs to ``<prefix>.raw`` in order; their (partition, offset)."""
    p = producer(settings)
    errors: list[KafkaError] = []
    where: list[tuple[int, int]] = [(-1, -1)] * len(items)

    def on_delivery(i: int) -> Callable[[KafkaError | None, Message], None]:
        def cb(err: KafkaError | None, msg: Message) -> None:
            if err is not None:
                errors.append(err)
            else:
                where[i] = (msg.partition(), msg.offset())

        return cb

    for i, (key, value) in enumerate(items):
        kwargs = {} if partition is None else {"partition": partition}
        p.produce(settings.topics.raw, value, key, on_delivery=on_delivery(i), **kwargs)
        p.poll(0)
    assert p.flush(30) == 0
    assert not errors, errors
    return where


@dataclass(frozen=True)
class Record:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: dict[str, bytes]


def read_all(settings: Settings, topic: str, *, timeout: float = 30.0) -> list[Record]:
    """Every committed record of ``topic`` (read_committed, from the start to the end)."""
    consumer = Consumer(
        settings.kafka_config(
            **{
                "group.id": f"verify-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "fetch.wait.max.ms": 10,
                "isolation.level": "read_committed",
                "log_level": 0,
            }
        )
    )
    try:
        md = consumer.list_topics(topic, timeout=10)
        parts = sorted(md.topics[topic].partitions)
        consumer.assign([TopicPartition(topic, p, 0) for p in parts])
        pending = set(parts)
        out: list[Record] = []
        deadline = time.monotonic() + timeout
        while pending:
            assert time.monotonic() < deadline, f"{topic}: end not reached for {pending}"
            for msg in consumer.consume(1000, timeout=0.05):
                err = msg.error()
                if err is not None:
                    assert err.code() == KafkaError._PARTITION_EOF, err
                    pending.discard(msg.partition())
                    continue
                out.append(
                    Record(
                        topic,
                        msg.partition(),
                        msg.offset(),
                        msg.key(),
                        msg.value(),
                        {k: v for k, v in (msg.headers() or [])},
                    )
                )
        return out
    finally:
        consumer.close()


def is_checkpoint(rec: Record) -> bool:
    return rec.headers.get(RECORD_HEADER) == b"checkpoint"


def read_sealed_events(settings: Settings) -> list[Record]:
    """The committed event records of ``<prefix>.sealed`` (the log's checkpoints left out)."""
    return [r for r in read_all(settings, settings.topics.sealed) if not is_checkpoint(r)]


def sealed_by_run(settings: Settings) -> dict[str, list[tuple[Record, SealedEvent]]]:
    runs: dict[str, list[tuple[Record, SealedEvent]]] = {}
    for rec in read_sealed_events(settings):
        assert rec.value is not None
        ev = decode_sealed(rec.value)
        assert rec.key == ev.run_id.encode()
        runs.setdefault(ev.run_id, []).append((rec, ev))
    return runs


def assert_chain(run_id: str, sealed: list[SealedEvent], raws: list[bytes] | None) -> None:
    """Seqs are 0..n-1 exactly once, and the chain links every one of them; when ``raws`` is
    given, the sealed bytes are exactly those raw values, in order."""
    assert [e.seq for e in sealed] == list(range(len(sealed))), run_id
    prev = genesis(run_id)
    for ev in sealed:
        assert ev.prev_hash == prev, (run_id, ev.seq)
        assert ev.hash == link(prev, ev.raw), (run_id, ev.seq)
        prev = ev.hash
    if raws is not None:
        assert [e.raw for e in sealed] == raws, run_id


def wait_until(cond: Callable[[], bool], *, timeout: float, what: str, every: float = 0.5) -> None:
    deadline = time.monotonic() + timeout
    event = threading.Event()
    while not cond():
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {what}"
        event.wait(every)  # a deadline-bounded poll, not a fixed sleep


def sealed_count(settings: Settings) -> int:
    return len(read_sealed_events(settings))


def assert_signed_log(
    settings: Settings, verifiers: list[NoteVerifier]
) -> dict[int, list[VerifiedCheckpoint]]:
    """Read every sealed partition back and check its signed log, independently of the
    sequencer's code: each checkpoint record verifies with ``verifiers`` for its partition's
    origin, lists exactly the leaf hashes of the event records since the previous checkpoint
    in offset order (computed here from the decoded records), starts where the previous one
    ended, and is consistent with it (an RFC 6962 consistency proof over the leaves read);
    no event record is left after the last checkpoint; the heads topic's tree record of each
    partition is the last checkpoint's tree. Returns the checkpoints per partition."""
    by_part: dict[int, list[Record]] = {}
    for rec in read_all(settings, settings.topics.sealed):
        by_part.setdefault(rec.partition, []).append(rec)
    out: dict[int, list[VerifiedCheckpoint]] = {}
    for part, recs in sorted(by_part.items()):
        recs.sort(key=lambda r: r.offset)
        leaves: list[bytes] = []
        source = list_source(leaves)  # memoises perfect subtrees: leaves only ever grow
        pending: list[bytes] = []
        cps: list[VerifiedCheckpoint] = []
        for rec in recs:
            if not is_checkpoint(rec):
                assert rec.value is not None
                ev = decode_sealed(rec.value)
                pending.append(leaf_hash(ev.run_id, ev.seq, ev.hash))
                continue
            assert rec.key == CHECKPOINT_KEY, (part, rec.offset)
            assert rec.value is not None
            # the real sequencer names the topic's incarnation
            # (docs/log.md, "A new cluster is a new log")
            origin = log_origin(
                settings.log_origin, settings.topic_prefix, part, sealed_generation(settings)
            )
            vc = CheckpointRecord.decode(rec.value).verify(verifiers, origin)
            where = f"checkpoint at {settings.topics.sealed}[{part}]@{rec.offset}"
            assert vc.start == len(leaves), f"{where} starts at {vc.start}, not {len(leaves)}"
            assert list(vc.leaves) == pending, f"{where} does not list the events before it"
            assert pending, f"{where} covers no event record"
            leaves.extend(pending)
            pending = []
            assert vc.checkpoint.size == len(leaves)
            if cps:
                old = cps[-1].checkpoint
                new = vc.checkpoint
                proof = consistency_proof(old.size, new.size, source)
                verify_consistency(old.size, new.size, proof, old.root, new.root)
            cps.append(vc)
        assert not pending, f"{len(pending)} sealed events of partition {part} are in no checkpoint"
        out[part] = cps
    trees: dict[int, CompactTree | None] = {}
    for rec in read_all(settings, settings.topics.heads):
        if rec.key == TREE_KEY and rec.headers.get(RECORD_HEADER) == b"tree":
            assert rec.value is not None
            try:  # an attacker's garbage is fine as long as the sequencer's tree follows it
                trees[rec.partition] = CompactTree.from_bytes(rec.value)
            except LogError:
                trees[rec.partition] = None
    for part, cps in out.items():
        if cps:
            assert trees[part] == cps[-1].tree, f"heads' tree of partition {part} is stale"
    return out


@contextlib.contextmanager
def running(
    settings: Settings, instance_id: str = "t1"
) -> Iterator[tuple[Sequencer, list[BaseException]]]:
    """A Sequencer in a thread; stopped and joined on exit. Errors of ``run`` land in the list."""
    seq = Sequencer(settings, instance_id=instance_id)
    errors: list[BaseException] = []

    def target() -> None:
        try:
            seq.run()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=target, name=f"sequencer-{instance_id}", daemon=True)
    thread.start()
    try:
        yield seq, errors
    finally:
        seq.stop()
        thread.join(60)
        assert not thread.is_alive(), "sequencer did not stop within 60s"
