"""Plain dataclasses for the records in the published schemas.

These are the in-process shapes; pydantic models (``_models``) sit only where data enters
from outside (JSON exports, CLI input). Timestamps stay integer microseconds since the Unix
epoch, exactly as Avro stores ``timestamp-micros``: recorded, never recomputed or rounded.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

__all__ = ["AgentInfo", "ErrorInfo", "EventKind", "Interleave", "SealedEvent", "TraceEvent"]
__all__ += ["micros_to_datetime"]


class EventKind(StrEnum):
    RUN_STARTED = "RUN_STARTED"
    MODEL_CALL = "MODEL_CALL"
    TOOL_CALL = "TOOL_CALL"
    DECISION = "DECISION"
    CLOCK = "CLOCK"
    RANDOM = "RANDOM"
    EXTERNAL_STATE = "EXTERNAL_STATE"
    ERROR = "ERROR"
    RUN_FINISHED = "RUN_FINISHED"
    GAP = "GAP"


def micros_to_datetime(micros: int) -> datetime:
    """Avro timestamp-micros to an aware UTC datetime (for display only)."""
    return datetime.fromtimestamp(micros / 1_000_000, tz=UTC)


@dataclass(frozen=True, slots=True)
class AgentInfo:
    """Provenance: which agent build, on which host and harness, with which SDK."""

    agent_id: str
    agent_version: str
    host: str
    harness: str
    sdk_version: str


@dataclass(frozen=True, slots=True)
class ErrorInfo:
    """The exception a crossing raised: replay raises it again."""

    type: str
    message: str


@dataclass(frozen=True, slots=True)
class Interleave:
    """Where a crossing sits among the run's concurrent ones (TraceEvent v2).

    Replay hands results back in the recorded interleaving with it: a crossing completes
    only after ``started_at_done`` crossings have started and ``done_order`` others have
    completed; ``branch_prev`` ties a call to its branch (docs/design.md, "Concurrency
    inside a run").
    """

    branch_prev: int | None
    started_at_done: int
    done_order: int


@dataclass(frozen=True, slots=True)
class TraceEvent:
    """One crossing of the harness boundary (``io.tracevault.v1.TraceEvent``).

    ``request`` and ``response`` are canonical JSON bytes (see ``canonical_json``); ``at`` is
    microseconds since the epoch, UTC.
    """

    run_id: str
    seq: int
    kind: EventKind
    at: int
    agent: AgentInfo
    request: bytes
    response: bytes
    model: str | None = None
    seed: int | None = None
    error: ErrorInfo | None = None
    idempotency_key: str | None = None
    parent_seq: int | None = None
    attributes: Mapping[str, str] = field(default_factory=dict)
    interleave: Interleave | None = None

    def to_avro(self) -> dict[str, Any]:
        agent = self.agent
        err = self.error
        il = self.interleave
        return {
            "run_id": self.run_id,
            "seq": self.seq,
            "kind": self.kind.value,
            "at": self.at,
            "agent": {
                "agent_id": agent.agent_id,
                "agent_version": agent.agent_version,
                "host": agent.host,
                "harness": agent.harness,
                "sdk_version": agent.sdk_version,
            },
            "model": self.model,
            "seed": self.seed,
            "request": self.request,
            "response": self.response,
            "error": None if err is None else {"type": err.type, "message": err.message},
            "idempotency_key": self.idempotency_key,
            "parent_seq": self.parent_seq,
            "attributes": dict(self.attributes),
            "interleave": None
            if il is None
            else {
                "branch_prev": il.branch_prev,
                "started_at_done": il.started_at_done,
                "done_order": il.done_order,
            },
        }

    @classmethod
    def from_avro(cls, rec: Mapping[str, Any]) -> TraceEvent:
        a = rec["agent"]
        e = rec["error"]
        il = rec.get("interleave")  # absent only when read with the v1 schema as reader
        return cls(
            run_id=rec["run_id"],
            seq=rec["seq"],
            kind=EventKind(rec["kind"]),
            at=rec["at"],
            agent=AgentInfo(
                a["agent_id"], a["agent_version"], a["host"], a["harness"], a["sdk_version"]
            ),
            request=rec["request"],
            response=rec["response"],
            model=rec["model"],
            seed=rec["seed"],
            error=None if e is None else ErrorInfo(e["type"], e["message"]),
            idempotency_key=rec["idempotency_key"],
            parent_seq=rec["parent_seq"],
            attributes=rec["attributes"],
            interleave=None
            if il is None
            else Interleave(il["branch_prev"], il["started_at_done"], il["done_order"]),
        )


@dataclass(frozen=True, slots=True)
class SealedEvent:
    """A raw TraceEvent value sealed into its run's chain (``io.tracevault.v1.SealedEvent``).

    The chain covers ``raw`` and ``prev_hash``; ``sealed_at``, the source position and the
    sequencer id are transport metadata that verifiers report but do not trust.
    """

    run_id: str
    seq: int
    prev_hash: bytes
    hash: bytes
    raw: bytes
    sealed_at: int
    source_partition: int
    source_offset: int
    sequencer_id: str

    def to_avro(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "seq": self.seq,
            "prev_hash": self.prev_hash,
            "hash": self.hash,
            "raw": self.raw,
            "sealed_at": self.sealed_at,
            "source_partition": self.source_partition,
            "source_offset": self.source_offset,
            "sequencer_id": self.sequencer_id,
        }

    @classmethod
    def from_avro(cls, rec: Mapping[str, Any]) -> SealedEvent:
        return cls(
            run_id=rec["run_id"],
            seq=rec["seq"],
            prev_hash=rec["prev_hash"],
            hash=rec["hash"],
            raw=rec["raw"],
            sealed_at=rec["sealed_at"],
            source_partition=rec["source_partition"],
            source_offset=rec["source_offset"],
            sequencer_id=rec["sequencer_id"],
        )
