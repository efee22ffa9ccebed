"""The sequencer's restored state proves itself against ``sealed`` before it is used.

Anyone who can write to ``<prefix>.heads`` (a deployment without `tracevault topics acls`)
can append a record under any key, and compaction keeps the latest. So a restored head is
evidence to check, not a fact (docs/design.md, "Sequencer rules"):

* a **run's head** must match the sealed records it names. The record at ``last_offset`` of
  its sealed partition is that run's (key and decoded run id), at seq ``next_seq - 1``, with
  hash ``last_hash``, and a RUN_FINISHED exactly when the head says ``finished``; the record
  at ``first_offset`` is its seq 0; its key, its ``run_id`` and its ``partition`` agree with
  the heads partition murmur2 gives the run. Each event it holds behind a gap is the raw
  record it names (``source_partition``/``source_offset``), byte for byte. That costs one or
  two reads per open run at restore, offsets sorted and read in runs (heads of active runs
  name nearby offsets), so restore time stays bounded by the open runs, and nothing is added
  to the per-event path. No new secret is needed: ``sealed`` is written in the same
  transaction as the heads and is what every verifier checks.
* the **compact tree** of a partition's log is taken from the newest checkpoint record at the
  tail of the sealed partition, checked against the sequencer's own key; the heads topic's
  tree record must equal it.
* a **finished-runs chunk** must decode.

What fails is an ALERT (logged and counted by the caller) and is rebuilt from ``sealed``: one
read of the partition from its low watermark, keeping only records a checkpoint lists, in
chain order (``scan``). A garbage chunk also rebuilds the partition's finished runs, and a run
with open records in ``sealed`` but no head gets one. Limits (docs/design.md): a *replayed*
older genuine head, or a tombstone, still names a real sealed record and is not detected at
restore; the ``gaps`` list is not checked (a forged one can only send a resend of an already
sealed seq to the DLQ as ``late``); events held in a head that had to be rebuilt are lost.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from tracevault.chain import genesis
from tracevault.config import Settings
from tracevault.errors import LogError, SchemaError, ServiceUnavailableError
from tracevault.heads._finished import fingerprint
from tracevault.heads._read import HeadsState
from tracevault.heads._record import GapRange, Head
from tracevault.kafka import partition_for, watermarks
from tracevault.schemas import EventKind, SealedEvent, decode_event, decode_sealed
from tracevault.schemas.fast import event_kind, sealed_fields
from tracevault.transparency import (
    TREE_KEY,
    Checkpoint,
    CheckpointRecord,
    CompactTree,
    NoteVerifier,
    is_checkpoint_record,
    is_partition_origin,
    leaf_hash,
    log_origin,
    split_note,
)

__all__ = ["ProvenState", "Rejection", "prove_state"]

log = logging.getLogger(__name__)

_NEAR = 2000  # wanted offsets this close are read through rather than sought
_TAIL = 64  # records read back from a sealed partition's end to find its last checkpoint
_TAIL_MAX = 64 * 8**4  # and at most this many (a partition sealed before the log existed)
_THREADS = 4  # partitions proven at once, each with its own consumer


@dataclass(frozen=True, slots=True)
class Rejection:
    """One piece of restored state that did not prove itself: ``what`` is ``head``,
    ``tree`` or ``chunk``; ``why`` names the record and the failed check."""

    what: str
    partition: int
    key: bytes
    why: str


@dataclass(slots=True)
class ProvenState:
    """What the sequencer may use: proven heads and heads rebuilt from ``sealed``
    (``rebuilt``: their run ids, whose heads it rewrites in its next transaction), the
    trees of the sealed checkpoints, heads keys with nothing to rebuild (``forget``: to
    tombstone), and what was rejected."""

    heads: list[Head] = field(default_factory=list)
    rebuilt: set[str] = field(default_factory=set)
    trees: dict[int, CompactTree] = field(default_factory=dict)
    forget: list[tuple[bytes, int]] = field(default_factory=list)
    rejected: list[Rejection] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class _Rec:
    offset: int
    key: bytes | None
    value: bytes | None
    checkpoint: bool


class _Reader:
    """Records of one topic partition at chosen offsets, or from an offset to the end."""

    def __init__(self, settings: Settings, deadline: float) -> None:
        self.deadline = deadline
        self._servers = settings.bootstrap_servers
        self._c = Consumer(
            settings.kafka_config(
                **{
                    "group.id": f"tracevault-heads-proof-{uuid.uuid4().hex[:8]}",
                    "enable.auto.commit": False,
                    "enable.partition.eof": True,
                    "fetch.wait.max.ms": 10,
                    "isolation.level": "read_committed",
                    "auto.offset.reset": "earliest",
                    "log_level": 0,
                }
            )
        )

    def close(self) -> None:
        self._c.close()

    def bounds(self, topic: str, partition: int) -> tuple[int, int]:
        return watermarks(self._c, TopicPartition(topic, partition), self.deadline, min_timeout=0.5)

    def _stream(self, topic: str, partition: int, start: int) -> Iterator[_Rec | None]:
        """Records from ``start`` on; None once at the partition's end (then it stops)."""
        self._c.assign([TopicPartition(topic, partition, start)])
        try:
            while True:
                if time.monotonic() > self.deadline:
                    raise ServiceUnavailableError(
                        f"checking the sequencer's state against {topic}[{partition}] did not "
                        "finish in time; check the broker"
                    )
                for msg in self._c.consume(1000, timeout=0.05):
                    err = msg.error()
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF:
                            if msg.partition() != partition or msg.topic() != topic:
                                continue
                            yield None
                            return
                        raise ServiceUnavailableError(f"reading {topic}[{partition}]: {err}")
                    off = msg.offset()
                    if (
                        off is None
                        or off < start
                        or msg.partition() != partition
                        or msg.topic() != topic
                    ):
                        continue  # a fetch of the previous assignment
                    yield _Rec(off, msg.key(), msg.value(), is_checkpoint_record(msg.headers()))
        except KafkaException as exc:
            raise ServiceUnavailableError(
                f"Kafka at {self._servers} failed reading {topic}[{partition}] ({exc})"
            ) from exc

    def at(self, topic: str, partition: int, offsets: Iterable[int]) -> dict[int, _Rec]:
        """The committed records at ``offsets``; one that is not there (an aborted or a
        control record, past the end, or deleted) is absent. Offsets near each other are
        read through, far ones sought."""
        want = sorted({o for o in offsets if o >= 0})
        found: dict[int, _Rec] = {}
        i = 0
        while i < len(want):
            for rec in self._stream(topic, partition, want[i]):
                if rec is None:
                    return found  # the end: nothing further exists
                while i < len(want) and want[i] < rec.offset:
                    i += 1
                if i < len(want) and want[i] == rec.offset:
                    found[rec.offset] = rec
                    i += 1
                if i >= len(want) or want[i] - rec.offset > _NEAR:
                    break
        return found

    def through(self, topic: str, partition: int, start: int) -> Iterator[_Rec]:
        for rec in self._stream(topic, partition, start):
            if rec is None:
                return
            yield rec


