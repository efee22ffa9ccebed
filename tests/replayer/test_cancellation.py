"""Issue 23: runs in which the agent cancelled a crossing replay, the same way every time.

Three ways production agents bound latency, each recorded 10 times through the real
pipeline (Recorder -> Kafka raw -> Sequencer -> sealed topic) and read back from the topic:
``asyncio.wait_for`` timeouts that fire, a task cancelled in the middle of a call, and two
calls raced with the loser cancelled. Each recording is replayed 20 times. Before, none
replayed: ``wait_for`` got the recorded ``CancelledError`` raised by the served call (not a
timeout), and a cancelled crossing was never marked done, so every replay stalled 10 s.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.replayer import cancel_agents as ca
from tests.replayer.pipeline import fresh_settings, load_all, sequencer_running, wait_all_sealed
from tracevault.config import Settings
from tracevault.edges import CANCELLED_ATTRIBUTE
from tracevault.errors import ReplayDivergence
from tracevault.producer import Publisher, Recorder
from tracevault.replayer import areplay, verify
from tracevault.replayer.investigate.fork import fork_run
from tracevault.replayer.rerun import _interleave
from tracevault.replayer.rerun._interleave import interleaved
from tracevault.schemas import EventKind, TraceEvent

RECORDINGS = 10
REPLAYS = 20
# A replay serves every call from the record; only the agent's own timers take time (a
# fired timeout takes its TIMEOUT_S again). A stall would take STALL_TIMEOUT_S (10 s).
MAX_REPLAY_S = 1.0
AGENTS: dict[str, Callable[..., Any]] = {
    "timeout": ca.timeout_agent,
    "sequential": ca.sequential_timeout_agent,
    "cancel": ca.cancel_agent,
    "race": ca.race_agent,
    "early": ca.early_timer_agent,
}

Runs = dict[str, list[tuple[list[TraceEvent], Any]]]


@pytest.fixture(scope="module")
def settings(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    return fresh_settings(kafka_bootstrap, tmp_path_factory.mktemp("cancel"), "tv", partitions=2)


@pytest.fixture(scope="module")
def runs(settings: Settings) -> Iterator[Runs]:
    outputs: dict[str, tuple[str, Any]] = {}
    with sequencer_running(settings):
        publisher = Publisher(settings)
        try:
            for name, agent in AGENTS.items():
                for n in range(RECORDINGS):
                    run_id = f"{name}-{n}"
                    rec = Recorder(publisher=publisher, agent_id=f"cancel-{name}",
                                   agent_version="1", model=ca.model_fn, tools=ca.TOOLS,
                                   run_id=run_id)  # fmt: skip
                    outputs[run_id] = (name, asyncio.run(rec.arun(agent, ca.INPUT)))
        finally:
            assert publisher.flush(30), "the publisher could not deliver to Kafka"
            publisher.close()
        wait_all_sealed(settings, outputs)
        loaded = load_all(settings, outputs, "topic")
        got: Runs = {name: [] for name in AGENTS}
        for run_id, (name, output) in outputs.items():
            run = loaded[run_id]
            got[name].append((list(verify(run, require_finished=True).events), output))
    yield got


def _cancelled(events: list[TraceEvent]) -> list[TraceEvent]:
    return [ev for ev in events if ev.error is not None and "CancelledError" in ev.error.type]


def _replay_all(name: str, recorded: list[tuple[list[TraceEvent], Any]]) -> None:
    agent = AGENTS[name]

    async def timed(events: list[TraceEvent]) -> tuple[Any, float]:
        t0 = time.monotonic()
        result = await areplay(events, agent, raise_on_divergence=False)
        return result, time.monotonic() - t0

    async def replays() -> tuple[int, float, list[str]]:
        matched, slowest, wrong = 0, 0.0, []
        for events, output in recorded:
            # a recording's replays at once, in one loop: each is its own run of the agent (its
            # own context), and the agents' timers, the only thing a replay waits for, overlap
            done = await asyncio.gather(*(timed(events) for _ in range(REPLAYS)))
            for result, took in done:
                slowest = max(slowest, took)
                if result.matched and result.output == output:
                    matched += 1
                elif len(wrong) < 3:
                    wrong.append(f"{events[0].run_id}: {result.divergence or result.output}")
        return matched, slowest, wrong

    matched, slowest, wrong = asyncio.run(replays())
    assert matched == RECORDINGS * REPLAYS, wrong
    assert slowest < MAX_REPLAY_S, f"a replay took {slowest:.2f}s (a stall?)"
    print(f"{name}: slowest of {RECORDINGS * REPLAYS} replays {slowest:.2f}s")


def test_the_record_says_what_was_cancelled_and_when(runs: Runs) -> None:
    """Each cancelled crossing is an error ``CancelledError``, cancelled by its caller, with
    its place among the run's completions (the interleave), as the agent saw it live."""
    for name, recorded in runs.items():
        for events, _ in recorded:
            cancelled = _cancelled(events)
            assert cancelled, f"{name}: the recording should cancel a crossing"
            for ev in cancelled:
                assert ev.kind is EventKind.TOOL_CALL and ev.interleave is not None
                assert ev.error is not None
                assert ev.error.type == "asyncio.exceptions.CancelledError"
                assert ev.attributes[CANCELLED_ATTRIBUTE] == "caller"
                assert ev.response == b"null"
        if name in ("timeout", "sequential"):
            for events, output in recorded:
                timed_out = {json.loads(ev.request)["args"]["branch"] for ev in _cancelled(events)}
                assert {f"timeout-{b}" for b in timed_out} <= set(output["order"])


