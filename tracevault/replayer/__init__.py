"""Reading a run back, verifying it, re-running it deterministically, diffing two runs.

Import from here, never from the modules of its rooms::

    from tracevault.replayer import Trust, verify_run, replay

    trust = Trust.of(settings)                   # the deployment's keys, as `replay verify`
    run, report = verify_run(settings, "run-42", trust)   # raises ChainError/LogError
    assert report.ok                             # no key, no topic to compare: "unverified"
    result = replay(report.events, my_agent)     # raises ReplayDivergence at the first difference
    every = replay(report.events, my_agent, keep_going=True).divergences   # all of them

The same as commands: ``tracevault replay show|verify|run|diff|export|batch``. A fork
(``replay run --until N --then live``) records a new run, so it lives apart, in
``tracevault.replayer.investigate.fork`` (it imports the producer and the Kafka client; this
does not).

The rooms, by job (docs/design.md, "The replayer's rooms"): ``load/`` (read and verify a run),
``rerun/`` (re-run agent code against it), ``investigate/`` (run diffs, trees, forks),
``batch/`` (every run of a window) and ``export/`` (evidence bundles). Beneath them all, at
this level: the typed results (``_results``), the record views (``_records``) and the JSON
diff of two payloads (``_json_diff``); above them: the ``tracevault replay`` and ``erase``
commands with their options (``_cliopts``), modes (``_run_modes``, ``_verified``) and views.
"""

from tracevault.errors import ChainError, ReplayDivergence
from tracevault.recorded_error import RecordedError
from tracevault.replayer._json_diff import json_diff
from tracevault.replayer._results import (
    DivergenceReport,
    LoadedRun,
    ReplayResult,
    SegmentInfo,
    StepSummary,
    VerifyReport,
)
from tracevault.replayer.batch.jobs import BatchItem, BatchReport, run_batch
from tracevault.replayer.export.bundle import export_bundle, verify_bundle
from tracevault.replayer.investigate.aligned_diff import (
    FieldDiff,
    RunAlignment,
    StepDiff,
    align_runs,
)
from tracevault.replayer.investigate.run_diff import RunDiff, RunDiffSide, diff_runs
from tracevault.replayer.investigate.tree import RunNode, TreeReplay, replay_tree, run_tree
from tracevault.replayer.load.checks import RECORD_CHECKS
from tracevault.replayer.load.log_policy import EndRule, LogPolicy
from tracevault.replayer.load.source import load_run
from tracevault.replayer.load.trust import Trust, verify_run
from tracevault.replayer.load.verify import verify
from tracevault.replayer.rerun.replay import Agent, AsyncAgent, areplay, replay

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
    "Trust",
    "verify",
    "verify_run",
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