def prove_state(
    settings: Settings,
    state: HeadsState,
    partitions: Sequence[int],
    *,
    partition_count: int,
    verifiers: Sequence[NoteVerifier],
    horizon_us: int,
    now_us: int,
    timeout: float = 60.0,
) -> ProvenState:
    """Check ``state`` (read from the heads of ``partitions``) against ``sealed`` and ``raw``;
    what fails is rebuilt from ``sealed`` (see the module's docstring)."""
    deadline = time.monotonic() + timeout
    by_part: dict[int, list[tuple[str, Head]]] = {p: [] for p in partitions}
    for rid, head in state.heads.items():
        by_part.setdefault(state.where[rid][0], []).append((rid, head))

    def one(p: int) -> ProvenState:
        part = ProvenState()
        reader = _Reader(settings, deadline)
        try:
            _prove_partition(
                reader,
                settings,
                state,
                (p, by_part[p], partition_count),
                verifiers,
                (horizon_us, now_us, timeout),
                part,
            )
        finally:
            reader.close()
        return part

    # Partitions in parallel: each costs a few broker round trips whatever its size.
    with ThreadPoolExecutor(min(_THREADS, max(1, len(partitions)))) as pool:
        parts = list(pool.map(one, partitions))
    out = ProvenState()
    for part in parts:
        out.heads.extend(part.heads)
        out.rebuilt |= part.rebuilt
        out.trees.update(part.trees)
        out.forget.extend(part.forget)
        out.rejected.extend(part.rejected)
    return out


