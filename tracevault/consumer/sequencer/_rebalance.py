"""Rebalance: which partitions' runs and trees this instance holds, restored from heads.

Split from ``_loop``: on assignment the book and the log's trees of exactly the new
partitions are read back from the heads topic and proven against ``sealed`` (heads/_proof.py,
docs/design.md "Sequencer rules"); on revoke or loss they are dropped (a loss also ends the
session, docs/liveness.md). librdkafka calls these from ``consume``, between batches, so no
transaction is open when they run.
"""

from __future__ import annotations

import logging

from confluent_kafka import Consumer, TopicPartition

from tracevault.consumer._memory import trim_heap
from tracevault.consumer.sequencer._clients import SessionClients
from tracevault.consumer.sequencer._log import PartitionLogs
from tracevault.consumer.sequencer._metrics import SequencerMetrics
from tracevault.consumer.sequencer._records import now_micros
from tracevault.consumer.sequencer._rules import RunBook
from tracevault.heads import prove_state, read_state
from tracevault.transparency import NoteVerifier, load_verifiers

__all__ = ["Rebalance"]

# the sequencer logs under one name wherever its code sits (log filters, tests)
log = logging.getLogger("tracevault.consumer.sequencer._loop")


class Rebalance(SessionClients):
    """The rebalance callbacks and the restore they (and a rewind) run."""

    logs: PartitionLogs
    metrics: SequencerMetrics
    partitions: int
    _book: RunBook | None
    _assigned: bool  # an assignment (maybe empty) came in this session
    _lost: bool

    def _restore_verifiers(self) -> list[NoteVerifier]:
        """The keys a checkpoint in ``sealed`` may be signed by to be this log's: the
        sequencer's own and every trusted log vkey (``log_vkeys``), so that after a key
        rotation the log signed with the old key is resumed, not taken for another's
        (docs/operations.md, "Key rotation"). None with a signer that cannot verify (KMS):
        then each checkpoint's leaves must grow its tree to the root it states."""
        own = getattr(self.logs.signer, "verifier", None)
        if own is None:
            return []
        out: list[NoteVerifier] = [own]
        items = [x.strip() for x in self.settings.log_vkeys.split(",") if x.strip()]
        for v in load_verifiers(items):
            if all(v.key_id != o.key_id or v.name != o.name for o in out):
                out.append(v)
        return out

    def _restore(self, partitions: list[int]) -> None:
        """The book and trees of ``partitions`` from the heads topic, each piece proven
        against ``sealed`` first (heads/_proof.py); what fails is an ALERT, counted, and
        rebuilt from ``sealed`` (docs/design.md, "Sequencer rules")."""
        assert self._book is not None
        s = self.settings
        state = read_state(
            s,
            partitions,
            timeout=self._txn_timeout_s + 30,
            stable=True,
            keep_heads=False,  # the columns are all a restore needs (docs/fleet.md)
        )
        proven = prove_state(
            s,
            state,
            partitions,
            partition_count=self.partitions,
            verifiers=self._restore_verifiers(),
            horizon_us=int((s.sequencer_finished_horizon_s + s.sequencer_clock_skew_s) * 1e6),
            now_us=now_micros(),
            timeout=self._txn_timeout_s + 30,
        )
        for bad in proven.rejected:
            self.metrics.rejected(bad.what)
            log.error(
                "ALERT sequencer %s: restored %s state of partition %d did not prove itself "
                "(%s); rebuilt from %s. Only the sequencer may write %s: apply `tracevault "
                "topics acls`",
                self.instance_id,
                bad.what,
                bad.partition,
                bad.why,
                s.topics.sealed,
                s.topics.heads,
            )
        self._book.restore_finished((k, p, c) for k, (p, c) in state.finished.items())
        self._book.restore(proven.heads, rewrite=proven.rebuilt, forget=proven.forget)
        self.logs.restore(partitions, proven.trees)
        n_open = len(proven.heads)
        del state, proven
        trim_heap()
        log.info(
            "sequencer %s restored %d open run heads and %d finished runs for partitions %s "
            "(log sizes %s)",
            self.instance_id,
            n_open,
            len(self._book.finished),
            partitions,
            {p: self.logs.trees[p].size for p in partitions},
        )

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if consumer is not self._consumer:
            return  # a dropped session's consumer, closing late: its book is gone
        self._assigned = True
        self.metrics.rebalances.inc()
        self._restore([tp.partition for tp in partitions])

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # Every batch commits before the next poll, so no transaction is open here.
        if consumer is not self._consumer:
            return
        self.metrics.rebalances.inc()
        assert self._book is not None
        self._book.drop_partitions(tp.partition for tp in partitions)
        self.logs.drop(tp.partition for tp in partitions)
        log.info("sequencer %s revoked %s", self.instance_id, [tp.partition for tp in partitions])

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if consumer is not self._consumer:
            return
        self.metrics.rebalances.inc()
        assert self._book is not None
        self._book.drop_partitions(tp.partition for tp in partitions)
        self.logs.drop(tp.partition for tp in partitions)
        log.warning("sequencer %s lost %s", self.instance_id, [tp.partition for tp in partitions])
        # The group session expired (a broker outage): this static member would come back
        # fenced, and a transaction with its metadata was seen to block; start afresh.
        self._lost = True
        self.watch.trouble()
