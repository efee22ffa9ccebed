"""Where the archiver puts a ``sealed`` record it must not archive, so that it can go on.

A record that does not parse, names a run the archive cannot hold as run history (an id
outside the run-id grammar, sealed before it, that has no readable name), has a sealing time
that is no date, does not continue its run's hash chain, or comes after such a record (a
hole) is never archived: the archive never skips a seq. It used to stop the archiver, and
every restart stopped on the same record. Now it is quarantined and the archiver keeps
archiving every other run.

The quarantine lives in the archive store itself, as one immutable, retention-locked object
per refused record under ``quarantine/`` (``tracevault.archive.layout.quarantine_key``), not
on a Kafka topic: a chain break on ``sealed`` is evidence of tampering or a bug, and it has to
outlive Kafka's retention next to the archive it concerns, under the same lock. The object is
ASCII JSON (sorted keys) with the record's exact key and value (base64), its topic position,
the reason and a detail that names the run, the seq and what is wrong (docs/design.md,
"Archive").
The quarantine is written before the record's offset can be committed, so nothing is lost.
"""

from __future__ import annotations

import base64
import json
import logging
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from enum import StrEnum

from tracevault.archive import ObjectStore, check_key
from tracevault.archive.layout import (
    MAX_RUN_SEGMENT,
    quarantine_key,
    run_id_of_segment,
    run_prefix,
    run_segment,
)
from tracevault.errors import ConfigError, NotFoundError
from tracevault.runid import run_id_problem

__all__ = ["Quarantined", "QuarantineReason", "quarantine", "unarchivable"]

log = logging.getLogger(__name__)

#: ``sealed_at`` (micros) must be a date (years 1..9999): the day index is derived from it.
MIN_SEALED_AT = int(datetime(1, 1, 2, tzinfo=UTC).timestamp()) * 1_000_000
MAX_SEALED_AT = int(datetime(9999, 12, 30, tzinfo=UTC).timestamp()) * 1_000_000


class QuarantineReason(StrEnum):
    """Why the archiver refused a sealed record (the ``reason`` of its quarantine object)."""

    UNDECODABLE = "undecodable"
    """Not a SealedEvent the archiver can read (no value, bad marker, truncated, malformed)."""
    INVALID = "invalid"
    """Reads, but cannot be archived: a sealing time that is no date, or a run id outside
    the run-id grammar with no readable archive name (sealed before ids were checked)."""
    CHAIN = "chain"
    """The next seq of its run, but ``prev_hash``/``hash`` do not continue the run's chain."""
    HOLE = "hole"
    """A seq past the next one of its run: a record before it is missing or quarantined."""
    NOT_IN_LOG = "not-in-log"
    """Parses, but no verified checkpoint lists its leaf: another producer appended it."""
    BAD_CHECKPOINT = "bad-checkpoint"
    """A checkpoint record that failed verification (unknown key, wrong origin, root, gap)."""
    INTERNAL = "internal"
    """The archiver failed on this record in a way it did not foresee (a bug)."""


@dataclass(frozen=True, slots=True)
class Quarantined:
    """One refused record, as stored: everything needed to look at it or to put it back."""

    reason: str
    detail: str
    topic: str
    partition: int
    offset: int
    key_b64: str | None
    value_b64: str | None
    run_id: str | None = None
    seq: int | None = None
    version: int = 1

    def to_json(self) -> bytes:
        # ASCII with \u escapes: any text an exception message carries stays valid JSON
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":")).encode("ascii")

    @classmethod
    def from_json(cls, data: bytes) -> Quarantined:
        return cls(**json.loads(data))

    @property
    def value(self) -> bytes | None:
        return None if self.value_b64 is None else base64.b64decode(self.value_b64)


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def unarchivable(run_id: str, sealed_at: int) -> str | None:
    """Why a parsed record cannot go into the archive (None: it can)."""
    if not MIN_SEALED_AT <= sealed_at <= MAX_SEALED_AT:
        return f"sealed_at {sealed_at} is not a time between the years 1 and 9999"
    # A run sealed before the run-id grammar whose id fits neither the grammar nor a readable
    # name ("." , "..", 85 CJK characters, 255 ASCII bytes): its records are quarantined, so
    # its bytes are kept, named by the rule (docs/design.md, "Run ids"). An id of the grammar
    # always archives, under a mapped name if it needs one; so does an old id that has a
    # readable name (as it did before the grammar).
    problem = run_id_problem(run_id)
    if problem is not None and run_id_of_segment(run_segment(run_id)) != run_id:
        return f"{problem}; it was sealed before run ids were checked and has no readable name"
    # The layout names every string; this stays as the net for a layout bug.
    seg = run_prefix(run_id)
    try:
        check_key(seg + "final.receipt.json")
    except ConfigError:
        return f"run id {run_id[:40]!r} gives no valid archive path ({seg[:60]!r})"
    if len(seg) > len("runs//") + MAX_RUN_SEGMENT:
        return (
            f"run id {run_id[:40]!r} gives an archive path segment of {len(seg) - 6} bytes, over "
            f"the {MAX_RUN_SEGMENT} that every store can name with the suffixes of a run's objects"
        )
    return None


def quarantine(  # noqa: PLR0917 - one call per refused record, every field named by the caller
    store: ObjectStore,
    retain_until: datetime,
    reason: QuarantineReason,
    detail: str,
    topic: str,
    partition: int,
    offset: int,
    key: bytes | None,
    value: bytes | None,
    run_id: str | None = None,
    seq: int | None = None,
) -> str:
    """Write the quarantine object of one record (once: a re-delivered record keeps the first)."""
    obj_key = quarantine_key(topic, partition, offset)
    record = Quarantined(
        reason.value, detail, topic, partition, offset, _b64(key), _b64(value), run_id, seq
    )
    try:
        store.head(obj_key)
    except NotFoundError:
        store.put(obj_key, record.to_json(), retain_until=retain_until)
    else:
        log.info("%s@%d is already quarantined as %s", topic, offset, obj_key)
    log.error(
        "ALERT archiver quarantined %s[%d]@%d (%s): %s; kept as %s in %s",
        topic,
        partition,
        offset,
        reason.value,
        detail,
        obj_key,
        store.url,
    )
    return obj_key
