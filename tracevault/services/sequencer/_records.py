"""What the sequencer writes besides heads: sealed values, GAP markers and DLQ records.

GAP rule (the replayer and every verifier rely on it): a gap of missing seqs ``a..b`` that is
not filled within the gap timeout is sealed as **one GAP event per missing seq**, at that
seq, in order. Each GAP event's request is ``{"missing_from": a, "missing_to": b}`` (the
whole range it belongs to), its response ``null``, its agent the sequencer. So the sealed seqs
of a run are always exactly ``0, 1, 2, ...`` with no hole and no repeat, and the chain links
every one of them: a verifier checks ``seq == previous seq + 1`` and the hash link, nothing
else. A GAP's ``source_offset`` in the SealedEvent is ``-1`` (it was never on the raw topic).
DLQ reasons and headers are listed for operators in docs/design.md ("Sequencer batch
protocol").
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from tracevault import __version__
from tracevault.schemas import (
    MAGIC,
    AgentInfo,
    ErrorInfo,
    EventKind,
    SealedEvent,
    TraceEvent,
    avro_long,
    canonical_json,
    default_schemas,
    encode_event,
    encode_sealed,
)

__all__ = [
    "DLQ_HEADER_PREFIX",
    "GAP_AGENT_ID",
    "DlqReason",
    "DlqRecord",
    "avro_str",
    "closed_event",
    "gap_event",
    "now_micros",
    "sealed_prefix",
    "sealed_v1",
    "sealed_v1_header",
    "sealed_value",
    "sequencer_event",
]

GAP_AGENT_ID = "tracevault-sequencer"
DLQ_HEADER_PREFIX = "tracevault."


class DlqReason(StrEnum):
    """Why the sequencer refused an event; the value of the ``tracevault.reason`` header."""

    UNDECODABLE = "undecodable"
    """Not a TraceEvent we can read: no ``C3 01`` marker, unknown schema, truncated body."""
    INVALID = "invalid"
    """Decodes, but breaks a rule: key is not the run id, wrong partition for the key,
    non-canonical JSON, negative seq, or a producer-written GAP."""
    CONFLICT = "conflict"
    """Same seq as an event already sealed (or held) for the run, different bytes."""
    LATE = "late"
    """Arrived after its seq was sealed as a GAP marker."""
    AFTER_FINISH = "after_finish"
    """A seq past the run's sealed RUN_FINISHED."""
    OUT_OF_RANGE = "out_of_range"
    """A seq so far past the head (``sequencer_max_gap``) that holding it is not credible."""
    STALE = "stale"
    """An event of a run the sequencer does not know, recorded longer ago than the
    finished-run horizon: it may be a late resend of a run finished and forgotten, and
    sealing it would start a second chain (docs/fleet.md). A spool refuses such events
    before sending them; this catches the rest."""
    INTERNAL = "internal"
    """The sequencer failed on this record in a way its rules did not foresee (a bug, or
    held bytes that no longer decode): kept unchanged, the exception named in the detail,
    so one record can never stop the service."""


@dataclass(frozen=True, slots=True)
class DlqRecord:
    """One refused event: original bytes and key, where it came from, and why."""

    reason: DlqReason
    detail: str
    key: bytes | None
    value: bytes | None
    source_topic: str
    source_partition: int
    source_offset: int
    run_id: str | None = None
    seq: int | None = None

    def headers(self, sequencer_id: str) -> list[tuple[str, str | bytes | None]]:
        p = DLQ_HEADER_PREFIX
        out: list[tuple[str, str | bytes | None]] = [
            (p + "reason", self.reason.value.encode()),
            # bounded: the detail may quote the record, and the DLQ record must fit Kafka's limit
            (p + "detail", self.detail.encode("utf-8", "replace")[:4096]),
            (p + "source.topic", self.source_topic.encode()),
            (p + "source.partition", str(self.source_partition).encode()),
            (p + "source.offset", str(self.source_offset).encode()),
            (p + "sequencer", sequencer_id.encode()),
        ]
        if self.run_id is not None:
            out.append((p + "run_id", self.run_id.encode("utf-8", "replace")[:1024]))
        if self.seq is not None:
            out.append((p + "seq", str(self.seq).encode()))
        return out


def now_micros() -> int:
    return time.time_ns() // 1000


_HOST = socket.gethostname()


def _sequencer_event(
    run_id: str, seq: int, kind: EventKind, request: object, sequencer_id: str, **extra: Any
) -> bytes:
    """A TraceEvent the sequencer itself writes (agent ``GAP_AGENT_ID``, harness
    ``sequencer:<id>``), so no reader mistakes it for the agent's own."""
    ev = TraceEvent(
        run_id=run_id,
        seq=seq,
        kind=kind,
        at=now_micros(),
        agent=AgentInfo(
            agent_id=GAP_AGENT_ID,
            agent_version=__version__,
            host=_HOST,
            harness=f"sequencer:{sequencer_id}",
            sdk_version=__version__,
        ),
        request=canonical_json(request),
        response=canonical_json(None),
        **extra,
    )
    return encode_event(ev)


#: The same, for the sequencer's other records (the contested record, ``_attest``).
sequencer_event = _sequencer_event


