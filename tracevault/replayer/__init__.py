"""Reading a run back, verifying it, re-running it deterministically, diffing two runs.

Import from here, never from the private modules::

    from tracevault.replayer import LogPolicy, load_run, verify, replay

    run = load_run(settings, "run-42", source="archive")
    report = verify(run, log=LogPolicy.of(settings))  # raises ChainError/LogError: seq, object
    assert report.log_checked                    # without a trusted key: "unverified"
    result = replay(report.events, my_agent)     # raises ReplayDivergence at the first difference
    every = replay(report.events, my_agent, keep_going=True).divergences   # all of them

The same as commands: ``tracevault replay show|verify|run|diff|export|batch``. A fork
(``replay run --until N --then live``) records a new run, so it lives apart, in
``tracevault.replayer.fork`` (it imports the producer and the Kafka client; this does not).
"""

from tracevault.errors import ChainError, ReplayDivergence
from tracevault.recorded_error import RecordedError
from tracevault.replayer._aligndiff import FieldDiff, RunAlignment, StepDiff, align_runs
from tracevault.replayer._batch import BatchItem, BatchReport, run_batch
from tracevault.replayer._bundle import export_bundle, verify_bundle
from tracevault.replayer._checks import RECORD_CHECKS
from tracevault.replayer._diff import json_diff
from tracevault.replayer._load import load_run
from tracevault.replayer._log import EndRule, LogPolicy
from tracevault.replayer._replay import Agent, AsyncAgent, areplay, replay
from tracevault.replayer._results import (
    DivergenceReport,
    LoadedRun,
    ReplayResult,
    SegmentInfo,
    StepSummary,
    VerifyReport,
)
from tracevault.replayer._rundiff import RunDiff, RunDiffSide, diff_runs
from tracevault.replayer._tree import RunNode, TreeReplay, replay_tree, run_tree
from tracevault.replayer._verify import verify

__all__ = [
    # re-run
    "Agent",
    "AsyncAgent",
    "RecordedError",
    "ReplayDivergence",
    "areplay",
    "replay",
    # results
    "DivergenceReport",
    "LoadedRun",
    "ReplayResult",
    "SegmentInfo",
    "StepSummary",
    "VerifyReport",
    # loading and verification
    "ChainError",
    "RECORD_CHECKS",
    "EndRule",
    "LogPolicy",
    "load_run",
    "verify",
    # diff
    "RunDiff",
    "RunDiffSide",
    "diff_runs",
    "json_diff",
    "FieldDiff",
    "RunAlignment",
    "StepDiff",
    "align_runs",
    # sub-agent trees
    "RunNode",
    "TreeReplay",
    "replay_tree",
    "run_tree",
    # evidence bundles
    "export_bundle",
    "verify_bundle",
    # batch
    "BatchItem",
    "BatchReport",
    "run_batch",
]
