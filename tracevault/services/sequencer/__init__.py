"""The exactly-once sequencer: seals every raw event into its run's hash chain.

``tracevault sequencer`` runs it as a service; embedders use :class:`Sequencer` directly.
Rules per run are in ``_rules`` and ``_gaps`` (and listed in ``tracevault sequencer --help``),
the service in ``_loop`` (the one service runtime, ``tracevault.services.runtime``, in its
transactional commit mode, and the step it runs, ``_step``), its restore in ``_rebalance``,
what a transaction holds in ``_transaction`` (with ``_produce``, ``_encode``, ``_offsets``), the GAP
marker rule in ``_records``: a gap of missing seqs
``a..b`` is sealed as one GAP event per missing seq, each carrying
``{"missing_from": a, "missing_to": b}``, so a run's sealed seqs are always ``0, 1, 2, ...``.
"""

from tracevault.services.sequencer._loop import Sequencer, default_instance_id
from tracevault.services.sequencer._metrics import SequencerMetrics
from tracevault.services.sequencer._records import (
    DLQ_HEADER_PREFIX,
    GAP_AGENT_ID,
    DlqReason,
    DlqRecord,
    gap_event,
)
from tracevault.services.sequencer._rules import BatchOutput, RunBook

__all__ = [
    # service
    "Sequencer",
    "SequencerMetrics",
    "default_instance_id",
    # rules and records
    "BatchOutput",
    "RunBook",
    "DlqReason",
    "DlqRecord",
    "DLQ_HEADER_PREFIX",
    "GAP_AGENT_ID",
    "gap_event",
]
