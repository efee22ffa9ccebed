"""The public surface of tracevault.replayer is pinned: a change to it is deliberate."""

from __future__ import annotations

import tracevault.replayer


def test_replayer_exports() -> None:
    assert set(tracevault.replayer.__all__) == {
        "Agent", "AsyncAgent", "RecordedError", "ReplayDivergence", "areplay", "replay",
        "DivergenceReport", "LoadedRun", "ReplayResult", "SegmentInfo", "StepSummary",
        "VerifyReport",
        "ChainError", "RECORD_CHECKS", "EndRule", "LogPolicy", "load_run", "verify",
        "Trust", "verify_run",
        "RunDiff", "RunDiffSide", "diff_runs", "json_diff",
        "FieldDiff", "RunAlignment", "StepDiff", "align_runs",
        "RunNode", "TreeReplay", "replay_tree", "run_tree",
        "export_bundle", "verify_bundle",
        "BatchItem", "BatchReport", "run_batch",
    }  # fmt: skip
    for name in tracevault.replayer.__all__:
        assert getattr(tracevault.replayer, name) is not None
