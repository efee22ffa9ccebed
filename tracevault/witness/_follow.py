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

- not decodable, not signed by a trusted log key, not for origin ``<log_origin>/<prefix>/p``,
  or its leaves do not grow to the signed root: not the log's; counted, warned, skipped
  (anyone with write access to the topic can append such a record);
- ending at or before the witness's size: the same checkpoint seen again (re-read after a
  restart) is fine; another root for a size it cosigned is a fork; a size it never cosigned
  below its own is a rollback;
- starting at or before the witness's size and ending after: proof from the witness's size,
  then ``add_checkpoint`` (a bad proof is a fork);
- starting after it: a gap the witness cannot prove across; refused until an operator looks.

Offsets are committed after the decision is stored, so a crash re-reads, and re-reading is
harmless (the second case).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

from confluent_kafka import Consumer, KafkaError, Message

from tracevault.config import Settings
from tracevault.consumer._liveness import Health, KafkaWatch
from tracevault.errors import LogError, TraceVaultError
from tracevault.log import (
    CheckpointRecord,
    CompactTree,
    compact_range_source,
    consistency_proof,
    is_checkpoint_record,
    log_origin,
)
from tracevault.witness._core import Cosigned, Refused, Witness

__all__ = ["WitnessFollower"]

log = logging.getLogger(__name__)


class WitnessFollower:
    """Reads ``<prefix>.sealed`` (read_committed) and hands each checkpoint to the witness."""

    def __init__(self, settings: Settings, witness: Witness, *, group_id: str | None = None):
        self.settings = settings
        self.witness = witness
        self.group_id = group_id or f"tracevault-witness.{settings.topic_prefix}"

    def origin(self, partition: int) -> str:
        return log_origin(self.settings.log_origin, self.settings.topic_prefix, partition)

    def handle(self, partition: int, value: bytes) -> Cosigned | Refused | None:
        """Decide one checkpoint record; None when it is not the log's (see module doc)."""
        got = self.handle_batch([(partition, value)])
        return got[0] if got else None

    def handle_batch(self, records: Sequence[tuple[int, bytes]]) -> list[Cosigned | Refused]:
        """Decide the checkpoint records of one poll, in order, one decision per run of them.

        Consecutive records of a partition that chain (each starts where the last ended, on
        the same compact tree) are joined into one range and only its last checkpoint is
        cosigned: every record is still checked, but the witness pays one stored, fsynced
        cosignature per partition per poll instead of one per sequencer transaction, so it
        keeps up with the sequencer. A verifier needs a cosigned checkpoint at or after its
        run's end, not one per transaction. A record that does not chain (a re-read, a fork)
        ends the range and is decided on its own.
        """
        out: list[Cosigned | Refused] = []
        pending: dict[int, tuple[CheckpointRecord, CompactTree]] = {}
        for partition, value in records:
            checked = self._checked(partition, value)
            if checked is None:
                continue
            rec, tree = checked
            cur = pending.get(partition)
            if cur is not None and rec.start == cur[1].size and list(rec.prefix) == cur[1].hashes:
                joined = CheckpointRecord(
                    rec.note, cur[0].start, cur[0].prefix, cur[0].leaves + rec.leaves
                )
                pending[partition] = (joined, tree)
                continue
            if cur is not None:
                out.append(self._decide(partition, cur[0]))
            pending[partition] = (rec, tree)
        out.extend(self._decide(p, rec) for p, (rec, _) in pending.items())
        return out

    def _checked(self, partition: int, value: bytes) -> tuple[CheckpointRecord, CompactTree] | None:
        origin = self.origin(partition)
        try:
            rec = CheckpointRecord.decode(value)
            tree = rec.verify(self.witness.log_keys, origin).tree
        except LogError as e:
            self.witness.metrics.refused.labels(origin, "invalid").inc()
            log.warning("skipped a checkpoint record in partition %s: %s", partition, e)
            return None
        return rec, tree

    def _decide(self, partition: int, rec: CheckpointRecord) -> Cosigned | Refused:
        """``rec`` is checked (signed, its leaves reach its root); prove it from our size."""
        origin = self.origin(partition)
        latest = self.witness.latest(origin)
        size = latest[0] if latest is not None else 0
        try:
            if latest is not None and rec.start > size:
                raise self.witness.refuse(
                    "gap",
                    origin,
                    f"checkpoint {origin}@{rec.end} lists leaves from {rec.start}, the "
                    f"witness is at {size}: it cannot prove consistency across the gap",
                    rec.note,
                )
            proof: list[bytes] = []
            if latest is not None and size < rec.end:
                src = compact_range_source(rec.start, rec.prefix, rec.leaves)
                proof = consistency_proof(size, rec.end, src)
            return self.witness.add_checkpoint(
                rec.note, size, proof, proof_from_log=True, evidence=rec.encode()
            )
        except Refused as r:
            return r

    def run(self, stop: threading.Event, health: Health | None = None) -> None:
        """Follow until ``stop`` is set; a record that fails is logged, never fatal."""
        watch = KafkaWatch("witness")  # /healthz says 503 while no broker is reachable
        if health is not None:
            health.watch = watch
        conf = self.settings.kafka_config(
            **{
                "group.id": self.group_id,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "isolation.level": "read_committed",
                **watch.client_config(),
            }
        )
        consumer = Consumer(conf)
        consumer.subscribe([self.settings.topics.sealed])
        try:
            while not stop.is_set():
                msgs = consumer.consume(500, 0.5)
                batch = [r for r in map(self._record, msgs) if r is not None]
                if batch:
                    try:
                        self.handle_batch(batch)
                    except TraceVaultError as e:
                        # the store failed: stop before committing past what is not recorded
                        log.error("witness could not record its decisions: %s", e)
                        raise
                if msgs:
                    consumer.commit(asynchronous=False)
                if health is not None:  # a poll that returned, decided and committed
                    health.state = "following"
                    health.progressed()
        finally:
            consumer.close()

    def _record(self, m: Message) -> tuple[int, bytes] | None:
        """(partition, value) of a checkpoint record; None for anything else."""
        err = m.error()
        if err is not None:
            if err.code() != KafkaError._PARTITION_EOF:
                log.warning("witness consumer: %s", err)
            return None
        raw = m.headers() or []
        pairs = raw.items() if isinstance(raw, dict) else raw
        headers = [(k, v.encode() if isinstance(v, str) else v) for k, v in pairs]
        if not is_checkpoint_record(headers):
            return None
        value = m.value()
        partition = m.partition()
        if value is None or partition is None:
            return None
        return partition, value
