"""The witness service: a step of the one service runtime that follows ``<prefix>.sealed``.

The runtime (:class:`ConsumerRuntime`, docs/liveness.md) owns the consumer session: static
membership, assignment and revocation, polls, offset commits under a deadline, broker outages
(a new session, with backoff), fencing (exit 5), lag, ``/healthz``. This step only says what
a batch means: its checkpoint records go to :class:`CheckpointRecords`, whose decisions are
stored (fsynced) before ``take`` returns, and the offsets read are then committable. A crash
re-reads what was not committed, and re-reading is harmless (docs/log.md, "Witness").
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from confluent_kafka import KafkaError, Message

from tracevault.config import Settings
from tracevault.errors import TraceVaultError
from tracevault.services.runtime import ConsumerRuntime, Subscription
from tracevault.services.witness._records import CheckpointRecords
from tracevault.transparency import is_checkpoint_record
from tracevault.witness import ArchiveTiles, Cosigned, Witness

__all__ = ["FollowerStats", "WitnessFollower"]

log = logging.getLogger(__name__)

_POLL_S = 0.5
_SESSION_TIMEOUT_MS = 10_000  # as the sequencer's and the archiver's (librdkafka's: 45 s)
_MAX_POLL_INTERVAL_MS = 60_000  # the group's rebalance timeout (librdkafka's: 5 min)


@dataclass(slots=True)
class FollowerStats:
    """What the follower did since it started, for its report lines."""

    records: int = 0  # read from the topic, checkpoint records or not
    checkpoints: int = 0  # checkpoint records handed to the witness
    cosigned: int = 0  # new cosignatures stored
    refused: int = 0  # decisions that refused (old, gap, fork, rollback ...)


class WitnessFollower:
    """Reads ``<prefix>.sealed`` (read_committed) and hands each checkpoint to the witness;
    ``run()`` until ``stop()``. A step of the service runtime, holding its parts: the
    runtime and the record decisions (:class:`CheckpointRecords`).

    ``archive``: the archive's tiles, read only to prove consistency across a gap.
    ``instance_id``: the static group member (default ``witness.<key name>``): one witness
    key, one store, one member, so a second process with it is fenced (exit 5), and a
    restarted witness takes its dead predecessor's place at once. A dynamic member that died
    held every partition until the group's rebalance gave up on it: up to
    ``max.poll.interval.ms`` (librdkafka's 5 min) while its last JoinGroup was pending; the
    short session and poll interval bound what an instance id that does not come back (a
    renamed witness) holds.
    """

    def __init__(
        self,
        settings: Settings,
        witness: Witness,
        *,
        group_id: str | None = None,
        archive: ArchiveTiles | None = None,
        instance_id: str | None = None,
    ) -> None:
        self.settings = settings
        self.witness = witness
        self.archive = archive
        self.group_id = group_id or f"tracevault-witness.{settings.topic_prefix}"
        self.instance_id = instance_id or f"witness.{witness.signer.name}"
        self.records = CheckpointRecords(settings, witness, archive)
        self.stats = FollowerStats()
        self.runtime = ConsumerRuntime(
            settings,
            Subscription(
                name="witness",
                topic=settings.topics.sealed,
                group_id=self.group_id,
                session_timeout_ms=_SESSION_TIMEOUT_MS,
                instance_id=self.instance_id,
                fenced=f"the witness was fenced: another witness runs with group.instance.id "
                f"{self.instance_id} in group {self.group_id}; this one stopped",
                config={
                    "isolation.level": "read_committed",
                    "max.poll.interval.ms": _MAX_POLL_INTERVAL_MS,
                },
            ),
        )
        self.health = self.runtime.health
        self._consumed: dict[int, int] = {}  # partition -> the next offset after what was read

    def stop(self) -> None:
        """Ask ``run()`` to commit what was decided and return (safe from a signal handler)."""
        self.runtime.stop()

    def run(self) -> None:
        """Follow until ``stop()``; a record that fails is logged, never fatal. A store that
        fails stops it before anything past the failure is committed.

        A broker outage, a coordinator moving or loading, a lost member id are ridden out
        with a new session or a deferred commit, never a dead witness (docs/liveness.md)."""
        log.info("witness %s following %s", self.witness.signer.name, self.settings.topics.sealed)
        self.runtime.run(self)
        self.report("stopped")

    # -- the step: what the runtime calls -------------------------------------------------

    def restore(self, timeout: float) -> None:
        """Nothing to read from the cluster: the witness's state is its own store."""

    def take(self, batch: list[Message]) -> None:
        got = [r for r in map(self._record, batch) if r is not None]
        self.stats.records += len(batch)
        if not got:
            return
        try:
            decided = self.records.handle_batch([(p, v) for p, v, _ in got], [o for _, _, o in got])
        except TraceVaultError as e:
            # the store failed: stop before committing past what is not recorded
            log.error("witness could not record its decisions: %s", e)
            raise
        self.stats.checkpoints += len(got)
        for d in decided:
            if not isinstance(d, Cosigned):
                self.stats.refused += 1
            elif d.new:
                self.stats.cosigned += 1

    def flush_due(self, *, caught_up: bool) -> None:
        """Nothing is held: each decision is stored before ``take`` returns."""

    def committable(self) -> dict[int, int]:
        return dict(self._consumed)

    def release(self, partitions: set[int] | None) -> None:
        """Forget what was read of ``partitions`` (None: all): decisions are stored, and
        what is uncommitted is re-read by the next owner."""
        if partitions is None:
            self._consumed.clear()
        for p in partitions or ():
            self._consumed.pop(p, None)

    def drain(self) -> None:
        """Nothing is held (see ``flush_due``)."""

    def busy(self) -> bool:
        return False

    def poll_s(self) -> float:
        return _POLL_S

    def report(self, state: str) -> None:
        st = self.stats
        log.info(
            "witness %s: %d records read, %d checkpoint records, %d cosigned, %d refused",
            "following" if state == "running" else state,
            st.records,
            st.checkpoints,
            st.cosigned,
            st.refused,
        )

    def _record(self, m: Message) -> tuple[int, bytes, int] | None:
        """(partition, value, offset) of a checkpoint record; None for anything else."""
        err = m.error()
        if err is not None:
            if err.code() != KafkaError._PARTITION_EOF:
                self.runtime.kafka_error(err)  # a fencing or fatal error ends the session
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