def test_wait_for_timeouts_that_fired_replay_as_timeouts(runs: Runs) -> None:
    orders = {json.dumps(out["order"]) for _, out in runs["timeout"]}
    assert len(orders) > 1, "the live interleaving should vary from run to run"
    _replay_all("timeout", runs["timeout"])


def test_timeouts_in_a_record_served_in_seq_order_replay(runs: Runs) -> None:
    """One call at a time: the plain cursor (no interleaver) serves it, the same way."""
    assert not any(interleaved(events) for events, _ in runs["sequential"])
    _replay_all("sequential", runs["sequential"])


def test_a_task_cancelled_mid_call_replays(runs: Runs) -> None:
    for _, output in runs["cancel"]:
        assert output["log"] == ["worker cancelled", "main saw the cancel"]
    _replay_all("cancel", runs["cancel"])


def test_a_race_replays_with_the_same_loser_cancelled(runs: Runs) -> None:
    winners = {json.dumps(out["winners"]) for _, out in runs["race"]}
    assert len(winners) > 1, "the winner should vary from run to run"
    _replay_all("race", runs["race"])


def test_a_timer_that_runs_ahead_under_replay_does_not_cut_a_recorded_answer(
    runs: Runs,
) -> None:
    """The served calls take no time, so B's bound fires before A's cancel came back; the
    record says B's call completed, so its answer is served in its turn, as live."""
    for _, output in runs["early"]:
        assert output["order"] == ["a-timeout", "b-ok"]
    _replay_all("early", runs["early"])


@pytest.mark.parametrize("name", list(AGENTS))
def test_keep_going_replays_the_cancellations_too(runs: Runs, name: str) -> None:
    async def replays() -> list[Any]:
        return [
            (await areplay(events, AGENTS[name], keep_going=True), output)
            for events, output in runs[name][:3]
        ]

    for result, output in asyncio.run(replays()):
        assert result.divergences == () and result.matched and result.output == output


async def _never_cancels(task: Any, edges: Any) -> Any:
    """The timeout agent after a change: the bound is gone, so nothing cancels the lookup."""
    found = await asyncio.gather(*(edges.atool("lookup", {"branch": b}) for b in range(3)))
    return {"found": found}


async def _never_cancels_one_at_a_time(task: Any, edges: Any) -> Any:
    return {"found": [await edges.atool("lookup", {"branch": b}) for b in range(3)]}


@pytest.mark.parametrize(
    ("name", "agent"), [("timeout", _never_cancels), ("sequential", _never_cancels_one_at_a_time)]
)
def test_a_recorded_cancellation_nobody_makes_again_diverges_at_its_seq(
    runs: Runs, monkeypatch: pytest.MonkeyPatch, name: str, agent: Any
) -> None:
    """No hang: the replay waits the recorded time plus the stall timeout, then names it."""
    monkeypatch.setattr(_interleave, "STALL_TIMEOUT_S", 0.3)
    for events, _ in runs[name][:3]:
        # the first cancellation the run met: the first in the order crossings completed
        first = min(_cancelled(events), key=_done_order).seq
        t0 = time.monotonic()
        with pytest.raises(ReplayDivergence) as info:
            asyncio.run(areplay(events, agent))
        assert time.monotonic() - t0 < 3.0
        assert info.value.seq == first
        assert f"at seq {first} was cancelled after" in str(info.value)
        assert "nothing cancelled it under replay" in str(info.value)


def _done_order(ev: TraceEvent) -> int:
    assert ev.interleave is not None
    return ev.interleave.done_order


@pytest.mark.parametrize("name", list(AGENTS))
def test_a_fork_serves_the_cancellations_before_its_seq(
    runs: Runs, settings: Settings, name: str
) -> None:
    """Forked after the last crossing: every timeout and cancel came back as it did live,
    and the new run records them again (as the callee's caller cancelled them)."""
    publisher = Publisher(settings)
    try:
        for events, output in runs[name][:3]:
            last = events[-1].seq - 1  # the RUN_FINISHED's: every crossing is served
            result = fork_run(events, AGENTS[name], until=last, publisher=publisher,
                              model=ca.model_fn, tools=ca.TOOLS)  # fmt: skip
            assert result.divergence is None and result.error is None, result
            assert result.output == output and result.refused == ()
    finally:
        assert publisher.flush(30)
        publisher.close()
