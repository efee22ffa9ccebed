"""Recorded runs read back from <prefix>.raw: order, partition, payloads, run-end convention."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.producer.conftest import read_all, read_partition
from tracevault.config import Settings
from tracevault.edges import JSON
from tracevault.kafka import partition_for
from tracevault.producer import Publisher, Recorder, Tool
from tracevault.schemas import EventKind, TraceEvent
from tracevault.transparency import ATTEST_ATTRIBUTE

MODEL = "claude-sonnet-4-5-20250929"


def call_model(request: JSON, *, model: str, seed: int | None) -> JSON:
    return {"text": f"answer to {request['messages'][-1]['content']}", "seed": seed}


async def acall_model(request: JSON, *, model: str, seed: int | None) -> JSON:
    await asyncio.sleep(0)
    return call_model(request, model=model, seed=seed)


class Ledger:
    def __init__(self) -> None:
        self.keys: list[str] = []

    def refund(self, args: JSON, *, idempotency_key: str) -> JSON:
        self.keys.append(idempotency_key)
        return {"refunded": args["amount"]}


def search(args: JSON) -> JSON:
    if args["q"] == "boom":
        raise LookupError("index offline")
    if args["q"] == "surrogate":
        raise ValueError("bad byte \udc80 from a decoded file name")
    return {"hits": [args["q"]] * 3}


def small_agent(task: JSON, edges: Any) -> JSON:
    """Model + tools + clock + random + state + decision, as the issue asks."""
    t0 = edges.clock()
    rng = edges.random("jitter")
    stock = edges.state("inventory.widgets", read=lambda: {"count": 4})
    answer = edges.model(
        {"messages": [{"role": "user", "content": task["q"]}]}, model=MODEL, seed=7
    )
    hits = edges.tool("search", {"q": task["q"]})
    refund = edges.tool("refund", {"amount": 5})
    edges.decision("route", "reply", options=["reply", "escalate"])
    return {"answer": answer, "hits": hits, "refund": refund, "stock": stock,
            "r": rng.random(), "t": t0}  # fmt: skip


@pytest.fixture
def settings(settings_factory: Callable[..., Settings]) -> Settings:
    return settings_factory(partitions=3)


@pytest.fixture
def publisher(settings: Settings) -> Iterator[Publisher]:
    pub = Publisher(settings)
    yield pub
    pub.close(timeout=10)


def recorder(publisher: Publisher, ledger: Ledger | None = None, **kw: Any) -> Recorder:
    ledger = ledger or Ledger()
    return Recorder(
        publisher=publisher,
        agent_id="triage-bot",
        agent_version="1.2.0",
        model=kw.pop("model", call_model),
        tools={"search": search, "refund": Tool(ledger.refund, side_effect=True)},
        harness="pytest",
        **kw,
    )


def events_of(settings: Settings, run_id: str, count: int) -> list[TraceEvent]:
    part = partition_for(run_id, settings.partitions)
    got = read_partition(settings, part, count, key=run_id.encode())
    assert all(ev.run_id == run_id for _, ev in got)
    return [ev for _, ev in got]


def test_small_agent_reads_back_in_order_in_its_murmur2_partition(
    settings: Settings, publisher: Publisher
) -> None:
    ledger = Ledger()
    rec = recorder(publisher, ledger, attributes={"team": "support"})
    output = rec.run(small_agent, {"q": "where is my order"})
    assert publisher.flush(30)

    evs = events_of(settings, rec.run_id, 9)
    assert [e.seq for e in evs] == list(range(9))
    assert [e.kind for e in evs] == [
        EventKind.RUN_STARTED, EventKind.CLOCK, EventKind.RANDOM, EventKind.EXTERNAL_STATE,
        EventKind.MODEL_CALL, EventKind.TOOL_CALL, EventKind.TOOL_CALL, EventKind.DECISION,
        EventKind.RUN_FINISHED,
    ]  # fmt: skip
    # No other partition holds any event of this run.
    others = read_all(settings, 9)
    assert {e.seq for e in others if e.run_id == rec.run_id} == set(range(9))
    assert len([e for e in others if e.run_id == rec.run_id]) == 9

    started, clock, rnd, state, model, search_ev, refund_ev, decision, finished = evs
    assert json.loads(started.request) == {"input": {"q": "where is my order"}}
    signed = started.attributes.pop(ATTEST_ATTRIBUTE)  # the session's agent key signed seq 0
    assert signed.startswith("tracevault/agent/v1\n")
    assert started.attributes == {"team": "support"}
    assert started.agent.agent_id == "triage-bot" and started.agent.harness == "pytest"
    assert json.loads(clock.response) == {"time": output["t"]}
    assert rnd.seed is not None and json.loads(rnd.response) == {"seed": rnd.seed}
    import random

    assert random.Random(rnd.seed).random() == output["r"]
    assert json.loads(state.request) == {"name": "inventory.widgets"}
    assert json.loads(state.response) == {"count": 4}
    assert model.model == MODEL and model.seed == 7
    assert json.loads(model.response) == output["answer"]
    assert json.loads(search_ev.request) == {"tool": "search", "args": {"q": "where is my order"}}
    assert search_ev.idempotency_key is None
    assert refund_ev.idempotency_key == f"{rec.run_id}:6" == ledger.keys[0]
    assert json.loads(decision.request) == {
        "name": "route", "choice": "reply", "options": ["reply", "escalate"]
    }  # fmt: skip
    assert json.loads(finished.response) == {"output": output}
    assert all(e.error is None for e in evs)
    assert all(evs[i].at <= evs[i + 1].at for i in range(8))


def test_tool_exception_is_recorded_and_reraised_then_error_and_run_finished(
    settings: Settings, publisher: Publisher
) -> None:
    def agent(task: JSON, edges: Any) -> JSON:
        return edges.tool("search", {"q": "boom"})

    rec = recorder(publisher)
    with pytest.raises(LookupError, match="index offline"):
        rec.run(agent, {"q": "boom"})
    assert publisher.flush(30)
    evs = events_of(settings, rec.run_id, 4)
    assert [e.kind for e in evs] == [
        EventKind.RUN_STARTED, EventKind.TOOL_CALL, EventKind.ERROR, EventKind.RUN_FINISHED
    ]  # fmt: skip
    tool_ev, error_ev, finished = evs[1:]
    assert tool_ev.error is not None
    assert (tool_ev.error.type, tool_ev.error.message) == ("LookupError", "index offline")
    assert tool_ev.response == b"null"
    assert error_ev.error == tool_ev.error == finished.error
    assert json.loads(finished.response) == {"output": None}


def test_an_exception_message_that_is_not_utf8_is_recorded_escaped(
    settings: Settings, publisher: Publisher
) -> None:
    rec = recorder(publisher)
    with pytest.raises(ValueError, match="bad byte"):
        rec.run(lambda task, e: e.tool("search", {"q": "surrogate"}), None)
    assert publisher.flush(30)
    evs = events_of(settings, rec.run_id, 4)
    assert evs[1].error is not None
    assert evs[1].error.message == "bad byte \\udc80 from a decoded file name"
    assert publisher.stats().lost == 0


def test_with_form_sync_and_async_and_arun(settings: Settings, publisher: Publisher) -> None:
    with recorder(publisher, input={"q": "sync"}) as edges:
        edges.finish({"done": edges.tool("search", {"q": "sync"})})
    sync_id = edges.run_id

    async def async_agent(task: JSON, e: Any) -> JSON:
        answer = await e.amodel({"messages": [{"content": task}]}, model=MODEL)
        hits = await e.atool("search", {"q": task})

        async def read() -> JSON:
            return 3

        return {"answer": answer, "hits": hits, "depth": await e.astate("queue", read=read)}

    async def main() -> tuple[str, str]:
        rec = recorder(publisher, model=acall_model)
        await rec.arun(async_agent, "arun")
        async with recorder(publisher, input="awith") as e:
            with pytest.raises(LookupError):
                await e.atool("search", {"q": "boom"})
            e.finish("recovered")
        return rec.run_id, e.run_id

    arun_id, awith_id = asyncio.run(main())
    assert publisher.flush(30)
    assert [e.kind for e in events_of(settings, sync_id, 3)] == [
        EventKind.RUN_STARTED, EventKind.TOOL_CALL, EventKind.RUN_FINISHED
    ]  # fmt: skip
    arun = events_of(settings, arun_id, 5)
    assert [e.kind for e in arun] == [
        EventKind.RUN_STARTED, EventKind.MODEL_CALL, EventKind.TOOL_CALL,
        EventKind.EXTERNAL_STATE, EventKind.RUN_FINISHED,
    ]  # fmt: skip
    assert json.loads(arun[-1].response)["output"]["depth"] == 3
    awith = events_of(settings, awith_id, 3)
    assert awith[1].error is not None and awith[2].error is None
    assert json.loads(awith[2].response) == {"output": "recovered"}


def test_with_form_records_error_when_the_body_raises(
    settings: Settings, publisher: Publisher
) -> None:
    with pytest.raises(ZeroDivisionError), recorder(publisher, input=1) as edges:
        edges.clock()
        _ = 1 / 0
    assert publisher.flush(30)
    evs = events_of(settings, edges.run_id, 4)
    assert [e.kind for e in evs] == [
        EventKind.RUN_STARTED, EventKind.CLOCK, EventKind.ERROR, EventKind.RUN_FINISHED
    ]  # fmt: skip
    assert evs[2].error is not None and evs[2].error.type == "ZeroDivisionError"
    assert evs[3].error == evs[2].error


def test_nested_crossing_gets_parent_seq(settings: Settings, publisher: Publisher) -> None:
    holder: dict[str, Recorder] = {}

    def summarise(args: JSON) -> JSON:
        return holder["rec"].model({"messages": [{"content": args["text"]}]}, model=MODEL)

    rec = Recorder(
        publisher=publisher, agent_id="a", agent_version="1", model=call_model,
        tools={"summarise": summarise},
    )  # fmt: skip
    holder["rec"] = rec
    rec.run(lambda task, e: e.tool("summarise", {"text": task}), "long text")
    assert publisher.flush(30)
    evs = events_of(settings, rec.run_id, 4)
    assert [(e.kind, e.parent_seq) for e in evs] == [
        (EventKind.RUN_STARTED, None), (EventKind.TOOL_CALL, None),
        (EventKind.MODEL_CALL, 1), (EventKind.RUN_FINISHED, None),
    ]  # fmt: skip


def _fleet_agent(task: JSON, edges: Any) -> JSON:
    for i in range(task["steps"]):
        edges.tool("search", {"q": f"{task['n']}-{i}"})
        edges.clock()
    return task["n"]


async def _async_fleet_agent(task: JSON, edges: Any) -> JSON:
    for i in range(task["steps"]):
        await edges.atool("search", {"q": f"{task['n']}-{i}"})
        await asyncio.sleep(0)  # let the other tasks interleave
        edges.clock()
    return task["n"]


def _check_fleet(settings: Settings, run_ids: list[str], steps: int) -> None:
    per_run = 2 + 2 * steps
    events = read_all(settings, per_run * len(run_ids))
    by_run: dict[str, list[int]] = {}
    for ev in events:
        by_run.setdefault(ev.run_id, []).append(ev.seq)
    assert set(by_run) == set(run_ids)
    for run_id in run_ids:
        assert by_run[run_id] == list(range(per_run)), run_id


def test_fifty_concurrent_runs_in_threads_keep_contiguous_seqs(
    settings: Settings, publisher: Publisher
) -> None:
    run_ids: list[str] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(50)

    def one(n: int) -> None:
        try:
            rec = recorder(publisher)
            run_ids.append(rec.run_id)
            barrier.wait(timeout=30)
            rec.run(_fleet_agent, {"n": n, "steps": 10})
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(n,)) for n in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors
    assert publisher.flush(60)
    _check_fleet(settings, run_ids, 10)


def test_fifty_concurrent_runs_in_asyncio_tasks_keep_contiguous_seqs(
    settings: Settings, publisher: Publisher
) -> None:
    async def main() -> list[str]:
        recs = [recorder(publisher) for _ in range(50)]
        await asyncio.gather(
            *(r.arun(_async_fleet_agent, {"n": n, "steps": 10}) for n, r in enumerate(recs))
        )
        return [r.run_id for r in recs]

    run_ids = asyncio.run(main())
    assert publisher.flush(60)
    _check_fleet(settings, run_ids, 10)


def test_parallel_crossings_within_one_run_are_published_in_seq_order(
    settings: Settings, publisher: Publisher
) -> None:
    """A slow tool started first keeps its seq; later, faster crossings wait for it."""
    release = threading.Event()

    def slow(args: JSON) -> JSON:
        assert release.wait(30)
        return "slow"

    rec = Recorder(
        publisher=publisher, agent_id="a", agent_version="1", tools={"slow": slow, "fast": search}
    )

    def agent(task: JSON, edges: Any) -> JSON:
        t = threading.Thread(target=edges.tool, args=("slow", {}))
        t.start()
        while rec._next_seq < 2:  # the slow call has taken seq 1
            threading.Event().wait(0.001)
        edges.tool("fast", {"q": "x"})
        release.set()
        t.join()
        return None

    rec.run(agent, None)
    assert publisher.flush(30)
    evs = events_of(settings, rec.run_id, 4)
    assert [(e.seq, e.kind) for e in evs] == [
        (0, EventKind.RUN_STARTED), (1, EventKind.TOOL_CALL),
        (2, EventKind.TOOL_CALL), (3, EventKind.RUN_FINISHED),
    ]  # fmt: skip
    assert json.loads(evs[1].request)["tool"] == "slow"
