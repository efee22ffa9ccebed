"""Issue 12: agents whose branches run concurrently replay in the recorded interleaving.

Every run is recorded once (module fixture) through the real pipeline: Recorder -> Kafka raw
-> Sequencer -> sealed -> Archiver -> file archive, and read back from the archive. Before
TraceEvent v2 an async agent with concurrent branches replayed 0 times in 100: under replay
one branch ran straight through and the first request of another branch differed.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from io import BytesIO
from pathlib import Path
from typing import Any

import fastavro
import pytest
from click.testing import CliRunner

from tests.conftest import unique_name
from tests.replayer import concurrent_agents as ca
from tests.replayer.pipeline import load_all, sequencer_running, wait_all_sealed
from tracevault.cli import tracevault
from tracevault.config import Settings
from tracevault.errors import ReplayDivergence
from tracevault.kafka import ensure_topics
from tracevault.producer import Publisher, Recorder
from tracevault.replayer import LoadedRun, areplay, replay, verify
from tracevault.replayer._records import SealedRows
from tracevault.replayer.rerun import _interleave
from tracevault.replayer.rerun._interleave import interleaved
from tracevault.schemas import EventKind, TraceEvent, default_schemas
from tracevault.services.archiver import Archiver

RECORDINGS = 20
REPLAYS = 100
# A branch that stops early is let go after this long without its next crossing. Far above
# what a live branch takes between crossings (milliseconds) even on a loaded machine, so a
# slow live branch is never taken for a stopped one.
_STALL_S = 3.0
GOLDEN = Path(__file__).with_name("golden")

Runs = dict[str, list[tuple[list[TraceEvent], Any]]]


def _record(publisher: Publisher, mode: str, run_id: str) -> Any:
    if mode == "async":
        rec = Recorder(publisher=publisher, agent_id="concurrent", agent_version="1",
                       model=ca.amodel_fn, tools=ca.ASYNC_TOOLS, run_id=run_id)  # fmt: skip
        return asyncio.run(rec.arun(ca.async_agent, ca.INPUT))
    rec = Recorder(publisher=publisher, agent_id="concurrent", agent_version="1",
                   model=ca.model_fn, tools=ca.THREAD_TOOLS, run_id=run_id)  # fmt: skip
    agent = ca.thread_agent_two_workers if mode == "two-workers" else ca.thread_agent
    return rec.run(agent, ca.INPUT)


@pytest.fixture(scope="module")
def archive_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Where ``runs`` are archived (the CLI reads them back from there)."""
    return f"file://{tmp_path_factory.mktemp('concurrency') / 'archive'}"


@pytest.fixture(scope="module")
def prefix() -> str:
    """The deployment's topic prefix: its log's origin, which the CLI's settings must name."""
    return unique_name("tv")


@pytest.fixture(scope="module")
def runs(
    kafka_bootstrap: str, archive_url: str, prefix: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Runs]:
    """20 async and 20 thread-pool runs, each recorded live once, read back from the archive."""
    base = tmp_path_factory.mktemp("concurrency")
    settings = Settings(bootstrap_servers=kafka_bootstrap, topic_prefix=prefix,
                        partitions=2, archive_url=archive_url,
                        spool_dir=str(base / "spool"))  # fmt: skip
    ensure_topics(settings)
    outputs: dict[str, tuple[str, Any]] = {}
    with sequencer_running(settings):
        publisher = Publisher(settings)
        try:
            for mode, recordings in (("async", RECORDINGS), ("threads", RECORDINGS),
                                     ("two-workers", 5)):  # fmt: skip
                for n in range(recordings):
                    run_id = f"{mode}-{n}"
                    outputs[run_id] = (mode, _record(publisher, mode, run_id))
        finally:
            assert publisher.flush(30), "the publisher could not deliver to Kafka"
            publisher.close()
        wait_all_sealed(settings, outputs)
    Archiver(settings).run(until_idle=1.0)
    loaded = load_all(settings, outputs, "archive")
    got: Runs = {"async": [], "threads": [], "two-workers": []}
    for run_id, (mode, output) in outputs.items():
        report = verify(loaded[run_id], require_finished=True)
        got[mode].append((list(report.events), output))
    yield got


