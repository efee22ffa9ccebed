"""Issue 12: agents whose branches run concurrently replay in the recorded interleaving.

Every run is recorded once (module fixture) through the real pipeline: Recorder -> Kafka raw
-> Sequencer -> sealed -> Archiver -> file archive, and read back from the archive. Before
TraceEvent v2 an async agent with concurrent branches replayed 0 times in 100: under replay
one branch ran straight through and the first request of another branch differed.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Iterator
from io import BytesIO
from pathlib import Path
from typing import Any

import fastavro
import pytest

from tests.conftest import unique_name
from tests.replayer import concurrent_agents as ca
from tests.replayer.pipeline import sequencer_running, wait_sealed
from tracevault.config import Settings
from tracevault.consumer.archive import Archiver
from tracevault.errors import ReplayDivergence
from tracevault.kafka import ensure_topics
from tracevault.producer import Publisher, Recorder
from tracevault.replayer import LoadedRun, _interleave, areplay, load_run, replay, verify
from tracevault.replayer._interleave import interleaved
from tracevault.replayer._records import SealedRows
from tracevault.schemas import EventKind, TraceEvent, default_schemas

RECORDINGS = 20
REPLAYS = 100
GOLDEN = Path(__file__).with_name("golden")

Runs = dict[str, list[tuple[list[TraceEvent], Any]]]


def _record(publisher: Publisher, mode: str, run_id: str) -> Any:
    if mode == "async":
        rec = Recorder(publisher=publisher, agent_id="concurrent", agent_version="1",
                       model=ca.amodel_fn, tools=ca.ASYNC_TOOLS, run_id=run_id)  # fmt: skip
        return asyncio.run(rec.arun(ca.async_agent, ca.INPUT))
    rec = Recorder(publisher=publisher, agent_id="concurrent", agent_version="1",
                   model=ca.model_fn, tools=ca.THREAD_TOOLS, run_id=run_id)  # fmt: skip
    return rec.run(ca.thread_agent, ca.INPUT)


@pytest.fixture(scope="module")
def runs(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runs]:
    """20 async and 20 thread-pool runs, each recorded live once, read back from the archive."""
    base = tmp_path_factory.mktemp("concurrency")
    settings = Settings(bootstrap_servers=kafka_bootstrap, topic_prefix=unique_name("tv"),
                        partitions=2, archive_url=f"file://{base / 'archive'}",
                        spool_dir=str(base / "spool"))  # fmt: skip
    ensure_topics(settings)
    outputs: dict[str, tuple[str, Any]] = {}
    with sequencer_running(settings):
        publisher = Publisher(settings)
        try:
            for mode in ("async", "threads"):
                for n in range(RECORDINGS):
                    run_id = f"{mode}-{n}"
                    outputs[run_id] = (mode, _record(publisher, mode, run_id))
        finally:
            assert publisher.flush(30), "the publisher could not deliver to Kafka"
            publisher.close()
        for run_id in outputs:
            wait_sealed(settings, run_id)
    Archiver(settings).run(until_idle=1.0)
    got: Runs = {"async": [], "threads": []}
    for run_id, (mode, output) in outputs.items():
        report = verify(load_run(settings, run_id, source="archive"), require_finished=True)
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
    orders = {json.dumps(out["order"]) for _, out in recorded}
    assert len(orders) > 1, "the live interleaving should vary from run to run"

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
    monkeypatch.setattr(_interleave, "STALL_TIMEOUT_S", 0.3)
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


def test_until_stops_a_concurrent_replay_without_waiting_branches(runs: Runs) -> None:
    events, _ = runs["async"][0]
    done = threading.Event()

    async def stopped() -> Any:
        result = await areplay(events, ca.async_agent, until=4)
        done.set()
        return result

    result = asyncio.run(stopped())
    assert done.is_set() and result.matched and result.stopped
    assert all(ev.seq <= 4 for ev in result.served)


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
    from tracevault.replayer._batch import load_agent

    agent = load_agent(meta["agent"])
    if asyncio.iscoroutinefunction(agent):
        result = asyncio.run(areplay(events, agent))
    else:
        result = replay(events, agent)
    assert result.matched