def _prove_partition(  # noqa: PLR0917 - private, one call site
    reader: _Reader,
    settings: Settings,
    state: HeadsState,
    where: tuple[int, list[tuple[str, Head]], int],
    verifiers: Sequence[NoteVerifier],
    times: tuple[int, int, float],
    out: ProvenState,
) -> None:
    """One heads partition ``p``: its heads (under their keys), of ``n`` partitions."""
    sealed, raw = settings.topics.sealed, settings.topics.raw
    p, heads, n = where
    horizon_us, now_us, timeout = times
    rebuild: set[bytes] = set()
    all_runs = False
    for (part, key), why in state.bad.items():
        if part != p:
            continue
        what = "tree" if key == TREE_KEY else "chunk" if key[:1] == b"\x00" else "head"
        out.rejected.append(Rejection(what, p, key, why))
        if what == "head":
            rebuild.add(key)
        elif what == "chunk":
            all_runs = True
            out.forget.append((key, p))
    out.trees[p] = _tree(reader, settings, state, p, verifiers, out)
    lo, _hi = reader.bounds(sealed, p)
    named = reader.at(sealed, p, (o for _, h in heads for o in (h.first_offset, h.last_offset)))
    held = reader.at(raw, p, (e.source_offset for _, h in heads for e in h.held))
    for rid, head in heads:
        failed = _check(rid, head, p, n, lo, named, held)
        if failed is None:
            out.heads.append(head)
            continue
        off = state.where[rid][1]
        out.rejected.append(
            Rejection("head", p, rid.encode(), f"{settings.topics.heads}[{p}]@{off}: {failed}")
        )
        rebuild.add(rid.encode())
    if not rebuild and not all_runs:
        return
    # the rare path reads a whole partition: it may take longer than the proof
    reader.deadline = max(reader.deadline, time.monotonic() + 10 * timeout)
    found = scan(reader, sealed, p, None if all_runs else rebuild)
    have = {h.run_id for h in out.heads}
    for key in sorted(rebuild):
        got = found.get(key)
        if got is None:
            out.forget.append((key, p))
            continue
        head = got.head(p)
        out.heads.append(head)
        out.rebuilt.add(head.run_id)
        have.add(head.run_id)
    if all_runs:
        known = {
            fp for _, (part, ch) in state.finished.items() if part == p for fp in ch.fingerprints
        }
        for got in found.values():
            head = got.head(p)
            if head.run_id in have or (head.finished and fingerprint(head.run_id) in known):
                continue
            if head.finished and got.sealed_at < now_us - horizon_us:
                continue  # past the horizon: forgotten anyway
            out.heads.append(head)
            out.rebuilt.add(head.run_id)
            have.add(head.run_id)


def _check(  # noqa: PLR0917 - one check per line, in order
    rid: str,
    h: Head,
    p: int,
    n: int,
    lo: int,
    named: dict[int, _Rec],
    held: dict[int, _Rec],
) -> str | None:
    """Why ``h`` (read under key ``rid`` from heads partition ``p``) is not proven, or None."""
    if h.run_id != rid:
        return f"the head under key {rid!r} names run {h.run_id!r}"
    if h.partition != p or partition_for(rid, n) != p:
        return (
            f"run {rid!r} belongs to partition {partition_for(rid, n)}, its head says "
            f"{h.partition} and lies in {p}"
        )
    if h.next_seq < 0 or len(h.last_hash) != 32:
        return f"run {rid!r}: next seq {h.next_seq} or a {len(h.last_hash)}-byte last hash"
    for e in h.held:
        if e.seq <= h.next_seq or e.source_partition != p:
            return f"run {rid!r}: held seq {e.seq} is not past the head or not from partition {p}"
        rec = held.get(e.source_offset)
        if rec is None or rec.key != rid.encode() or rec.value != e.raw:
            return f"run {rid!r}: held seq {e.seq} is not raw[{p}]@{e.source_offset}"
    for g in h.gaps:
        if not 0 <= g.missing_from <= g.missing_to < h.next_seq:
            return f"run {rid!r}: gap {g.missing_from}..{g.missing_to} is not below the head"
    if h.next_seq == 0:
        if h.finished or h.first_offset != -1 or h.last_offset != -1 or h.last_hash != genesis(rid):
            return f"run {rid!r}: a head with nothing sealed claims sealed state"
        return None
    if not 0 <= h.first_offset <= h.last_offset:
        return f"run {rid!r}: sealed offsets {h.first_offset}..{h.last_offset}"
    if h.last_offset < lo:
        return f"run {rid!r}: its last sealed record (offset {h.last_offset}) is gone from sealed"
    last = _sealed_event(named.get(h.last_offset), rid)
    if isinstance(last, str):
        return f"run {rid!r}: sealed[{p}]@{h.last_offset} {last}"
    seq, hash_, kind = last
    if seq != h.last_seq or hash_ != h.last_hash:
        return (
            f"run {rid!r}: sealed[{p}]@{h.last_offset} is seq {seq} with hash {hash_.hex()[:16]}, "
            f"the head says seq {h.last_seq} with hash {h.last_hash.hex()[:16]}"
        )
    if h.finished != (kind is EventKind.RUN_FINISHED):
        return f"run {rid!r}: the head says finished={h.finished}, its last sealed event is {kind}"
    if h.first_offset != h.last_offset and h.first_offset >= lo:
        first = _sealed_event(named.get(h.first_offset), rid)
        if isinstance(first, str) or first[0] != 0:
            return f"run {rid!r}: sealed[{p}]@{h.first_offset} is not its seq 0"
    elif h.first_offset == h.last_offset and h.last_seq != 0:
        return f"run {rid!r}: one sealed offset for {h.next_seq} events"
    return None


