"""Sealed records for the archive tests, made the way the sequencer makes them.

The tests do not depend on the sequencer: they chain TraceEvents with ``tracevault.chain`` and
encode them with ``encode_sealed``, which is exactly what lands on ``<prefix>.sealed``.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import boto3

from tracevault.archive import (
    ObjectInfo,
    ObjectStore,
    ObjectVersion,
    encode_segment,
    sealed_body,
)
from tracevault.archive._s3store import S3Store
from tracevault.archive.layout import SegmentReceipt, receipt_key, segment_key
from tracevault.chain import genesis, link
from tracevault.index import IndexStep, IndexWorker
from tracevault.schemas import (
    AgentInfo,
    EventKind,
    SealedEvent,
    TraceEvent,
    canonical_json,
    encode_event,
    encode_sealed,
)
from tracevault.services.archiver._logwriter import LeafRecord, PartitionLog
from tracevault.transparency import (
    CheckpointRecord,
    CompactTree,
    Ed25519Signer,
    leaf_data,
    log_origin,
)
from tracevault.transparency._merkle import hash_leaf

AGENT = AgentInfo("agent-a", "1.0.0", "host-1", "pytest", "0.1.0")
T0_MICROS = 1_767_225_600_000_000  # 2026-01-01T00:00:00Z


def raw_event(run_id: str, seq: int, kind: EventKind, at: int | None = None) -> bytes:
    response = canonical_json({"output": "done"}) if kind is EventKind.RUN_FINISHED else b"null"
    return encode_event(
        TraceEvent(
            run_id=run_id,
            seq=seq,
            kind=kind,
            at=T0_MICROS + seq if at is None else at,
            agent=AGENT,
            request=canonical_json({"i": seq, "pad": "x" * 40}),
            response=response,
        )
    )


def sealed_run(
    run_id: str, n: int, *, finish: bool = True, start: int = 0, partition: int = 0
) -> list[SealedEvent]:
    """Events ``start .. start+n-1`` of a run; the last is RUN_FINISHED when ``finish``."""
    prev = genesis(run_id)
    out: list[SealedEvent] = []
    for seq in range(start + n):
        if seq == 0:
            kind = EventKind.RUN_STARTED
        elif finish and seq == start + n - 1:
            kind = EventKind.RUN_FINISHED
        else:
            kind = EventKind.TOOL_CALL
        raw = raw_event(run_id, seq, kind)
        h = link(prev, raw)
        if seq >= start:
            out.append(
                SealedEvent(
                    run_id=run_id,
                    seq=seq,
                    prev_hash=prev,
                    hash=h,
                    raw=raw,
                    sealed_at=T0_MICROS + seq,
                    source_partition=partition,
                    source_offset=seq,
                    sequencer_id="test-sequencer",
                )
            )
        prev = h
    return out


def sealed_values(run_id: str, n: int, **kw: object) -> list[bytes]:
    return [encode_sealed(s) for s in sealed_run(run_id, n, **kw)]  # type: ignore[arg-type]


def future() -> datetime:
    """183 days from now, taken when an object is written: the retention report compares a
    lock with the moment its object was written, so a time taken at import (minutes earlier
    on a loaded machine) reads as a lock shorter than 183 days."""
    return datetime.now(UTC) + timedelta(days=183)


def write_segment_objects(
    store: ObjectStore, events: list[SealedEvent], *, receipt: bool = True
) -> str:
    run, first, last = events[0].run_id, events[0].seq, events[-1].seq
    data = encode_segment(run, first, [sealed_body(encode_sealed(e)) for e in events])
    key = segment_key(run, first, last)
    store.put(key, data, retain_until=future())
    if receipt:
        r = SegmentReceipt(
            run_id=run,
            segment=key,
            sha256=hashlib.sha256(data).hexdigest(),
            first_seq=first,
            last_seq=last,
            count=len(events),
            first_prev_hash=events[0].prev_hash.hex(),
            last_hash=events[-1].hash.hex(),
            created_at="2026-01-01T00:00:00+00:00",
        )
        store.put(receipt_key(run, first, last), r.to_json(), retain_until=future())
    return key


class LogWriter:
    """One partition's static log written as the archiver writes it (signed checkpoint per
    flush, tiles, bundles, run indexes), flush by flush, without Kafka."""

    def __init__(
        self,
        store: ObjectStore,
        signer: Ed25519Signer,
        prefix: str = "pfx",
        until: datetime | None = None,
        generation: str = "",
        *,
        index: IndexStep | IndexWorker | None = None,
    ) -> None:
        self.index = index  # the archiver's index step, fed as the archiver feeds it
        self.origin = log_origin("tracevault", prefix, 0, generation)
        self.plog = PartitionLog.open(store, prefix, self.origin, 0, [signer.verifier])
        self.signer, self.until = signer, until
        self.tree = CompactTree()
        self.pending: list[bytes] = []

    def add(self, events: list[SealedEvent], *, finishes: bool = True) -> None:
        """Append events (of one run, in seq order); the last finishes the run if ``finishes``."""
        for ev in events:
            data = leaf_data(ev.run_id, ev.seq, ev.hash)
            rec = LeafRecord(ev.run_id, ev.seq, ev.hash, finishes and ev is events[-1],
                             ev.sealed_at, data, hash_leaf(data), encode_sealed(ev))  # fmt: skip
            self.plog.append(rec)
            self.pending.append(rec.leaf_hash)

    def flush(self) -> None:
        rec, self.tree = CheckpointRecord.build(self.tree, self.pending, self.origin, self.signer)
        self.pending = []
        self.plog.note, self.plog.note_size = rec.note, self.tree.size
        index = None if self.index is None else self.index.take(self.plog)
        with ThreadPoolExecutor(4) as pool:
            job = self.plog.take_flush(self.until or future())
            job.index = index
            job.write(pool)


def write_log_run(
    store: ObjectStore, run_id: str, n: int, signer: Ed25519Signer, prefix: str = "pfx"
) -> None:
    """Archive one run as the archiver would (a static log of partition 0), signed by
    ``signer``, without Kafka."""
    w = LogWriter(store, signer, prefix)
    w.add(sealed_run(run_id, n))
    w.flush()


def s3_log_among_others(
    endpoint: str, run_id: str, n: int, others: int
) -> tuple[str, Ed25519Signer]:
    """(bucket, signer) of a new Object Lock bucket on ``endpoint`` whose log (under
    ``archive/``) holds ``run_id`` (``n`` events) in the middle of ``others`` runs of 2
    events, each archived in its own flush, as a busy archiver with idle runs writes them."""
    bucket = f"tv-log-{uuid.uuid4().hex[:12]}"
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    client.create_bucket(Bucket=bucket, ObjectLockEnabledForBucket=True)
    signer = Ed25519Signer.generate("test-log")
    w = LogWriter(S3Store(bucket, "archive", client=client), signer)
    for i in range(others + 1):
        if i == others // 2:
            w.add(sealed_run(run_id, n))
            w.flush()
        if i < others:
            w.add(sealed_run(f"other-{i}", 2))
            w.flush()
    return bucket, signer


class RecordingStore:
    """The store, recording every key a reader gets (the objects a verify needs)."""

    def __init__(self, store: ObjectStore) -> None:
        self.store, self.keys = store, set[str]()

    @property
    def url(self) -> str:
        return self.store.url

    def get(self, key: str, *, version_id: str | None = None) -> bytes:
        self.keys.add(key)
        return self.store.get(key, version_id=version_id)

    def list(self, prefix: str) -> Sequence[ObjectInfo]:
        return self.store.list(prefix)

    def history(self, prefix: str, **kw: str) -> list[ObjectVersion]:
        return self.store.history(prefix, **kw)

    def versions(self, key: str) -> list[ObjectVersion]:
        return self.store.versions(key)

    @property
    def keeps_versions(self) -> bool:
        return self.store.keeps_versions