def gap_event(
    run_id: str, seq: int, missing_from: int, missing_to: int, sequencer_id: str
) -> bytes:
    """The raw value of the GAP marker sealed at ``seq`` (one of ``missing_from..missing_to``)."""
    request = {"missing_from": missing_from, "missing_to": missing_to}
    return _sequencer_event(run_id, seq, EventKind.GAP, request, sequencer_id)


def closed_event(run_id: str, seq: int, idle_s: float, sequencer_id: str) -> bytes:
    """The RUN_FINISHED marker the sequencer seals for a run idle past the idle timeout;
    its error says why (docs/fleet.md)."""
    return _sequencer_event(
        run_id,
        seq,
        EventKind.RUN_FINISHED,
        {"closed_by": "sequencer", "idle_s": round(idle_s, 3)},
        sequencer_id,
        error=ErrorInfo(
            type="RunAbandoned",
            message=f"no event for {idle_s:.0f}s (sequencer_idle_close_s): the agent is taken "
            "to have died; the sequencer closed the run",
        ),
        attributes={"tracevault.closed": "idle"},
    )


_SEALED_V1_HEADER: bytes | None = None


def sealed_v1_header() -> bytes | None:
    """``C3 01`` + fingerprint when SealedEvent v1 is the current version (else None)."""
    global _SEALED_V1_HEADER  # noqa: PLW0603 - computed on first use, not at import
    if _SEALED_V1_HEADER is None:
        current = default_schemas().get("SealedEvent")
        _SEALED_V1_HEADER = MAGIC + current.fingerprint if current.version == 1 else b""
    return _SEALED_V1_HEADER or None


_RUN_PREFIX: dict[str, bytes] = {}
_SID_SUFFIX: dict[str, bytes] = {}
_LAST_AT: tuple[int, bytes] = (-1, b"")


def sealed_value(
    *,
    run_id: str,
    seq: int,
    prev_hash: bytes,
    hash_: bytes,
    raw: bytes,
    source_partition: int,
    source_offset: int,
    sequencer_id: str,
    sealed_at: int | None = None,
) -> bytes:
    """The single-object Avro value of a SealedEvent, written directly.

    This is the sequencer's hot path: building the record dict for fastavro cost more than
    sealing itself. The layout is SealedEvent v1's field order; a test pins it byte for byte
    to ``encode_sealed``, and a newer current version falls back to ``encode_sealed``. The
    encoded run id, sequencer id and sealing time are reused across the records of a batch.
    """
    global _LAST_AT  # noqa: PLW0603 - a one-entry cache of the batch's encoded sealing time
    if sealed_at is None:
        sealed_at = now_micros()
    header = sealed_v1_header()
    if header is None or len(prev_hash) != 32 or len(hash_) != 32:
        return encode_sealed(
            SealedEvent(
                run_id=run_id,
                seq=seq,
                prev_hash=prev_hash,
                hash=hash_,
                raw=raw,
                sealed_at=sealed_at,
                source_partition=source_partition,
                source_offset=source_offset,
                sequencer_id=sequencer_id,
            )
        )
    prefix = _RUN_PREFIX.get(run_id)
    if prefix is None:
        if len(_RUN_PREFIX) > 100_000:
            _RUN_PREFIX.clear()
        prefix = _RUN_PREFIX[run_id] = sealed_prefix(header, run_id)
    suffix = _SID_SUFFIX.get(sequencer_id)
    if suffix is None:
        suffix = _SID_SUFFIX[sequencer_id] = avro_str(sequencer_id)
    if _LAST_AT[0] != sealed_at:
        _LAST_AT = (sealed_at, avro_long(sealed_at))
    return sealed_v1(
        prefix, seq, prev_hash, hash_, raw, _LAST_AT[1], source_partition, source_offset, suffix
    )


def avro_str(text: str) -> bytes:
    """An Avro string: length, then the UTF-8 bytes."""
    b = text.encode("utf-8")
    return avro_long(len(b)) + b


def sealed_prefix(header: bytes, run_id: str) -> bytes:
    """The first bytes of every SealedEvent v1 value of ``run_id``: header and run id."""
    return header + avro_str(run_id)


def sealed_v1(  # noqa: PLR0917 - positional: called once per event
    prefix: bytes,
    seq: int,
    prev_hash: bytes,
    hash_: bytes,
    raw: bytes,
    sealed_at: bytes,
    source_partition: int,
    source_offset: int,
    sequencer_id: bytes,
) -> bytes:
    """A SealedEvent v1 value from pre-encoded pieces (positional: one call per event).

    ``prefix`` from :func:`sealed_prefix`; ``sealed_at`` the Avro long, ``sequencer_id`` the
    Avro string, already encoded; both hashes 32 bytes. :func:`sealed_value` writes through
    here, so its byte-for-byte test against ``encode_sealed`` covers this layout.
    """
    return b"".join(
        (
            prefix,
            avro_long(seq),
            prev_hash,
            hash_,
            avro_long(len(raw)),
            raw,
            sealed_at,
            avro_long(source_partition),
            avro_long(source_offset),
            sequencer_id,
        )
    )
