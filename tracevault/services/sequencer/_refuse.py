"""Refusals: a raw record the rules do not seal goes to the DLQ, copied with its reason.

A part of the run book (``_rules``): every rule that refuses a record says why through
:meth:`Refusals.refuse`; a record the rules failed on (an exception they did not foresee)
goes through :meth:`Refusals.unexpected`, as DLQ ``internal``, unless it got through: no
record can stop the sequencer (docs/design.md, "Sequencer rules").
"""

from __future__ import annotations

import hashlib
import logging

from tracevault.services.sequencer._records import DlqReason, DlqRecord
from tracevault.services.sequencer._state import BatchOutput, _Run, _Source

__all__ = ["Refusals"]

# the rules' logger: their ALERT lines keep one name (log filters, tests)
log = logging.getLogger("tracevault.services.sequencer._rules")


def _sha256(data: bytes | None) -> str:
    return hashlib.sha256(data or b"").hexdigest()


class Refusals:
    """DLQ records of refused raw records (the book's runs and waiting set: shared, read)."""

    def __init__(
        self, raw_topic: str, runs: dict[str, _Run], waiting: set[str], max_copy_bytes: int
    ) -> None:
        self.raw_topic = raw_topic
        self.runs = runs
        self._waiting = waiting
        # key plus value copied into a DLQ record; beyond this only sizes and SHA-256 go in
        self._max_copy = max_copy_bytes

    def refuse(
        self,
        out: BatchOutput,
        src: _Source,
        reason: DlqReason,
        detail: str,
        *,
        run_id: str | None = None,
        seq: int | None = None,
    ) -> None:
        key, value, partition, offset = src
        if len(key or b"") + len(value or b"") > self._max_copy:
            # Too large to copy: a DLQ record over the producer's limit would fail the whole
            # transaction at every retry. The original stays on raw until its retention.
            detail += (
                f"; key ({len(key or b'')} bytes, sha256 {_sha256(key)}) and value "
                f"({len(value or b'')} bytes, sha256 {_sha256(value)}) are too large to copy "
                f"here: the original is {self.raw_topic}[{partition}]@{offset}"
            )
            key = value = None
        out.dlq.append(
            DlqRecord(reason, detail, key, value, self.raw_topic, partition, offset, run_id, seq)
        )

    def unexpected(self, out: BatchOutput, src: _Source, exc: Exception) -> None:
        """Account for a record the rules failed on: DLQ ``internal``, unless it got through.

        Every step of the rules is atomic (a seal, a hold, a refusal), so the book is
        consistent here; the record either took effect before the failure (sealed or held:
        then a held event behind it failed, and that one has its own DLQ record) or not at
        all, and then it goes to the DLQ with the exception named.
        """
        _key, _value, partition, offset = src
        where = f"{self.raw_topic}[{partition}]@{offset}"
        log.error(
            "ALERT sequencer rules failed on %s (%s: %s); the record goes to the DLQ as %r",
            where,
            type(exc).__name__,
            exc,
            DlqReason.INTERNAL.value,
            exc_info=exc,
        )
        here = (partition, offset)
        if (
            any((s.source_partition, s.source_offset) == here for s in out.sealed)
            or any((d.source_partition, d.source_offset) == here for d in out.dlq)
            or any(
                (h.source_partition, h.source_offset) == here
                for r in self._waiting
                if r in self.runs
                for h in self.runs[r].held.values()
            )
        ):
            return
        self.refuse(
            out,
            src,
            DlqReason.INTERNAL,
            f"{where}: the sequencer failed on this record ({type(exc).__name__}: {exc}); "
            "it is kept here unchanged, and the service went on",
        )