def _sealed_event(rec: _Rec | None, rid: str) -> tuple[int, bytes, EventKind] | str:
    """(seq, hash, kind) of ``rid``'s sealed event in ``rec``, or what is wrong with it.
    The v1 fast readers first (one per open run at restore), the codec for anything else."""
    if rec is None:
        return "is not a committed record"
    value = rec.value
    if rec.checkpoint or rec.key != rid.encode() or value is None:
        return f"is not a record of run {rid!r}"
    try:
        fields = sealed_fields(value)
        if fields is None:
            ev = decode_sealed(value)
            run_id, seq, hash_, raw = ev.run_id, ev.seq, ev.hash, ev.raw
        else:
            run_id, seq, _prev, hash_, raw, _at = fields
        kind = event_kind(raw) or decode_event(raw, check_json=False).kind
    except SchemaError as exc:
        return f"does not decode ({exc})"
    if run_id != rid:
        return f"is run {run_id!r}'s"
    return seq, hash_, kind


def _signed(
    cp: CheckpointRecord,
    verifiers: Sequence[NoteVerifier],
    settings: Settings,
    p: int,
    origin: str,
) -> CompactTree:
    """The tree of a checkpoint record signed by a trusted key for partition ``p``'s log, of
    any generation (a new cluster is a new log: docs/log.md)."""
    vc = cp.verify(verifiers)
    signed = vc.checkpoint.origin
    if not is_partition_origin(signed, settings.log_origin, settings.topic_prefix, p):
        raise LogError(
            f"checkpoint is for log {signed!r}, expected {origin!r} or a generation of it"
        )
    return vc.tree


def _tree(  # noqa: PLR0917 - private, one call site
    reader: _Reader,
    settings: Settings,
    state: HeadsState,
    p: int,
    verifiers: Sequence[NoteVerifier],
    out: ProvenState,
) -> CompactTree:
    """The partition log's tree after its newest checkpoint record in ``sealed``; the heads
    topic's tree must be the same (else an ALERT). With no checkpoint in ``sealed`` (a new
    log, one whose records all expired, or none in its last ``_TAIL_MAX`` records) the heads
    topic's tree is all there is."""
    sealed = settings.topics.sealed
    origin = log_origin(settings.log_origin, settings.topic_prefix, p)
    lo, hi = reader.bounds(sealed, p)
    window = _TAIL
    best: CompactTree | None = None
    while best is None and hi > lo:
        start = max(lo, hi - window)
        for rec in reader.through(sealed, p, start):
            if not rec.checkpoint or rec.value is None:
                continue
            try:
                cp = CheckpointRecord.decode(rec.value)
                tree = _signed(cp, verifiers, settings, p, origin) if verifiers else _unsigned(cp)
            except LogError as exc:
                log.warning("%s[%d]@%d is not our checkpoint (%s)", sealed, p, rec.offset, exc)
                continue
            if best is None or tree.size >= best.size:
                best = tree
        if start == lo or window >= _TAIL_MAX:
            break
        window *= 8
    have = state.trees.get(p)
    if best is None:
        return have.copy() if have is not None else CompactTree()
    if have != best and (p, TREE_KEY) not in state.bad:
        what = "none" if have is None else f"size {have.size}, root {have.root().hex()[:16]}"
        out.rejected.append(
            Rejection(
                "tree",
                p,
                TREE_KEY,
                f"{settings.topics.heads}[{p}] holds the log's compact tree ({what}), the newest "
                f"checkpoint in {sealed}[{p}] has size {best.size}, root {best.root().hex()[:16]}",
            )
        )
    return best


