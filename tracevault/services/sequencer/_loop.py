"""The transactional loop: consume raw, apply the rules, write everything in one transaction.

Per batch (docs/kafka-local.md's exactly-once pattern, with its abort path):

1. ``consume`` up to ``sequencer_batch_size`` raw records (``read_committed``, no auto
   commit); apply the rules (``_rules``) and, when a gap may have timed out, the gap sweep.
2. ``begin_transaction``; produce the sealed records (key = run_id, partition = the raw
   record's partition index); per sealed partition written, one signed checkpoint record
   after its records and its new compact tree to heads (``_log``, docs/log.md "Sequencer");
   the DLQ records; ``flush`` so each sealed record's exact offset is known: from the
   delivery reports of each partition's first event and checkpoint (our records of a
   partition are consecutive; their distance proves it), or, once another producer's record
   was seen inside a transaction, from a report per tracked record (docs/design.md,
   "Sequencer batch protocol").
3. Produce one heads record per touched run (carrying those offsets) to the same partition
   index; ``send_offsets_to_transaction`` with the consumer's positions and group metadata;
   ``commit_transaction``.

Errors, as librdkafka classifies them: retriable → the same call again; ``txn_requires_abort``
→ ``abort_transaction``, then rewind the consumer to the committed offsets and restore the
run book from the heads topic (the book is never half-applied); fatal → a new producer
(``init_transactions`` fences nothing but our own old session), then the same rewind; fenced
(another process took our ``transactional.id`` or ``group.instance.id``) → stop with
:class:`FencedError`. A crash at any instant leaves either the whole batch (sealed,
checkpoints, heads and trees, DLQ and offsets) or none of it.

Liveness (docs/liveness.md): every client call that can hang runs through the runtime's
:class:`BlockingCalls` with a deadline (``consume`` and ``flush``, librdkafka's own poll
loops, run inline in short slices). A call past its deadline, a fatal consumer error, or a
fencing that follows a broker outage (librdkafka's static member outlives its session and
calls itself fenced) ends the Kafka *session*: both clients are abandoned and a new consumer
and transactional producer start over exactly as a fresh process would
(``init_transactions`` aborts the old open transaction, the assignment restores the heads
and the log's trees). Only a fencing without an outage is another live process with our id:
:class:`FencedError`.

Identity: ``transactional.id = <prefix>.sequencer.<instance_id>`` and the consumer's
``group.instance.id = <instance_id>`` (static membership), so a restarted instance fences its
own zombie and takes its partitions back without waiting for a session timeout. Partition
movements between instances are fenced by the group generation in the offsets commit
(KIP-447). On assignment an instance restores the heads of exactly its new partitions.

This module is the service: :class:`Sequencer` holds the one service runtime
(:class:`~tracevault.services.runtime.ConsumerRuntime` in its transactional commit mode: the
session, the transaction around each batch, its abort path and fencing) and the sequencer's
step (``_step``: the rules, the C path, the writer of a transaction's records, the restore),
and plugs one into the other. Nothing here runs per event.
"""

from __future__ import annotations

import logging
import re
import socket

from tracevault.config import Settings
from tracevault.services.runtime import ConsumerRuntime, Health, KafkaWatch, Subscription
from tracevault.services.sequencer._log import PartitionLogs, signer_from_settings
from tracevault.services.sequencer._metrics import SequencerMetrics
from tracevault.services.sequencer._step import SequencerStep
from tracevault.transparency import NoteSigner

__all__ = ["Sequencer", "default_instance_id"]

log = logging.getLogger(__name__)

_LOG_EVERY_S = 10.0


def default_instance_id() -> str:
    """The host name, reduced to the characters Kafka ids and our settings accept."""
    return re.sub(r"[^A-Za-z0-9._-]", "-", socket.gethostname()) or "sequencer"


class Sequencer:
    """One sequencer instance. ``run()`` blocks until ``stop()`` (or a fatal error).

    Opens no connection until ``run()``; ``stop()`` is safe from a signal handler or another
    thread and lets the current transaction finish first.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        instance_id: str | None = None,
        metrics: SequencerMetrics | None = None,
        signer: NoteSigner | None = None,
    ) -> None:
        self.settings = settings
        # No key, no start: every transaction signs its partitions' checkpoints.
        self.logs = PartitionLogs(settings, signer or signer_from_settings(settings))
        self.instance_id = instance_id or settings.sequencer_instance_id or default_instance_id()
        self.metrics = metrics or SequencerMetrics(self.instance_id)
        s = settings
        self.runtime = ConsumerRuntime(
            settings,
            Subscription(
                name=f"sequencer {self.instance_id}",
                topic=s.topics.raw,
                group_id=self.group_id,
                session_timeout_ms=s.sequencer_session_timeout_ms,
                instance_id=self.instance_id,
                fenced=(
                    f"sequencer {self.instance_id} was fenced: another process runs with "
                    f"transactional.id {self.transactional_id} or group.instance.id "
                    f"{self.instance_id}; this one stopped. Give each instance its own "
                    "--instance-id"
                ),
                restore_timeout_s=15.0,
                config={"isolation.level": "read_committed"},
                transactional_id=self.transactional_id,
                transaction_timeout_ms=s.sequencer_transaction_timeout_ms,
                producer_config={
                    "partitioner": "murmur2_random",
                    "linger.ms": 2,
                    "queue.buffering.max.messages": max(100_000, 4 * s.sequencer_batch_size),
                    "log_level": 3,
                },
                batch=s.sequencer_batch_size,
                fill=True,
                report_every_s=_LOG_EVERY_S,
            ),
        )
        rt = self.runtime
        self.step = SequencerStep(
            settings,
            instance_id=self.instance_id,
            logs=self.logs,
            metrics=self.metrics,
            watch=rt.watch,
            calls=rt.calls,
            stopping=rt.stopping,
            on_error=rt.kafka_error,
        )

    @property
    def transactional_id(self) -> str:
        return f"{self.settings.topic_prefix}.sequencer.{self.instance_id}"

    @property
    def group_id(self) -> str:
        return self.settings.sequencer_group_id

    @property
    def health(self) -> Health:
        return self.runtime.health

    @property
    def watch(self) -> KafkaWatch:
        return self.runtime.watch

    def stop(self) -> None:
        self.runtime.stop()

    def run(self) -> None:
        """Sessions until ``stop()``: a session that cannot go on is replaced by a new one."""
        log.info(
            "sequencer %s starting (group %s, transactional.id %s)",
            self.instance_id,
            self.group_id,
            self.transactional_id,
        )
        try:
            self.runtime.run(self.step)
        finally:
            self.step.report("stopped")  # its last counters, as the archiver and witness do
            log.info("sequencer %s stopped", self.instance_id)
