"""One archived run's index rows: metadata read from its sealed records, never content.

Why a row holds what it holds (docs/index.md, "Columns"): an investigator filters on who
(tenant, agent, agent key), when (start, end), what (kinds, tools, models, error types) and
how it ended (status); a verifier needs where the run sits in the signed log (partition,
generation, leaf range, checkpoint size). Request, response and error message bytes never
enter a row, only their sizes: an encrypted run stays encrypted and an erased one erased.
A TOOL_CALL's tool name is read where it is clear (the plain request, or the clear ``tool`` an
encrypted envelope keeps), an error's type is clear in both (docs/confidentiality.md).

This module imports nothing of ``tracevault.content``: the archiver's index step calls it and
the archiver holds no content key (pyproject's ``keyless-services`` contract). The tenant is
the one clear field of the wrapped-key attribute, read here as JSON.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tracevault.errors import LogError, SchemaError
from tracevault.schemas import EventKind, TraceEvent, decode_event, decode_sealed
from tracevault.schemas.fast import sealed_columns
from tracevault.transparency import ATTEST_ATTRIBUTE, CONTESTED_PREFIX, open_agent_note

__all__ = [
    "ERASE_AGENT",
    "KINDS",
    "IndexedRun",
    "LogPlace",
    "StatusRow",
    "agent_key_of",
    "run_rows",
    "tenant_of",
    "tool_name",
]

KINDS = tuple(k.value for k in EventKind)
_KIND_NAME = {k: k.value for k in EventKind}  # a dict lookup, not the enum's value property
#: the agent id of ``tracevault erase``'s erasure records (docs/confidentiality.md)
ERASE_AGENT = "tracevault-erase"
_KEY_ATTRIBUTE = "tracevault.content.key"  # the wrapped data key: its "tenant" is clear
_ENVELOPE_END = b',"v":1}'


@dataclass(frozen=True, slots=True)
class LogPlace:
    """Where a run's leaves sit: the partition log (and generation) and the size of the
    checkpoint of the run's last archived flush (it covers every leaf of the run)."""

    log: str
    origin: str
    partition: int
    generation: str
    checkpoint_size: int


@dataclass(frozen=True, slots=True)
class StatusRow:
    """A status change of a run, appended, never rewritten: the latest ``at`` wins."""

    run_id: str
    status: str  # erased | contested | hole
    at: int  # µs since the epoch, UTC
    reason: str
    source: str  # the record or archive object that says so


@dataclass(slots=True)
class IndexedRun:
    """A run's row (``run``), its events' rows, and the status rows its records imply for
    other runs (an erasure record erases a run; a contested record contests one)."""

    run: dict[str, Any]
    events: dict[str, list[Any]] = field(default_factory=dict)  # column name -> values
    statuses: list[StatusRow] = field(default_factory=list)

    @property
    def n_events(self) -> int:
        return len(self.events.get("seq", ()))


def tool_name(req: bytes) -> str | None:
    """A TOOL_CALL request's tool name, where it is clear."""
    if req.endswith(_ENVELOPE_END):  # encrypted: the envelope keeps the tool name in clear
        at = req.rfind(b'","tool":')
        if at >= 0:
            try:
                name = json.loads(req[at + 9 : -len(_ENVELOPE_END)])
            except ValueError:
                return None
            return name if isinstance(name, str) else None
    try:
        obj = json.loads(req)
    except ValueError:
        return None
    name = obj.get("tool") if isinstance(obj, dict) else None
    return name if isinstance(name, str) else None


def _tenant(ev: TraceEvent) -> str | None:
    return tenant_of(ev.attributes.get(_KEY_ATTRIBUTE))


def tenant_of(text: str | None) -> str | None:
    """The clear tenant of a wrapped-key attribute's text (None without one)."""
    if text is None:
        return None
    try:
        tenant = json.loads(text).get("tenant")
    except (ValueError, AttributeError):
        return None
    return tenant if isinstance(tenant, str) else None


def _agent_key(ev: TraceEvent) -> str | None:
    """``<key name>+<key id hex>`` of the note that signed seq 0: the run's agent key."""
    return agent_key_of(ev.attributes.get(ATTEST_ATTRIBUTE))


def agent_key_of(note: str | None) -> str | None:
    """``<key name>+<key id hex>`` of an agent note attribute's signer (None without one)."""
    if note is None:
        return None
    try:
        _, sig, _ = open_agent_note(note)
    except LogError:
        return None
    return f"{sig.name}+{sig.key_id.hex()}"


def _decoded(run_id: str, values: Sequence[bytes]) -> tuple[list[TraceEvent], list[bytes]]:
    """Each value's event and chain hash: in one walk of the fast reader (the one verify
    uses, ~20 x the generic codec's speed) when every value has its shape, else decoded one
    by one (``SchemaError`` naming the seq that does not decode)."""
    cols = sealed_columns(values)
    if cols is not None and all(e is not None for e in cols.events):
        return [e for e in cols.events if e is not None], cols.hashes
    events, hashes = [], []
    for value in values:
        sealed = decode_sealed(value, what=f"sealed record of run {run_id!r}")
        what = f"run {run_id!r} seq {sealed.seq}"
        events.append(decode_event(sealed.raw, check_json=False, what=what))
        hashes.append(sealed.hash)
    return events, hashes