def _unsigned(cp: CheckpointRecord) -> CompactTree:
    """A checkpoint's tree when the signer cannot verify (a KMS signer): its leaves must still
    grow the tree it starts from to the root its note states."""
    text, _sigs = split_note(cp.note)
    signed = Checkpoint.parse(text)
    tree = CompactTree(cp.start, list(cp.prefix))
    tree.extend(cp.leaves)
    if tree.size != signed.size or tree.root() != signed.root:
        raise LogError("its leaves do not grow the tree to the root its note states")
    return tree


@dataclass(slots=True)
class _Found:
    """A run as ``sealed`` has it: what its head would say."""

    run_id: str
    first_offset: int
    last_offset: int
    next_seq: int
    last_hash: bytes
    finished: bool = False
    sealed_at: int = 0  # of its last record: when the run last had an event
    gaps: list[GapRange] = field(default_factory=list)

    def head(self, partition: int) -> Head:
        return Head(
            run_id=self.run_id,
            next_seq=self.next_seq,
            last_hash=self.last_hash,
            finished=self.finished,
            partition=partition,
            first_offset=self.first_offset,
            last_offset=self.last_offset,
            gaps=tuple(self.gaps),
            updated_at=self.sealed_at,
        )


def scan(
    reader: _Reader, topic: str, partition: int, keys: set[bytes] | None
) -> dict[bytes, _Found]:
    """Runs ``keys`` (every run when None) of one sealed partition, rebuilt from its records.

    Only records a following checkpoint lists count (anyone can append to ``sealed`` too),
    and each must continue its run's chain (seq and prev_hash); a run whose first records
    expired starts at the first one left. The rare path: it reads the partition once from its
    low watermark."""
    lo, _hi = reader.bounds(topic, partition)
    found: dict[bytes, _Found] = {}
    pending: list[tuple[bytes, int, bytes, SealedEvent]] = []
    for rec in reader.through(topic, partition, lo):
        if rec.value is None or rec.key is None:
            continue
        if rec.checkpoint:
            try:
                listed = set(CheckpointRecord.decode(rec.value).leaves)
            except LogError:
                continue
            for leaf, off, key, ev in pending:
                if leaf in listed:
                    _extend(found, key, off, ev)
            pending = []
            continue
        if keys is not None and rec.key not in keys:
            continue
        try:
            ev = decode_sealed(rec.value)
        except SchemaError:
            continue
        if ev.run_id.encode("utf-8") != rec.key:
            continue
        pending.append((leaf_hash(ev.run_id, ev.seq, ev.hash), rec.offset, rec.key, ev))
    return found


def _extend(found: dict[bytes, _Found], key: bytes, offset: int, ev: SealedEvent) -> None:
    run = found.get(key)
    if run is not None and (ev.seq != run.next_seq or ev.prev_hash != run.last_hash):
        return  # not the chain's next link
    if run is None:
        if ev.seq == 0 and ev.prev_hash != genesis(ev.run_id):
            return
        run = found[key] = _Found(ev.run_id, offset, offset, ev.seq, ev.prev_hash)
        if ev.seq != 0:
            run.first_offset = offset  # the start expired: read from the first one left
    try:
        trace = decode_event(ev.raw, check_json=False)
    except SchemaError:
        return
    run.last_offset = offset
    run.next_seq = ev.seq + 1
    run.last_hash = ev.hash
    run.sealed_at = ev.sealed_at
    if trace.kind is EventKind.RUN_FINISHED:
        run.finished = True
    elif trace.kind is EventKind.GAP:
        if run.gaps and run.gaps[-1].missing_to == ev.seq - 1:
            run.gaps[-1] = GapRange(run.gaps[-1].missing_from, ev.seq)
        else:
            run.gaps.append(GapRange(ev.seq, ev.seq))
