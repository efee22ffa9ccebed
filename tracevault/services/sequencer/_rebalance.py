"""Restore: the runs and trees of the partitions this instance holds, read back from heads.

On assignment (and after a rewind) the book and the log's trees of exactly those partitions
are read back from the heads topic and proven against ``sealed`` (heads/_proof.py,
docs/design.md "Sequencer rules"); on revoke or loss the step drops them (a loss also ends
the session, docs/liveness.md). librdkafka calls the runtime's callbacks from ``consume``,
between batches, so no transaction is open when a restore runs. A part of the sequencer's
step (``_step``), holding what a restore needs.
"""

from __future__ import annotations

import logging

from tracevault.config import Settings
from tracevault.heads import prove_state, read_state
from tracevault.services.runtime import trim_heap
from tracevault.services.sequencer._log import PartitionLogs
from tracevault.services.sequencer._metrics import SequencerMetrics
from tracevault.services.sequencer._records import now_micros
from tracevault.services.sequencer._rules import RunBook
from tracevault.transparency import NoteVerifier, load_verifiers

__all__ = ["Restorer"]

# the sequencer logs under one name wherever its code sits (log filters, tests)
log = logging.getLogger("tracevault.services.sequencer._loop")


class Restorer:
    """Reads a book's partitions back from the heads topic, each piece proven first."""

    def __init__(
        self, settings: Settings, instance_id: str, logs: PartitionLogs, metrics: SequencerMetrics
    ) -> None:
        self.settings = settings
        self.instance_id = instance_id
        self.logs = logs
        self.metrics = metrics

    @property
    def _txn_timeout_s(self) -> float:
        return self.settings.sequencer_transaction_timeout_ms / 1000.0

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

    def restore(self, book: RunBook, partitions: list[int], partition_count: int) -> None:
        """The book and trees of ``partitions`` from the heads topic, each piece proven
        against ``sealed`` first (heads/_proof.py); what fails is an ALERT, counted, and
        rebuilt from ``sealed`` (docs/design.md, "Sequencer rules")."""
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
            partition_count=partition_count,
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
        book.restore_finished((k, p, c) for k, (p, c) in state.finished.items())
        book.restore(proven.heads, rewrite=proven.rebuilt, forget=proven.forget)
        self.logs.restore(partitions, proven.trees)
        n_open = len(proven.heads)
        del state, proven
        trim_heap()
        log.info(
            "sequencer %s restored %d open run heads and %d finished runs for partitions %s "
            "(log sizes %s)",
            self.instance_id,
            n_open,
            len(book.finished),
            partitions,
            {p: self.logs.trees[p].size for p in partitions},
        )