def _implied(ev: TraceEvent, source: str) -> list[StatusRow]:
    """Status rows a record's RUN_STARTED says of another run (the request is in clear:
    erasure and contested records are written without a content key)."""
    if ev.seq != 0 or ev.kind is not EventKind.RUN_STARTED:
        return []
    try:
        req = json.loads(ev.request)
    except ValueError:
        return []
    if not isinstance(req, dict):
        return []
    if ev.run_id.startswith(CONTESTED_PREFIX) and isinstance(req.get("run_id"), str):
        why = f"seq {req.get('seq')}: {req.get('reason', '')}"
        return [StatusRow(req["run_id"], "contested", ev.at, why, source)]
    erasure = req.get("input")
    if ev.agent.agent_id == ERASE_AGENT and isinstance(erasure, dict):
        target = erasure.get("run")
        if isinstance(target, str) and target:
            why = str(erasure.get("reason", ""))
            return [StatusRow(target, "erased", ev.at, why, source)]
    return []


def _event_columns(
    run_id: str, values: Sequence[bytes], leaves: Sequence[int | None]
) -> tuple[dict[str, list[Any]], list[TraceEvent]]:
    """The events table's columns of one run, built in plain lists (one flat loop: it runs
    once per archived event; no per-event row object), and the decoded events."""
    evs, hashes = _decoded(run_id, values)
    kinds, ats, tools, models, durations = [], [], [], [], []
    err_types: list[str | None] = []
    err_bytes: list[int | None] = []
    req_bytes, resp_bytes = [], []
    tool_call = EventKind.TOOL_CALL
    for ev in evs:
        kind = ev.kind
        kinds.append(_KIND_NAME[kind])
        ats.append(ev.at)
        tools.append(tool_name(ev.request) if kind is tool_call else None)
        models.append(ev.model)
        d = ev.attributes.get("duration_us") if ev.attributes else None
        durations.append(int(d) if d is not None and d.isdigit() else None)
        err = ev.error
        if err is None:
            err_types.append(None)
            err_bytes.append(None)
        else:
            err_types.append(err.type)
            err_bytes.append(len(err.message.encode("utf-8", "replace")))
        req_bytes.append(len(ev.request))
        resp_bytes.append(len(ev.response))
    cols: dict[str, list[Any]] = {
        "run_id": [run_id] * len(evs),
        "seq": [ev.seq for ev in evs],
        "kind": kinds,
        "at": ats,
        "tool": tools,
        "model": models,
        "duration_us": durations,
        "error_type": err_types,
        "request_bytes": req_bytes,
        "response_bytes": resp_bytes,
        "error_bytes": err_bytes,
        "hash": [h.hex() for h in hashes],
        "leaf": list(leaves),
    }
    return cols, evs


def run_rows(
    run_id: str,
    values: Sequence[bytes],
    leaves: Sequence[int | None],
    place: LogPlace | None,
    *,
    finished: bool,
    head: str,
) -> IndexedRun:
    """The rows of one run from its sealed values in seq order (``leaves``: each value's
    leaf index in ``place``'s log). ``SchemaError`` names the value that does not decode."""
    if len(values) != len(leaves):
        raise ValueError("run_rows: one leaf per value")
    if not values:
        raise SchemaError(f"run {run_id!r} has no archived record to index")
    cols, evs = _event_columns(run_id, values, leaves)
    first, last = evs[0], evs[-1]
    counts = dict.fromkeys(KINDS, 0)
    for k in cols["kind"]:
        counts[k] += 1
    ended_in_error = last.kind is EventKind.RUN_FINISHED and last.error is not None
    status = "errored" if ended_in_error else ("finished" if finished else "unfinished")
    run = {
        "run_id": run_id,
        "tenant": _tenant(first),
        "agent_id": first.agent.agent_id,
        "agent_key": _agent_key(first),
        "agent_version": first.agent.agent_version,
        "started": first.at,
        "ended": max(cols["at"]),
        "status": status,
        "events": len(evs),
        **{f"n_{k.lower()}": n for k, n in counts.items()},
        "tools": sorted({t for t in cols["tool"] if t is not None}),
        "models": sorted({m for m in cols["model"] if m is not None}),
        "error_types": sorted({e for e in cols["error_type"] if e is not None}),
        "partition": None if place is None else place.partition,
        "generation": None if place is None else place.generation,
        "origin": None if place is None else place.origin,
        "log": None if place is None else place.log,
        "first_leaf": min((x for x in leaves if x is not None), default=None),
        "last_leaf": max((x for x in leaves if x is not None), default=None),
        "checkpoint_size": None if place is None else place.checkpoint_size,
        "head": head,
    }
    return IndexedRun(run, cols, _implied(first, f"run {run_id}"))
