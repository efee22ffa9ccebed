"""Issue 34, item 10: replay does not depend on how fast the machine is.

Every concurrency and cancellation pattern (gather, nested gathers, a TaskGroup,
``as_completed``, a thread pool, a race whose loser is cancelled, ``wait_for`` timeouts,
``task.cancel()``) is recorded once through the real pipeline (Recorder -> Kafka raw ->
Sequencer -> sealed topic) and replayed 20 times with two CPU burners beside the replays:
the order the record fixes is the order replay serves, whatever the scheduler does. Before,
the race matched 6 of 15 replays on a saturated CPU (15 of 15 on a quiet one).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.conftest import burning_cpus
from tests.replayer import cancel_agents, load_agents
from tests.replayer import concurrent_agents as conc
from tests.replayer.pipeline import fresh_settings, load_all, sequencer_running, wait_all_sealed
from tracevault.edges import APART_ATTRIBUTE
from tracevault.errors import ReplayDivergence
from tracevault.producer import Publisher, Recorder
from tracevault.replayer import areplay, replay, verify
from tracevault.replayer.rerun import _interleave
from tracevault.replayer.rerun._interleave import interleaved
from tracevault.schemas import EventKind, TraceEvent

REPLAYS = 20
BURNERS = 2

# name -> (agent recorded, agent replayed, model, tools, input)
_C = (cancel_agents.model_fn, cancel_agents.TOOLS, cancel_agents.INPUT)
_A = (conc.amodel_fn, conc.ASYNC_TOOLS, conc.INPUT)
_T = (conc.model_fn, conc.THREAD_TOOLS, conc.INPUT)
_R = (conc.amodel_fn, load_agents.ARRIVE_TOOLS, conc.INPUT)
PATTERNS: dict[str, tuple[Callable[..., Any], Callable[..., Any], Any, Any, Any]] = {
    "gather": (conc.async_agent, conc.async_agent, *_A),
    "nested": (load_agents.nested_agent, load_agents.nested_agent, *_A),
    "taskgroup": (load_agents.taskgroup_agent, load_agents.taskgroup_agent, *_A),
    "as_completed": (load_agents.as_completed_agent, load_agents.as_completed_agent, *_A),
    # results back apart and together, as a framework's asyncio.wait groups them
    "arrivals": (load_agents.arrivals_agent, load_agents.arrivals_agent, *_R),
    "threads": (conc.thread_agent, conc.thread_agent, *_T),
    # recorded on two pool threads (one reused for the third branch), replayed on three
    "threads-reused": (conc.thread_agent_two_workers, conc.thread_agent, *_T),
    "steps": (load_agents.steps_agent, load_agents.steps_agent, *_T),
    "race": (cancel_agents.race_agent, cancel_agents.race_agent, *_C),
    "wait_for": (cancel_agents.timeout_agent, cancel_agents.timeout_agent, *_C),
    "cancel": (cancel_agents.cancel_agent, cancel_agents.cancel_agent, *_C),
}

Recorded = dict[str, tuple[list[TraceEvent], Any]]


@pytest.fixture(scope="module")
def recorded(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Recorded]:
    """Each pattern recorded live once, read back from the sealed topic."""
    base = tmp_path_factory.mktemp("saturated")
    settings = fresh_settings(kafka_bootstrap, base, "tv", partitions=2)
    outputs: dict[str, Any] = {}
    with sequencer_running(settings):
        publisher = Publisher(settings)
        try:
            for name, (agent, _, model, tools, agent_input) in PATTERNS.items():
                rec = Recorder(publisher=publisher, agent_id=f"load-{name}", agent_version="1",
                               model=model, tools=tools, run_id=name)  # fmt: skip
                if asyncio.iscoroutinefunction(agent):
                    outputs[name] = asyncio.run(rec.arun(agent, agent_input))
                else:
                    outputs[name] = rec.run(agent, agent_input)
        finally:
            assert publisher.flush(30), "the publisher could not deliver to Kafka"
            publisher.close()
        wait_all_sealed(settings, outputs)
        loaded = load_all(settings, outputs, "topic")
    yield {
        name: (list(verify(loaded[name], require_finished=True).events), output)
        for name, output in outputs.items()
    }


def _replays(events: list[TraceEvent], agent: Callable[..., Any], output: Any) -> list[str]:
    """Replay ``REPLAYS`` times, one after another; what each that did not match got."""
    wrong: list[str] = []

    def judge(result: Any) -> None:
        if not (result.matched and result.output == output):
            wrong.append(str(result.divergence or result.output))

    if asyncio.iscoroutinefunction(agent):

        async def all_replays() -> None:
            for _ in range(REPLAYS):
                judge(await areplay(events, agent, raise_on_divergence=False))

        asyncio.run(all_replays())
    else:
        for _ in range(REPLAYS):
            judge(replay(events, agent, raise_on_divergence=False))
    return wrong


@pytest.mark.parametrize("name", list(PATTERNS))
def test_every_pattern_replays_every_time_with_the_cpu_saturated(
    recorded: Recorded, name: str
) -> None:
    events, output = recorded[name]
    assert interleaved(events), f"{name}: the recording should overlap its crossings"
    replayed = PATTERNS[name][1]
    t0 = time.monotonic()
    with burning_cpus(BURNERS, nice=0):
        wrong = _replays(events, replayed, output)
    took = time.monotonic() - t0
    print(f"{name}: {REPLAYS - len(wrong)}/{REPLAYS} matched in {took:.1f}s")
    assert wrong == [], f"{name}: {len(wrong)}/{REPLAYS} did not match; first: {wrong[0]}"


def test_a_swap_of_two_calls_in_one_thread_diverges_at_the_first_of_them(
    recorded: Recorded, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Thread 1 makes ``step 2`` before ``step 1``: a real swap, not a pool thread held
    until its recorded ``branch_prev`` starts. The held call is named at ``step 1``'s seq
    once the run stalls (``STALL_TIMEOUT_S``, shortened here), with the request's change."""
    monkeypatch.setattr(_interleave, "STALL_TIMEOUT_S", 2.0)
    events, _ = recorded["steps"]
    (at,) = [
        ev.seq
        for ev in events
        if ev.kind is EventKind.TOOL_CALL
        and json.loads(ev.request)["args"] == {"branch": load_agents.SWAPPED_BRANCH, "q": "step 1"}
    ]
    with pytest.raises(ReplayDivergence) as info:
        replay(events, load_agents.swapped_steps_agent)
    assert info.value.seq == at
    assert info.value.expected == info.value.actual == "TOOL_CALL"
    want = '$.request.args.q: expected "step 1", got "step 2"'
    assert info.value.diff == (want,), info.value.diff


def test_results_that_came_back_apart_are_marked_and_replay_apart(recorded: Recorded) -> None:
    """Live, ``slow`` came back 10 ms after ``fast`` and the framework yielded them one by
    one; ``x`` and ``y`` came back in one loop iteration and it yielded both at once, in task
    order. Only ``slow`` is marked apart, and replay gives both rounds as live: waking every
    overlapping result together gave ``slow, fast`` (Pydantic AI's parallel tools, 0/50 in
    the stop-40 CI); waking all apart would give ``y, x``."""
    events, output = recorded["arrivals"]
    assert output == {"apart": ["fast", "slow"], "together": ["x", "y"]}, output
    apart = {
        json.loads(ev.request)["args"]["name"]
        for ev in events
        if ev.attributes.get(APART_ATTRIBUTE) == "1"
    }
    assert apart == {"slow"}, events
    result = asyncio.run(areplay(events, load_agents.arrivals_agent, raise_on_divergence=False))
    assert (result.matched, result.output) == (True, output), result.divergence