def _check_recorded(recorded: list[tuple[list[TraceEvent], Any]]) -> None:
    v2 = default_schemas().get("TraceEvent", 2)
    assert v2.version == 2
    overlapped = 0
    for events, _ in recorded:
        assert all(ev.interleave is not None for ev in events)
        overlapped += interleaved(events)
    assert overlapped == len(recorded), "every recording should overlap its branches' crossings"


def test_async_branches_replay_in_the_recorded_interleaving_every_time(runs: Runs) -> None:
    recorded = runs["async"]
    _check_recorded(recorded)
    # Each replay must hand the branches their results in that recording's own order (the
    # shared list in `output` is it); whether live runs happened to differ is chance, not a
    # property of the replayer, so it is not asserted.

    async def all_replays() -> int:
        matched = 0
        for events, output in recorded:
            for _ in range(REPLAYS):
                result = await areplay(events, ca.async_agent)
                matched += result.matched and result.output == output
        return matched

    assert asyncio.run(all_replays()) == RECORDINGS * REPLAYS


def test_thread_pool_branches_replay_every_time(runs: Runs) -> None:
    recorded = runs["threads"]
    _check_recorded(recorded)
    matched = 0
    for events, output in recorded:
        for _ in range(REPLAYS):
            result = replay(events, ca.thread_agent)
            matched += result.matched and result.output == output
    assert matched == RECORDINGS * REPLAYS


def _seq_of_search(events: list[TraceEvent], branch: int) -> int:
    (seq,) = (
        ev.seq
        for ev in events
        if ev.kind is EventKind.TOOL_CALL
        and json.loads(ev.request)["tool"] == "search"
        and json.loads(ev.request)["args"]["branch"] == branch
    )
    return seq


def _expect_perturbation(events: list[TraceEvent], run: Callable[[list[TraceEvent]], Any]) -> None:
    with pytest.raises(ReplayDivergence) as info:
        run(events)
    assert info.value.seq == _seq_of_search(events, ca.PERTURBED)
    assert info.value.expected == info.value.actual == "TOOL_CALL"
    assert any(d.startswith("$.request.args.perturbed") for d in info.value.diff), info.value.diff


def test_a_changed_request_in_one_async_branch_is_reported_at_its_seq(runs: Runs) -> None:
    for events, _ in runs["async"][:5]:
        _expect_perturbation(events, lambda e: asyncio.run(areplay(e, ca.async_perturbed_agent)))


def test_a_changed_request_in_one_thread_branch_is_reported_at_its_seq(runs: Runs) -> None:
    for events, _ in runs["threads"][:5]:
        _expect_perturbation(events, lambda e: replay(e, ca.thread_perturbed_agent))


