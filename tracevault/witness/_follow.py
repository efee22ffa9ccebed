"""The witness follows the sealed topic's checkpoint records, one partition log per origin.

Why the topic and not an HTTP endpoint fed by someone else: the sequencer already writes, in
each transaction, a checkpoint record carrying the compact tree at its start and the leaves it
adds (docs/log.md). From that alone the witness computes the consistency proof from its own
last cosigned size (``compact_range_source``), so it needs no copy of the log, no archive, and
no cooperation from the operator it is watching: a log that wants cosignatures must show its
checkpoints where the witness reads them. The decision itself is ``Witness.add_checkpoint``,
shaped as C2SP tlog-witness ``add-checkpoint``, so an HTTP front end can be added beside this.

What the follower sees and does, per checkpoint record of partition ``p`` (records of one
poll that chain are joined first, see :meth:`WitnessFollower.handle_batch`):

- not decodable, not signed by a trusted log key, not for origin
  ``<log_origin>/<prefix>/[<gen>/]p``, or its leaves do not grow to the signed root: not
  the log's; counted, warned, skipped (anyone with write access to the topic can append
  such a record);
- ending at or before the witness's size: the same checkpoint seen again (re-read after a
  restart, at a lower offset) is fine; another root for a size it cosigned is a fork; a
  smaller size is ``old`` (a late joiner re-reading the log: no alert) unless it is shown to
  be a rollback: not a prefix of the witness's tree, or newer in the partition (a higher
  offset) than the record of the witness's size or a larger head it does not extend (the
  log presented a smaller size as its newest), even an exact copy of one it cosigned;
- ending after it: proof from the witness's size, then ``add_checkpoint`` (a bad proof is a
  fork). The record proves from any size that ends on a subtree of its start tree; across a
  wider gap (records gone from the topic) the missing nodes come from the archive's tiles if
  one is configured. Unprovable: refused as a ``gap``, stored once per size, and every later
  record is tried again, so the witness cosigns as soon as one proves.

Offsets are committed after the decision is stored, so a crash re-reads, and re-reading is
harmless (the second case).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from tracevault.config import Settings
from tracevault.errors import LogError, TraceVaultError
from tracevault.runtime.liveness import (
    BlockingCalls,
    CallDeadline,
    Health,
    KafkaWatch,
    LagReader,
    OffsetCommits,
    Restart,
    Sessions,
    Stopping,
    close_quietly,
    raise_for,
)
from tracevault.transparency import (
    Checkpoint,
    CheckpointRecord,
    CompactTree,
    NodeSource,
    compact_range_source,
    consistency_proof,
    is_checkpoint_record,
    is_partition_origin,
    log_origin,
    origin_generation,
    split_note,
    verify_consistency,
)
from tracevault.witness._archive import ArchiveTiles
from tracevault.witness._core import Cosigned, Refused, Witness

__all__ = ["WitnessFollower"]

log = logging.getLogger(__name__)

_POLL_S = 0.5
_LAG_EVERY_S = 1.0
_SESSION_TIMEOUT_MS = 10_000  # as the sequencer's and the archiver's (librdkafka's: 45 s)
_MAX_POLL_INTERVAL_MS = 60_000  # the group's rebalance timeout (librdkafka's: 5 min)
_OUTAGE_WINDOW_S = 60.0  # how long after an outage a fencing is taken for librdkafka's
_CLOSE_S = 3.0  # on stop; a session being replaced waits longer
_REPLACE_CLOSE_S = 10.0


@dataclass(slots=True)
class _Head:
    """The newest checked record of a partition in this session: its offset and tree."""

    offset: int | None
    tree: CompactTree


@dataclass(slots=True)
class _Range:
    """Checked records of one partition joined in a poll, and what the log showed before."""

    rec: CheckpointRecord
    tree: CompactTree
    head_before: int
    offset: int | None  # of the range's last record


class WitnessFollower:
    """Reads ``<prefix>.sealed`` (read_committed) and hands each checkpoint to the witness.

    ``archive``: the archive's tiles, read only to prove consistency across a gap.
    """

    def __init__(
        self,
        settings: Settings,
        witness: Witness,
        *,
        group_id: str | None = None,
        archive: ArchiveTiles | None = None,
        instance_id: str | None = None,
    ):
        self.settings = settings
        self.witness = witness
        self.group_id = group_id or f"tracevault-witness.{settings.topic_prefix}"
        # one witness key, one store, one member: a second process with it is fenced (exit 5)
        self.instance_id = instance_id or f"witness.{witness.signer.name}"
        self.archive = archive
        self._heads: dict[int, _Head] = {}
        self._gaps: dict[str, int] = {}  # origin -> the size a gap refusal is stored at
        self.watch = KafkaWatch("witness")
        self.health = Health("witness", settings.health_stall_s)
        self._stop = threading.Event()
        self._live: Consumer | None = None
        self._lost = self._assigned = False
        self._session_started = 0.0
        self._lag_reader = LagReader()
        self._consumed: dict[int, int] = {}  # partition -> the next offset after what was read
        self._committed: dict[int, int] = {}

    def origin(self, partition: int) -> str:
        """The partition's log as named before generations (docs/log.md)."""
        return log_origin(self.settings.log_origin, self.settings.topic_prefix, partition)

    @staticmethod
    def _origin(rec: CheckpointRecord) -> str:
        """The origin a checked record signs: its partition's log of one generation (a new
        cluster is a new log, with its own history here: docs/log.md)."""
        return Checkpoint.parse(split_note(rec.note)[0]).origin

    def handle(
        self, partition: int, value: bytes, offset: int | None = None
    ) -> Cosigned | Refused | None:
        """Decide one checkpoint record; None when it is not the log's (see module doc)."""
        got = self.handle_batch([(partition, value)], None if offset is None else [offset])
        return got[0] if got else None

    def handle_batch(
        self, records: Sequence[tuple[int, bytes]], offsets: Sequence[int] | None = None
    ) -> list[Cosigned | Refused]:
        """Decide the checkpoint records of one poll, in order, one decision per run of them.

        Consecutive records of a partition that chain (each starts where the last ended, on
        the same compact tree) are joined into one range and only its last checkpoint is
        cosigned: every record is still checked, but the witness pays one stored, fsynced
        cosignature per partition per poll instead of one per sequencer transaction, so it
        keeps up with the sequencer. A verifier needs a cosigned checkpoint at or after its
        run's end, not one per transaction. A record that does not chain (a re-read, a fork)
        ends the range and is decided on its own.

        ``offsets`` (the records' Kafka offsets) tell a re-read (at or below the newest
        offset seen) from a record the log appended after its head; without them each record
        counts as the newest.
        """
        out: list[Cosigned | Refused] = []
        pending: dict[int, _Range] = {}
        for i, (partition, value) in enumerate(records):
            checked = self._checked(partition, value)
            if checked is None:
                continue
            rec, tree = checked
            offset = offsets[i] if offsets else None
            head_before = self._advance(partition, rec, tree, offset)
            cur = pending.get(partition)
            if (
                cur is not None
                and rec.start == cur.tree.size
                and list(rec.prefix) == cur.tree.hashes
            ):
                joined = CheckpointRecord(
                    rec.note, cur.rec.start, cur.rec.prefix, cur.rec.leaves + rec.leaves
                )
                pending[partition] = _Range(joined, tree, cur.head_before, offset)
                continue
            if cur is not None:
                out.append(self._decide(partition, cur))
            pending[partition] = _Range(rec, tree, head_before, offset)
        out.extend(self._decide(p, r) for p, r in pending.items())
        return out

    def _advance(
        self, partition: int, rec: CheckpointRecord, tree: CompactTree, offset: int | None
    ) -> int:
        """Move the partition's head to ``rec`` when it is newer; the size of a larger head
        it does not extend (the log showed that, then presented this smaller one), else 0."""
        head = self._heads.get(partition)
        last = None if head is None else head.offset
        if last is not None and offset is not None and offset <= last:
            return 0  # a re-read (rebalance, seek): not what the log shows as newest
        self._heads[partition] = _Head(offset, tree)
        if head is None or tree.size >= head.tree.size:
            return 0
        chains = rec.start == head.tree.size and list(rec.prefix) == head.tree.hashes
        return 0 if chains else head.tree.size

    def _checked(self, partition: int, value: bytes) -> tuple[CheckpointRecord, CompactTree] | None:
        origin = self.origin(partition)
        try:
            rec = CheckpointRecord.decode(value)
            vc = rec.verify(self.witness.log_keys)
            signed = vc.checkpoint.origin
            s = self.settings
            if not is_partition_origin(signed, s.log_origin, s.topic_prefix, partition):
                raise LogError(
                    f"checkpoint is for log {signed!r}, expected {origin!r} or another "
                    "generation of it"
                )
            tree, origin = vc.tree, signed
        except LogError as e:
            self.witness.metrics.refused.labels(origin, "invalid").inc()
            log.warning("skipped a checkpoint record in partition %s: %s", partition, e)
            return None
        return rec, tree

    def _decide(self, partition: int, r: _Range) -> Cosigned | Refused:
        """``r.rec`` is checked (signed, its leaves reach its root); prove it from our size."""
        rec = r.rec
        origin = self._origin(rec)
        latest = self.witness.latest(origin)
        size, root = latest if latest is not None else (0, b"")
        proof: list[bytes] = []
        from_log = True
        try:
            if latest is not None and size < rec.end:
                src = compact_range_source(rec.start, rec.prefix, rec.leaves)
                try:
                    proof = consistency_proof(size, rec.end, src)
                except LogError:  # a gap: the record alone does not reach back to our size
                    proof = self._across_gap(partition, r, size, root, src)
                    from_log = False
            got = self.witness.add_checkpoint(
                rec.note,
                size,
                proof,
                proof_from_log=from_log,
                evidence=rec.encode(),
                head_before=r.head_before,
                record=rec,
                offset=r.offset,
            )
        except Refused as refused:
            return refused
        if got.new and self._gaps.pop(origin, None) is not None:
            log.warning(
                "witness of %s cosigns again: %s proved consistent with %s", origin, rec.end, size
            )
        return got

    def _across_gap(
        self, partition: int, r: _Range, size: int, root: bytes, src: NodeSource
    ) -> list[bytes]:
        """The proof from ``size`` to the range's end with the nodes left of its start read
        from the archive's tiles; a checked proof or :class:`Refused` (``gap``)."""
        rec = r.rec
        origin = self._origin(rec)
        why = "no archive is configured to read the missing nodes from"
        if self.archive is not None:
            try:
                _, tiles = self.archive.source(partition, origin_generation(origin))

                def node(level: int, index: int) -> bytes:
                    try:
                        return src(level, index)
                    except LogError:
                        return tiles(level, index)

                proof = consistency_proof(size, rec.end, node)
                verify_consistency(size, rec.end, proof, root, r.tree.root())
                return proof
            except TraceVaultError as e:  # not archived that far yet, unreachable, or doctored
                why = f"the archive {self.archive.store.url} does not prove it: {e}"
        raise self._gap(origin, rec, size, why)

    def _gap(self, origin: str, rec: CheckpointRecord, size: int, why: str) -> Refused:
        """Refuse a record it cannot prove from ``size``: stored and counted once per size.

        Why once: while the gap lasts every later record is one too, and a refusal per record
        (and per restart) would bury the one that matters; the store's copy names the sizes.
        """
        message = (
            f"checkpoint {origin}@{rec.end} lists leaves from {rec.start}, the witness is at "
            f"{size}: it cannot prove consistency across leaves {size}..{rec.start - 1} "
            f"({why}); it cosigns again once a checkpoint proves from {size}"
        )
        if self._gaps.get(origin) == size or (
            origin not in self._gaps and self.witness.refused_before(origin, "gap", size)
        ):
            self._gaps[origin] = size
            log.debug("still a gap: %s", message)
            return Refused("gap", origin, message, size, 409)
        self._gaps[origin] = size
        detail = {"start": rec.start, "checkpoint_size": rec.end}
        return self.witness.refuse(
            "gap", origin, message, rec.note, evidence=rec.encode(), detail=detail
        )

    def run(self, stop: threading.Event, health: Health | None = None) -> None:
        """Follow until ``stop`` is set; a record that fails is logged, never fatal.

        Kafka sessions run under the services' supervisor (docs/liveness.md): a broker
        outage, a coordinator moving or loading, a lost member id are ridden out with a new
        session or a deferred commit, never a dead witness."""
        self._stop = stop
        self.health = health or Health("witness", self.settings.health_stall_s)
        self.health.watch = self.watch  # /healthz says 503 while no broker is reachable
        self._calls = BlockingCalls("witness", stop)
        self._commits = OffsetCommits("witness", self._calls, self.watch, self._kafka_error)
        sessions = self._sessions = Sessions("witness", stop, self.health)
        try:
            sessions.run(self._start_session, self._session, self._end_session)
        finally:
            self._calls.close()

    def _consumer_config(self) -> dict[str, Any]:
        """Static membership (``group.instance.id``): a restarted witness takes its dead
        predecessor's place in the group at once. A dynamic member that died (or left while
        the coordinator was away) held every partition until the group's rebalance gave up
        on it: up to ``max.poll.interval.ms`` (5 min) while its last JoinGroup was pending.
        A short session and poll interval bound what an instance id that does not come back
        (a renamed witness) holds."""
        return self.settings.kafka_config(
            **{
                "group.id": self.group_id,
                "group.instance.id": self.instance_id,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "isolation.level": "read_committed",
                "session.timeout.ms": _SESSION_TIMEOUT_MS,
                "max.poll.interval.ms": _MAX_POLL_INTERVAL_MS,
                "log_level": 3,
                **self.watch.client_config(),
            }
        )

    def _start_session(self) -> Consumer:
        consumer = self._live = Consumer(self._consumer_config())
        self._lost = self._assigned = False
        self._lag_reader = LagReader()
        self._consumed.clear()
        self._committed.clear()
        self._session_started = time.monotonic()
        consumer.subscribe(
            [self.settings.topics.sealed],
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_lost,
        )
        return consumer

    def _end_session(self, consumer: Consumer) -> None:
        self._live = None
        close_s = _CLOSE_S if self._stop.is_set() else _REPLACE_CLOSE_S
        close_quietly(self._calls, "witness consumer close", consumer.close, close_s)

    def _on_assign(self, consumer: Consumer, parts: list[TopicPartition]) -> None:
        if consumer is self._live:
            self._assigned = True
            log.info("witness assigned %s", [p.partition for p in parts])

    def _on_revoke(self, consumer: Consumer, parts: list[TopicPartition]) -> None:
        if consumer is self._live:  # decisions are stored: what is uncommitted is re-read
            for p in parts:
                self._consumed.pop(p.partition, None)
                self._committed.pop(p.partition, None)

    def _on_lost(self, consumer: Consumer, parts: list[TopicPartition]) -> None:
        if consumer is self._live:
            self._on_revoke(consumer, parts)
            self._lost = True  # the group session expired: a new consumer, as the others do
            self.watch.trouble()

    def _kafka_error(self, err: KafkaError) -> None:
        raise_for(
            err,
            self.watch,
            _OUTAGE_WINDOW_S,
            f"the witness was fenced: another witness runs with group.instance.id "
            f"{self.instance_id} in group {self.group_id}; this one stopped",
        )

    def _session(self, consumer: Consumer) -> None:
        health = self.health
        health.state = "joining"
        next_lag = 0.0
        while not self._stop.is_set():
            try:
                msgs = consumer.consume(500, _POLL_S)
            except KafkaException as exc:
                self._kafka_error(exc.args[0])
                log.warning("witness consumer: %s", exc.args[0].str())
                msgs = []
            if self._lost:
                raise Restart("the consumer lost its partitions (group session expired)")
            self.watch.check_session(self._session_started, _SESSION_TIMEOUT_MS)
            got = [r for r in map(self._record, msgs) if r is not None]
            if got:
                try:
                    self.handle_batch([(p, v) for p, v, _ in got], [o for _, _, o in got])
                except TraceVaultError as e:
                    # the store failed: stop before committing past what is not recorded
                    log.error("witness could not record its decisions: %s", e)
                    raise
            self._commit(consumer, final=False)
            now = time.monotonic()
            if now >= next_lag:
                next_lag = now + _LAG_EVERY_S
                self._update_lag(consumer)
        with contextlib.suppress(Restart, CallDeadline, Stopping):
            self._commit(consumer, final=True)  # best effort: a re-read is harmless

    def _commit(self, consumer: Consumer, *, final: bool) -> None:
        """Commit what was read and decided (the decisions are stored first)."""
        topic = self.settings.topics.sealed
        offsets = [
            TopicPartition(topic, p, o)
            for p, o in self._consumed.items()
            if self._committed.get(p) != o
        ]
        if not offsets or not self._commits.commit(consumer, offsets, final=final):
            return
        for tp in offsets:
            self._committed[tp.partition] = tp.offset
        self.health.state = "following"
        self.health.progressed()
        self._sessions.progressed()

    def _update_lag(self, consumer: Consumer) -> None:
        """Lag 0 (nothing to do) counts as progress for ``/healthz``; a poll that merely
        returned does not."""
        try:
            lag = self._lag_reader.total(consumer, self._assigned)
        except KafkaException as exc:
            log.debug("lag not updated: %s", exc)
            return
        if lag == 0:
            self.health.state = "following"
        self.health.set_lag(lag)

    def _record(self, m: Message) -> tuple[int, bytes, int] | None:
        """(partition, value, offset) of a checkpoint record; None for anything else."""
        err = m.error()
        if err is not None:
            if err.code() != KafkaError._PARTITION_EOF:
                self._kafka_error(err)  # a fencing or fatal error ends the session
                log.warning("witness consumer: %s", err)
            return None
        partition, offset = m.partition(), m.offset()
        if partition is not None and offset is not None:
            self._consumed[partition] = offset + 1  # read; committed once decided
        raw = m.headers() or []
        pairs = raw.items() if isinstance(raw, dict) else raw
        headers = [(k, v.encode() if isinstance(v, str) else v) for k, v in pairs]
        if not is_checkpoint_record(headers):
            return None
        value = m.value()
        if value is None or partition is None or offset is None:
            return None
        return partition, value, offset
