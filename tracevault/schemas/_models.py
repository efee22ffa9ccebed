"""pydantic models for events leaving as text: ``replay show --json`` and evidence bundles.

Inside the process events are the plain dataclasses in ``_events``; these models fix the JSON
shape users and auditors read. Nothing is turned back into an event from this JSON: an event
is only ever read from its recorded bytes, which the chain covers.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from tracevault.schemas._events import EventKind, TraceEvent, micros_to_datetime

__all__ = ["AgentModel", "ErrorModel", "EventModel"]


class AgentModel(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    agent_id: str
    agent_version: str
    host: str
    harness: str
    sdk_version: str


class ErrorModel(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    type: str
    message: str


class EventModel(BaseModel):
    """One TraceEvent as JSON: request/response as parsed JSON values, time as ISO 8601 too."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    run_id: str = Field(min_length=1)
    seq: int = Field(ge=0)
    kind: EventKind
    at: int = Field(description="microseconds since the Unix epoch, UTC, as recorded")
    at_iso: str | None = None
    agent: AgentModel
    model: str | None = None
    seed: int | None = None
    request: Any = None
    response: Any = None
    error: ErrorModel | None = None
    idempotency_key: str | None = None
    parent_seq: int | None = None
    attributes: dict[str, str] = Field(default_factory=dict)

    @classmethod
    def from_event(cls, ev: TraceEvent) -> EventModel:
        return cls(
            run_id=ev.run_id,
            seq=ev.seq,
            kind=ev.kind,
            at=ev.at,
            at_iso=micros_to_datetime(ev.at).isoformat(),
            agent=AgentModel(
                agent_id=ev.agent.agent_id,
                agent_version=ev.agent.agent_version,
                host=ev.agent.host,
                harness=ev.agent.harness,
                sdk_version=ev.agent.sdk_version,
            ),
            model=ev.model,
            seed=ev.seed,
            request=json.loads(ev.request) if ev.request else None,
            response=json.loads(ev.response) if ev.response else None,
            error=None
            if ev.error is None
            else ErrorModel(type=ev.error.type, message=ev.error.message),
            idempotency_key=ev.idempotency_key,
            parent_seq=ev.parent_seq,
            attributes=dict(ev.attributes),
        )