def test_a_branch_that_stops_early_diverges_at_the_first_call_never_made(
    runs: Runs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No hang: after the stall timeout the waiting branches raise the same divergence."""
    monkeypatch.setattr(_interleave, "STALL_TIMEOUT_S", _STALL_S)
    events, _ = runs["async"][0]
    (first_missing,) = [
        ev.seq
        for ev in events
        if ev.kind is EventKind.TOOL_CALL and json.loads(ev.request)["args"]["branch"] == 0
    ][:1]
    result = asyncio.run(areplay(events, ca.async_stopping_agent, raise_on_divergence=False))
    assert not result.matched and result.divergence is not None
    assert result.divergence.seq == first_missing
    assert "never made the TOOL_CALL call" in result.divergence.reason


def test_until_stops_a_concurrent_replay_without_waiting_branches(
    runs: Runs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Branches still waiting for their turn past ``until`` are not waited for: with a stall
    timeout of an hour, a replay that waited on them would outlast the deadline."""
    monkeypatch.setattr(_interleave, "STALL_TIMEOUT_S", 3600.0)
    events, _ = runs["async"][0]

    async def stopped() -> Any:
        return await asyncio.wait_for(areplay(events, ca.async_agent, until=4), timeout=60)

    result = asyncio.run(stopped())
    assert result.matched and result.stopped
    assert sorted(ev.seq for ev in result.served) == [ev.seq for ev in events if ev.seq <= 4]


@pytest.mark.parametrize("name", ["async_research", "research"])
def test_v1_runs_recorded_before_v2_still_replay(name: str) -> None:
    meta = json.loads((GOLDEN / f"{name}.json").read_text())
    rows = list(fastavro.reader(BytesIO((GOLDEN / f"{name}.avro").read_bytes())))
    v1 = default_schemas().get("TraceEvent", 1).fingerprint
    assert all(row["raw"][2:10] == v1 for row in rows), "the golden runs are TraceEvent v1"
    run = LoadedRun(run_id=meta["run_id"], source="memory", records=SealedRows(rows),
                    objects=[f"golden/{name}.avro"] * len(rows))  # fmt: skip
    events = list(verify(run, require_finished=True).events)
    assert all(ev.interleave is None for ev in events) and not interleaved(events)
    from tracevault.replayer.batch.jobs import load_agent

    agent = load_agent(meta["agent"])
    if asyncio.iscoroutinefunction(agent):
        result = asyncio.run(areplay(events, agent))
    else:
        result = replay(events, agent)
    assert result.matched


# -- keep-going on concurrent runs --------------------------------------------------------
KEEP_GOING_REPLAYS = 50


def _false_divergences(found: list[tuple[int, Any]]) -> list[tuple[int, int, str]]:
    return [(k, d.seq, d.reason) for k, result in found for d in result.divergences]


def test_keep_going_serves_async_branches_in_the_recorded_interleaving(runs: Runs) -> None:
    """Before: keep-going answered every call at once, so the branches ran in another order
    than the record and the shared list's length in their requests differed (false
    divergences on nearly every replay)."""
    recorded = runs["async"]

    async def replays() -> list[tuple[int, Any]]:
        found = []
        for k in range(KEEP_GOING_REPLAYS):
            events, output = recorded[k % len(recorded)]
            result = await areplay(events, ca.async_agent, keep_going=True)
            assert result.output == output, (k, result.output, output)
            found.append((k, result))
        return found

    found = asyncio.run(replays())
    assert _false_divergences(found) == []
    assert all(result.matched for _, result in found)


def test_keep_going_serves_thread_branches_in_the_recorded_interleaving(runs: Runs) -> None:
    recorded = runs["threads"]
    found = []
    for k in range(KEEP_GOING_REPLAYS):
        events, output = recorded[k % len(recorded)]
        result = replay(events, ca.thread_agent, keep_going=True)
        assert result.output == output
        found.append((k, result))
    assert _false_divergences(found) == []


def _expect_both_perturbations(events: list[TraceEvent], result: Any, output: Any) -> None:
    """Exactly the two changed searches, each at its own branch's seq, and the run went on."""
    seqs = sorted(_seq_of_search(events, branch) for branch in ca.TWICE)
    assert [(d.seq, d.expected, d.actual) for d in result.divergences] == [
        (seq, "TOOL_CALL", "TOOL_CALL") for seq in seqs
    ]
    for d in result.divergences:
        assert d.actual_request["args"]["branch"] in ca.TWICE
        assert any(line.startswith("$.request.args.perturbed") for line in d.diff), d.diff
    assert result.output == output  # served past both, in the recorded interleaving


def test_keep_going_reports_changes_in_two_async_branches_each_at_its_seq(runs: Runs) -> None:
    for events, output in runs["async"][:10]:
        result = asyncio.run(areplay(events, ca.async_twice_perturbed_agent, keep_going=True))
        _expect_both_perturbations(events, result, output)


def test_keep_going_reports_changes_in_two_thread_branches_each_at_its_seq(runs: Runs) -> None:
    for events, output in runs["threads"][:10]:
        result = replay(events, ca.thread_twice_perturbed_agent, keep_going=True)
        _expect_both_perturbations(events, result, output)


def test_cli_keep_going_on_a_concurrent_run(
    runs: Runs, archive_url: str, prefix: str, kafka_bootstrap: str
) -> None:
    """``replay run --keep-going`` from the archive: both changes, then a clean re-run."""
    events, _ = runs["async"][0]
    # the pipeline's own brokers: the sealed topic that proves the archive current (L5)
    base = ["--bootstrap-servers", kafka_bootstrap, "--prefix", prefix, "replay",
            "--archive-url", archive_url, "run", events[0].run_id,
            "--keep-going"]  # fmt: skip
    agent = "tests.replayer.concurrent_agents:async_twice_perturbed_agent"
    res = CliRunner().invoke(tracevault, [*base, "--agent", agent, "--json"])
    assert res.exit_code == 1, res.output
    seqs = sorted(_seq_of_search(events, branch) for branch in ca.TWICE)
    assert [d["seq"] for d in json.loads(res.output)["divergences"]] == seqs
    res = CliRunner().invoke(
        tracevault, [*base, "--agent", "tests.replayer.concurrent_agents:async_agent"]
    )
    assert res.exit_code == 0 and "matched the record" in res.output, res.output


def test_keep_going_on_a_reused_pool_thread_lets_nothing_go(runs: Runs) -> None:
    """Recorded with a thread reused for the third branch, replayed with a thread each.

    That branch's first crossing names another branch's as its ``branch_prev``; served
    before it, it must not make keep-going take the other branch's crossings for missing
    (they were let go and answered out of turn, and the branches' identical state reads
    were mixed up: their calculations seemed to differ).
    """
    found = []
    for k, (events, output) in enumerate(runs["two-workers"] * 4):
        assert interleaved(events)
        result = replay(events, ca.thread_agent, keep_going=True)
        assert result.output == output
        found.append((k, result))
    assert _false_divergences(found) == []


def _branch_after(events: list[TraceEvent], seq: int) -> list[int]:
    """The seqs its branch recorded after ``seq``, following ``branch_prev``."""
    chain = []
    while nxt := [
        ev.seq
        for ev in events
        if ev.interleave is not None and ev.interleave.branch_prev == seq and ev.seq != 0
    ]:
        (seq,) = nxt
        chain.append(seq)
    return chain


def test_keep_going_lets_a_branch_that_stops_early_go_as_missing(
    runs: Runs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The others do not wait on it for ever: after the stall timeout its calls are missing."""
    monkeypatch.setattr(_interleave, "STALL_TIMEOUT_S", _STALL_S)
    events, _ = runs["async"][0]
    search = _seq_of_search(events, 0)
    never = [search, *_branch_after(events, search)]
    assert len(never) == 3  # the search, the stock read, the calculation
    result = asyncio.run(areplay(events, ca.async_stopping_agent, keep_going=True))
    missing = [d.seq for d in result.divergences if d.actual is None]
    assert missing == never, result.divergences
    assert all("never made" in d.reason for d in result.divergences if d.actual is None)
    assert result.divergences[-1].expected == "RUN_FINISHED"  # it ran to its end


def test_a_pool_thread_reused_live_replays_on_a_thread_of_its_own(runs: Runs) -> None:
    """Recorded on two pool threads, replayed on three: issue 34's saturated-CPU divergence.

    Live the third branch ran on a thread that had finished another branch, so its first
    crossing's ``branch_prev`` names that branch's last crossing. Replayed on a fresh thread
    it arrives before that crossing was served (the scheduling a saturated CPU produces, here
    without load): it is held until the record's order reaches it, never declared "not in the
    record" because another branch's crossing is next.
    """
    recorded = runs["two-workers"]
    reused = [ev for events, _ in recorded for ev in events if _reused_live(events, ev)]
    assert reused, "no recording ran a branch on a pool thread reused live"
    matched = 0
    for events, output in recorded:
        for _ in range(REPLAYS // 5):
            result = replay(events, ca.thread_agent)
            matched += result.matched and result.output == output
    assert matched == len(recorded) * (REPLAYS // 5)


def _reused_live(events: list[TraceEvent], ev: TraceEvent) -> bool:
    """Whether ``ev`` is a branch's plan whose ``branch_prev`` is another branch's crossing."""
    il = ev.interleave
    if ev.kind is not EventKind.MODEL_CALL or il is None or il.branch_prev in (None, 0):
        return False
    return events[il.branch_prev].kind is not EventKind.RUN_STARTED
