"""The sequencer's public surface is pinned: a change to it is deliberate."""

from __future__ import annotations

import tracevault.heads
import tracevault.services.sequencer


def test_sequencer_exports() -> None:
    assert set(tracevault.services.sequencer.__all__) == {
        "Sequencer", "SequencerMetrics", "default_instance_id",
        "BatchOutput", "RunBook", "DlqReason", "DlqRecord", "DLQ_HEADER_PREFIX",
        "GAP_AGENT_ID", "gap_event",
    }  # fmt: skip
    for name in tracevault.services.sequencer.__all__:
        assert getattr(tracevault.services.sequencer, name) is not None


def test_heads_exports() -> None:
    assert set(tracevault.heads.__all__) == {
        "GapRange", "Head", "HeldEvent", "RunLocation", "decode_head", "encode_head",
        "heads_partition_count", "locate_run", "read_heads", "read_heads_and_trees",
        "FINISHED_KEY_PREFIX", "FinishedChunk", "fingerprint", "is_finished_key",
        "HeadsState", "find_head", "read_state",
        "ProvenState", "Rejection", "prove_state",
        "head_v1_header", "plain_head_value",
    }  # fmt: skip
    for name in tracevault.heads.__all__:
        assert getattr(tracevault.heads, name) is not None
