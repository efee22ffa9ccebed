"""A minimal recorder for the replayer's tests: runs an agent live and returns its events.

It follows ``tracevault.edges`` exactly (crossings from the ``*_crossing`` functions, the
payload table, the run-end convention), so runs built here are what the producer's Recorder
publishes; ``seal`` chains them the way the sequencer does, with ``tracevault.chain``.
Golden runs are recorded with the real Recorder (``tests/replayer/make_golden.py``); this
helper builds the many small variants the corpora need without Kafka.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from tracevault.callsite import SITE_ATTRIBUTE, add_harness_module, call_site
from tracevault.chain import genesis, link
from tracevault.edges import (
    Crossing,
    clock_crossing,
    decision_crossing,
    model_crossing,
    random_crossing,
    state_crossing,
    tool_crossing,
)
from tracevault.producer._attest import Attestor
from tracevault.schemas import (
    AgentInfo,
    ErrorInfo,
    EventKind,
    SealedEvent,
    TraceEvent,
    canonical_json,
    encode_event,
)
from tracevault.transparency import Ed25519Signer, NoteSigner

add_harness_module(__name__)  # the site recorded is the agent's line, as the Recorder's
AGENT = AgentInfo("test-agent", "1.0.0", "test-host", "pytest", "0.1.0")
T0 = 1_790_000_000_000_000  # micros


def error_info(exc: BaseException) -> ErrorInfo:
    """The type name as the Recorder writes it: bare for built-ins, module-qualified otherwise."""
    cls = type(exc)
    name = (
        cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    )
    return ErrorInfo(name, str(exc))


@dataclass
class LiveEdges:
    run_id: str
    model_fn: Callable[..., Any]
    tools: dict[str, Callable[..., Any]]
    states: dict[str, Any] = field(default_factory=dict)
    clock_values: list[float] = field(
        default_factory=lambda: [1_790_000_000.5 + i for i in range(100)]
    )
    events: list[TraceEvent] = field(default_factory=list)

    sites: bool = True

    def emit(
        self, c: Crossing, response: Any, error: ErrorInfo | None = None, seed: int | None = None
    ) -> None:
        boundary = c.kind in (EventKind.RUN_STARTED, EventKind.RUN_FINISHED, EventKind.ERROR)
        site = call_site() if self.sites and not boundary else None
        self.events.append(
            TraceEvent(
                run_id=self.run_id,
                seq=len(self.events),
                kind=c.kind,
                at=T0 + 1000 * len(self.events),
                agent=AGENT,
                request=canonical_json(c.request, field="request"),
                response=canonical_json(response, field="response"),
                model=c.model,
                seed=c.seed if seed is None else seed,
                error=error,
                attributes={} if site is None else {SITE_ATTRIBUTE: site},
            )
        )

    def model(self, request: Any, *, model: str, seed: int | None = None) -> Any:
        c = model_crossing(request, model=model, seed=seed)
        out = self.model_fn(request, model=model, seed=seed)
        self.emit(c, out)
        return out

    async def amodel(self, request: Any, *, model: str, seed: int | None = None) -> Any:
        return self.model(request, model=model, seed=seed)

    def tool(self, name: str, args: Any) -> Any:
        c = tool_crossing(name, args)
        try:
            out = self.tools[name](args)
        except Exception as exc:
            self.emit(c, None, error_info(exc))
            raise
        self.emit(c, out)
        return out

    async def atool(self, name: str, args: Any) -> Any:
        return self.tool(name, args)

    def clock(self, name: str = "now") -> float:
        t = self.clock_values.pop(0)
        self.emit(clock_crossing(name), {"time": t})
        return t

    def random(self, name: str = "rng", *, seed: int | None = None) -> random.Random:
        s = seed if seed is not None else 4242 + len(self.events)
        self.emit(random_crossing(name, seed), {"seed": s}, seed=s)
        return random.Random(s)

    def state(self, name: str, read: Callable[[], Any] | None = None) -> Any:
        v = read() if read is not None else self.states.get(name)
        self.emit(state_crossing(name), v)
        return v

    async def astate(self, name: str, read: Any = None) -> Any:
        v = (await read()) if read is not None else self.states.get(name)
        self.emit(state_crossing(name), v)
        return v

    def decision(self, name: str, choice: Any, *, options: list[Any] | None = None) -> Any:
        self.emit(decision_crossing(name, choice, options), None)
        return choice


def _begin(edges: LiveEdges, agent_input: Any) -> None:
    edges.emit(Crossing(EventKind.RUN_STARTED, {"input": agent_input}), None)


def _end(edges: LiveEdges, output: Any, exc: BaseException | None, finish: bool) -> None:
    if exc is not None:
        err = error_info(exc)
        edges.emit(Crossing(EventKind.ERROR, {}), None, err)
        if finish:
            edges.emit(Crossing(EventKind.RUN_FINISHED, {}), {"output": None}, err)
    elif finish:
        edges.emit(Crossing(EventKind.RUN_FINISHED, {}), {"output": output})


def record(
    agent: Callable[..., Any],
    agent_input: Any,
    *,
    run_id: str,
    model_fn: Callable[..., Any],
    tools: dict[str, Callable[..., Any]],
    states: dict[str, Any] | None = None,
    finish: bool = True,
) -> list[TraceEvent]:
    """Run ``agent`` live against fake model/tools and return its events (agent errors kept)."""
    edges = LiveEdges(run_id, model_fn, tools, dict(states or {}))
    _begin(edges, agent_input)
    try:
        output = agent(agent_input, edges)
    except Exception as exc:
        _end(edges, None, exc, finish)
    else:
        _end(edges, output, None, finish)
    return edges.events


async def arecord(
    agent: Callable[..., Any],
    agent_input: Any,
    *,
    run_id: str,
    model_fn: Callable[..., Any],
    tools: dict[str, Callable[..., Any]],
    states: dict[str, Any] | None = None,
) -> list[TraceEvent]:
    edges = LiveEdges(run_id, model_fn, tools, dict(states or {}))
    _begin(edges, agent_input)
    try:
        output = await agent(agent_input, edges)
    except Exception as exc:
        _end(edges, None, exc, True)
    else:
        _end(edges, output, None, True)
    return edges.events


def signed_raws(events: list[TraceEvent], key: NoteSigner | None = None) -> list[bytes]:
    """``events`` encoded as a Recorder with an agent key writes them: notes in RUN_STARTED,
    every 64 events and RUN_FINISHED, signed by ``key`` (default: the session's agent key,
    TRACEVAULT_AGENT_KEY, tests/conftest.py), so a deployment's verify proves who wrote them."""
    signer = key or os.environ.get("TRACEVAULT_AGENT_KEY")
    if signer is None:
        return [encode_event(e) for e in events]
    if isinstance(signer, str):
        signer = Ed25519Signer.from_skey(signer)

    def encode(f: Any) -> bytes:
        ev = events[f[0] - events[0].seq]
        return encode_event(replace(ev, attributes={**ev.attributes, **(f[10] or {})}))

    att = Attestor(events[0].run_id, encode, signer, every=64, interval_s=1e9)
    return [att.encode_fields((e.seq, e.kind, *(None,) * 8, {}, None)) for e in events]  # type: ignore[arg-type]


def seal(
    events: list[TraceEvent],
    *,
    partition: int = 0,
    sequencer_id: str = "test",
    signed: bool = True,
) -> list[SealedEvent]:
    """Encode and chain ``events`` like the sequencer does; ``signed``: as an agent with the
    session's agent key wrote them (:func:`signed_raws`), else with no agent note."""
    return seal_raws(
        signed_raws(events) if signed else [encode_event(e) for e in events],
        events[0].run_id,
        partition=partition,
        sequencer_id=sequencer_id,
    )


def seal_raws(
    raws: list[bytes],
    run_id: str,
    *,
    partition: int = 0,
    sequencer_id: str = "test",
    first_seq: int = 0,
    prev: bytes | None = None,
) -> list[SealedEvent]:
    out: list[SealedEvent] = []
    h = genesis(run_id) if prev is None else prev
    for i, raw in enumerate(raws):
        nh = link(h, raw)
        out.append(
            SealedEvent(run_id, first_seq + i, h, nh, raw, T0 + i, partition, i, sequencer_id)
        )
        h = nh
    return out
