"""``replay batch`` on a real local Dask cluster, over an archive the real pipeline wrote.

Runs are recorded by the Recorder through Kafka, sealed by the Sequencer and archived by the
Archiver (module fixture); the cluster is a real `dask scheduler` and `dask worker` started
by the session fixture. The workers read the archive directly (no Kafka). The regression
question: replaying with ``research_agent`` must find the runs recorded by its variants and
group them by first divergence; the JUnit file must validate; broken runs and broken agents
are reported as errors, never a crash.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
import xmlschema
from click.testing import CliRunner
from rich.cells import cell_len

from tests.conftest import unique_name
from tests.replayer import agents
from tests.replayer.archiving import write_signed_run
from tests.replayer.conftest import recorded
from tests.replayer.dask_cluster import ROOT, LocalDaskCluster
from tests.replayer.pipeline import fresh_settings, record_live, sequencer_running, wait_all_sealed
from tests.replayer.recording import T0, record, seal
from tracevault.archive import open_store
from tracevault.archive._filestore import FileStore
from tracevault.archive.layout import run_prefix
from tracevault.cli import tracevault
from tracevault.config import Settings
from tracevault.replayer.batch.jobs import chunked
from tracevault.schemas import micros_to_datetime
from tracevault.services.archiver import Archiver

AGENT = "tests.replayer.agents:research_agent"
SCHEMA = xmlschema.XMLSchema(str(Path(__file__).with_name("junit.xsd")))
PROMPT_PATH = "$.request.messages[0].content"


@dataclass(frozen=True)
class PipelineArchive:
    url: str
    prefix: str  # the deployment's topic prefix: its log's origin, which batch checks (L1)
    bootstrap: str  # its brokers: the sealed topic batch holds the archive to (L5)
    ok: tuple[str, ...]
    prompt: tuple[str, ...]
    seed: tuple[str, ...]
    clock: tuple[str, ...]

    @property
    def all(self) -> tuple[str, ...]:
        return (*self.ok, *self.prompt, *self.seed, *self.clock)


@pytest.fixture(scope="module")
def pipeline_archive(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> PipelineArchive:
    """Seven runs through Recorder -> Kafka -> Sequencer -> Archiver into a file:// archive:
    three by research_agent, and four by variants that each change one thing."""
    base = tmp_path_factory.mktemp("batch")
    settings = fresh_settings(kafka_bootstrap, base, "tvbatch", partitions=2)
    tag = unique_name("b")
    plan = {
        "ok": (agents.research_agent, 3),
        "prompt": (agents.changed_prompt_agent, 2),
        "seed": (agents.other_seed_agent, 1),
        "clock": (agents.extra_clock_agent, 1),
    }
    ids = {name: tuple(f"{tag}-{name}-{i}" for i in range(n)) for name, (_, n) in plan.items()}
    with sequencer_running(settings):
        for name, (agent, _) in plan.items():
            for rid in ids[name]:
                record_live(settings, agent, agents.INPUT, rid)
        wait_all_sealed(settings, [r for rs in ids.values() for r in rs])
    Archiver(settings).run(until_idle=1.0)
    return PipelineArchive(settings.archive_url, settings.topic_prefix, kafka_bootstrap, **ids)


def _window() -> list[str]:
    today = datetime.now(UTC).date()  # the pipeline archived the runs today (UTC)
    return ["--since", (today - timedelta(days=1)).isoformat(), "--until", today.isoformat()]


def _batch(
    url: str,
    *args: str,
    agent: str = AGENT,
    s3: str | None = None,
    pipeline: PipelineArchive | None = None,
) -> Any:
    flags = ["replay", "--archive-url", url]
    prefix = None if pipeline is None else pipeline.prefix
    if pipeline is not None:  # a pipeline of its own (else the default, as write_signed_run)
        flags = ["--bootstrap-servers", pipeline.bootstrap, "--prefix", pipeline.prefix, *flags]
    if s3 is not None:
        flags += ["--s3-endpoint-url", s3]
    # a hand-written archive has no sealed topic to prove it current: accepted knowingly
    offline = ["--offline"] if prefix is None else []
    res = CliRunner().invoke(tracevault, [*flags, "batch", "--agent", agent, *args, *offline])
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise res.exception
    return res


def _junit(path: Path) -> Any:
    SCHEMA.validate(str(path))  # raises naming the element and the rule it breaks
    import xml.etree.ElementTree as ET

    return ET.parse(path).getroot()


def test_dask_batch_finds_and_groups_what_the_agent_does_differently(
    pipeline_archive: PipelineArchive, dask_cluster: LocalDaskCluster, tmp_path: Path
) -> None:
    arch = pipeline_archive
    junit = tmp_path / "replay.xml"
    res = _batch(arch.url, "--engine", "dask", "--address", dask_cluster.address,
                 "--chunk-size", "3", "--junit", str(junit), "--json", *_window(),
                 pipeline=arch)  # fmt: skip
    assert res.exit_code == 1, res.output
    out = json.loads(res.output)
    assert out["engine"].startswith(f"dask ({dask_cluster.address}")
    assert out["totals"] == {"runs": 7, "ok": 3, "diverged": 4, "verify_failed": 0, "error": 0}
    status = {r["run_id"]: r["status"] for r in out["runs"]}
    assert status == {rid: "ok" if rid in arch.ok else "diverged" for rid in arch.all}
    groups = [(g["kind"], g["path"], g["count"], g["seqs"], sorted(g["examples"]))
              for g in out["groups"]]  # fmt: skip
    assert groups == [
        ("MODEL_CALL", PROMPT_PATH, 2, [3], sorted(arch.prompt)),
        ("CLOCK", "$.kind", 1, [4], list(arch.clock)),
        ("MODEL_CALL", "$.seed", 1, [3], list(arch.seed)),
    ]
    assert all(r["seconds"] > 0 for r in out["runs"])

    root = _junit(junit)
    (suite,) = root.findall("testsuite")
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("7", "4", "0")
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    assert set(cases) == set(arch.all)
    for rid in arch.ok:
        assert list(cases[rid]) == []
    (failure,) = cases[arch.seed[0]]
    assert failure.tag == "failure" and failure.get("type") == "diverged"
    assert failure.get("message", "").startswith("diverged at seq 3 (MODEL_CALL $.seed)")
    assert "$.seed: expected 8, got 7" in (failure.text or "")


def test_local_workers_and_dask_give_the_same_report(
    pipeline_archive: PipelineArchive, dask_cluster: LocalDaskCluster
) -> None:
    arch = pipeline_archive
    local = json.loads(
        _batch(arch.url, "--workers", "2", "--json", *_window(), pipeline=arch).output
    )
    dask = json.loads(_batch(arch.url, "--engine", "dask", "--address", dask_cluster.address,
                             "--json", *_window(), pipeline=arch).output)  # fmt: skip
    assert local["engine"] == "local (2 workers)"

    def strip(report: dict[str, Any]) -> Any:
        return [{k: v for k, v in r.items() if k != "seconds"} for r in report["runs"]]

    assert strip(local) == strip(dask) and local["groups"] == dask["groups"]


def test_summary_table_reads_at_80_columns(
    pipeline_archive: PipelineArchive, dask_cluster: LocalDaskCluster
) -> None:
    env = {**os.environ, "COLUMNS": "80", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "tracevault", "--bootstrap-servers", pipeline_archive.bootstrap,
         "--prefix", pipeline_archive.prefix, "replay", "--archive-url", pipeline_archive.url,
         "batch", "--agent", AGENT, "--engine", "dask", "--address", dask_cluster.address,
         *_window()],
        check=False, capture_output=True, text=True, env=env, cwd=ROOT, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    wide = [line for line in proc.stdout.splitlines() if cell_len(line) > 80]
    assert not wide, "\n".join(wide)
    assert "by first divergence" in proc.stdout and "$.request.messages[0].content" in proc.stdout
    assert "ok=3 diverged=4 verify_failed=0 error=0" in proc.stdout
    for rid in pipeline_archive.all:
        assert rid in proc.stdout


def test_unreadable_run_and_exiting_agent_are_errors_not_crashes(
    pipeline_archive: PipelineArchive, dask_cluster: LocalDaskCluster, tmp_path: Path
) -> None:
    src = Path(pipeline_archive.url.removeprefix("file://"))
    copy = tmp_path / "archive"
    shutil.copytree(src, copy)
    broken = pipeline_archive.ok[0]
    # the run's index object in the tiled log (docs/log.md, "Archive") made to state another
    # chain head: the run fails check A4, and the runs around it (sharing its bundles) do not
    fs = FileStore(copy)
    (seg_key, *_) = [i.key for i in fs.list(run_prefix(broken)) if "/log-" in i.key]
    seg = fs.path_of(seg_key)
    seg.chmod(0o644)
    index = json.loads(seg.read_bytes())
    index["head"] = "00" * 32
    seg.write_text(json.dumps(index))
    url = f"file://{copy}"
    junit = tmp_path / "broken.xml"
    addr = ["--engine", "dask", "--address", dask_cluster.address]
    res = _batch(url, *addr, "--junit", str(junit), "--json", *_window(),
                 pipeline=pipeline_archive)  # fmt: skip
    assert res.exit_code == 1, res.output
    out = json.loads(res.output)
    by_run = {r["run_id"]: r for r in out["runs"]}
    assert by_run[broken]["status"] == "verify_failed"
    assert by_run[broken]["object"] == seg_key
    assert by_run[pipeline_archive.ok[1]]["status"] == "ok"
    (error,) = next(c for c in _junit(junit).iter("testcase") if c.get("name") == broken)
    assert error.tag == "error" and error.get("type") == "verify_failed"
    assert seg_key in error.get("message", "")

    junit = tmp_path / "exits.xml"
    agent = "tests.replayer.batch_agents:exiting_agent"
    res = _batch(url, *addr, "--junit", str(junit), "--json", *_window(), agent=agent,
                 pipeline=pipeline_archive)  # fmt: skip
    assert res.exit_code == 1, res.output
    out = json.loads(res.output)
    assert out["totals"]["runs"] == 7 and out["totals"]["ok"] == 0
    errors = [r for r in out["runs"] if r["status"] == "error"]
    assert len(errors) == 6 and all(r["detail"] == "SystemExit: 3" for r in errors)
    suite = _junit(junit).find("testsuite")
    assert suite is not None and suite.get("errors") == "7"


def test_an_agent_the_workers_cannot_import_is_a_usage_error(
    pipeline_archive: PipelineArchive, dask_cluster: LocalDaskCluster, tmp_path: Path
) -> None:
    # importable here (this directory is the client's working directory), not on the workers
    (tmp_path / "only_here.py").write_text("def agent(i, edges):\n    return None\n")
    proc = subprocess.run(
        [sys.executable, "-m", "tracevault", "--bootstrap-servers", pipeline_archive.bootstrap,
         "--prefix", pipeline_archive.prefix, "replay", "--archive-url", pipeline_archive.url,
         "batch", "--agent", "only_here:agent", "--engine", "dask", "--address",
         dask_cluster.address, *_window()],
        check=False, capture_output=True, text=True, cwd=tmp_path, timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "on the Dask workers" in proc.stderr and "only_here" in proc.stderr


def test_s3_credentials_and_endpoint_travel_as_settings(
    s3_endpoint: str, dask_cluster: LocalDaskCluster
) -> None:
    # The workers have no AWS credentials of their own (see dask_cluster.worker_env).
    bucket = f"tv-batch-{os.urandom(6).hex()}"
    boto3.client("s3", endpoint_url=s3_endpoint).create_bucket(
        Bucket=bucket, ObjectLockEnabledForBucket=True
    )
    url = f"s3://{bucket}/archive"
    store = open_store(url, Settings(s3_endpoint_url=s3_endpoint))
    for rid in ("s3-a", "s3-b"):
        write_signed_run(store, seal(recorded(rid)))
    store.close()
    day = micros_to_datetime(T0).date().isoformat()
    args = ["--engine", "dask", "--address", dask_cluster.address, "--json",
            "--since", day, "--until", day]  # fmt: skip
    res = _batch(url, *args, s3=s3_endpoint)
    assert res.exit_code == 1, res.output
    runs = json.loads(res.output)["runs"]
    assert [r["status"] for r in runs] == ["error", "error"]
    assert "credentials" in runs[0]["detail"]
    res = _batch(url, *args, "--ship-credentials", s3=s3_endpoint)
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["totals"]["ok"] == 2


def test_chunks_hold_every_run_once_in_order() -> None:
    runs = [f"r{i}" for i in range(101)]
    for parallelism, size in ((2, None), (8, None), (1, 7), (64, None)):
        chunks = chunked(runs, parallelism, size)
        assert [r for c in chunks for r in c] == runs
        assert max(map(len, chunks)) <= (size or 32)
    assert len(chunked(runs, 2)) == 8  # about four tasks per worker, at most 32 runs each


def test_an_unreachable_scheduler_is_exit_3_naming_the_address() -> None:
    from tests.kafka_harness import free_port
    from tracevault.errors import ServiceUnavailableError
    from tracevault.replayer.batch._dask import DaskEngine

    address = f"tcp://127.0.0.1:{free_port()}"  # nothing listens there
    with (
        pytest.raises(ServiceUnavailableError, match=address) as info,
        DaskEngine(address, timeout_s=2),
    ):
        pass
    assert info.value.exit_code == 3


@pytest.mark.parametrize("engine", ["dask", "local"])
def test_a_run_that_kills_its_worker_is_an_error_and_spares_its_chunk(
    dask_cluster: LocalDaskCluster, tmp_path: Path, engine: str
) -> None:
    url = f"file://{tmp_path / 'archive'}"
    store = open_store(url, Settings())
    killer = {**agents.INPUT, "die": True}
    inputs = {
        "k-ok-1": agents.INPUT,
        "k-die": killer,
        "k-ok-2": agents.INPUT,
        "k-ok-3": agents.INPUT,
    }
    for rid, agent_input in inputs.items():
        events = record(agents.research_agent, agent_input, run_id=rid, model_fn=agents.fake_model,
                        tools=agents.TOOLS, states=agents.STATES)  # fmt: skip
        write_signed_run(store, seal(events))
    store.close()
    day = micros_to_datetime(T0).date().isoformat()
    how = (["--engine", "dask", "--address", dask_cluster.address] if engine == "dask"
           else ["--workers", "2"])  # fmt: skip
    res = _batch(url, *how, "--chunk-size", "2", "--json", "--since", day, "--until", day,
                 agent="tests.replayer.batch_agents:dying_agent")  # fmt: skip
    assert res.exit_code == 1, res.output
    runs = {r["run_id"]: r for r in json.loads(res.output)["runs"]}
    assert {rid: r["status"] for rid, r in runs.items()} == {
        "k-ok-1": "ok", "k-die": "error", "k-ok-2": "ok", "k-ok-3": "ok"
    }  # fmt: skip
    assert "lost the task of 1 run(s)" in runs["k-die"]["detail"]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--engine", "dask"], "--engine dask needs --address"),
        (["--engine", "dask", "--address", "tcp://127.0.0.1:1", "--workers", "2"], "no --workers"),
        (["--address", "tcp://127.0.0.1:1"], "--address needs --engine dask"),
    ],
)
def test_engine_options_that_do_not_go_together_are_usage_errors(
    tmp_path: Path, args: list[str], says: str
) -> None:
    res = _batch(f"file://{tmp_path / 'archive'}", *args, "--since", "2026-11-01")
    assert res.exit_code == 2 and says in res.output, res.output


def test_a_large_window_lists_only_the_runs_that_did_not_match() -> None:
    from datetime import date

    from rich.console import Console

    from tracevault.replayer.batch._report import BatchItem, BatchReport
    from tracevault.replayer.batch._view import print_batch

    seed = {"expected": "MODEL_CALL", "actual": "MODEL_CALL", "diff": ["$.seed: expected 8, got 7"]}
    items = [BatchItem(f"run-{i:04d}", "ok", 11, 11) for i in range(150)]
    items[7] = BatchItem("run-0007", "diverged", 11, 3, 3, None, "differs", seed)
    items[9] = BatchItem("run-0009", "error", detail="SystemExit: 3")
    report = BatchReport(date(2026, 11, 1), date(2026, 11, 2), AGENT, tuple(items))
    console = Console(width=80, record=True, color_system=None)
    print_batch(report, console)
    out = console.export_text()
    assert "run-0007" in out and "run-0009" in out and "run-0008" not in out
    assert "the first 2 that did not match" in out and "$.seed" in out
    assert all(cell_len(line) <= 80 for line in out.splitlines())
