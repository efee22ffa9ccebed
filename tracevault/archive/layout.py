"""Where things live in the archive, and what a receipt says.

This is the contract between the archiver (which writes) and the replayer (which reads and
verifies). Every key is derived here, nowhere else::

    runs/<run>/seg-<first:012d>-<last:012d>.avro            Avro OCF of SealedEvent records
    runs/<run>/seg-<first:012d>-<last:012d>.receipt.json    SegmentReceipt (canonical JSON)
    runs/<run>/final.receipt.json                           FinalReceipt, once the run ended
    index/days/<YYYY-MM-DD>/<run>                           marker: run seen that day (UTC); empty,
                                                            or the run id if <run> is mapped
    index/day-runs/<YYYY-MM-DD>/<prefix>-<p>-<size>         the static log's runs seen that day,
                                                            one object per flush (tlog.py)
    purges/<YYYYMMDDTHHMMSSZ>-<id>.json                     what one purge deleted (immutable)
    legal-holds/<run>/<YYYYMMDDTHHMMSSffffffZ>-<id>.json    one hold or release of a run and
                                                            the objects it covered (immutable)
    quarantine/<topic>/<partition>/<offset:020d>.json        a sealed record the archiver refused

``<run>`` (``run_segment``) is the run id percent-encoded (``quote(run_id, safe="-_.")``),
so a run is found by id with one listing of ``runs/<run>/``. Every id the run-id grammar
allows (``tracevault.runid``) that encodes to at most ``MAX_RUN_SEGMENT`` (200) bytes is
named that way, readable. Any other string (one of the grammar's ids with many ``:``; or
``.``, ``..``, an empty id, 85 CJK characters, 255 ASCII bytes, sealed before the grammar,
which the archiver quarantines instead: ``services/archiver/_quarantine.py``) is named
``<first bytes of the encoding>%~<32 hex>``, the hex being the first 128 bits of SHA-256
(``tracevault/v1/run-name\\0`` || the id's UTF-8). That is deterministic (a reader derives
it from the id, as a writer does), cannot collide with a readable name (percent-encoding
puts ``%`` only before two hex digits) nor, short of a SHA-256 collision, with another
mapped one. 200 bytes leave a file store room for the longest name a run's object gets
beside it (``<run>+seg-<12>-<12>.receipt.json`` is 243 bytes) within a file system's
255-byte names; S3's 1,024-byte keys hold it with room (docs/design.md, "Run ids").
Zero-padded seq ranges make a plain lexicographic listing come back in seq order.

Receipts carry the retention facts (docs/design.md, "Archive"): ``created_at`` is when the
receipt was written and ``retain_until`` the lock the writer put on the objects it covers (a
segment receipt: the segment and itself; the final receipt: itself). Purge and the retention
report take retention from these immutable facts and check the store's lock against them,
never the other way round: a file's mtime or an S3 lock is metadata, a receipt is content.
Version-1 receipts (before ``retain_until``) still read; ``retain_until`` is then "".
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import UTC, date, datetime
from typing import Any
from urllib.parse import quote, unquote

from tracevault.errors import ArchiveError

__all__ = [
    "RECEIPT_VERSION",
    "FinalReceipt",
    "MAX_RUN_SEGMENT",
    "SegmentReceipt",
    "DAY_BATCH_ROOT",
    "HOLDS_ROOT",
    "day_batch_key",
    "day_batch_prefix",
    "day_batch_runs",
    "day_index_key",
    "day_index_marker",
    "day_prefix",
    "encode_day_batch",
    "final_key",
    "hold_record_key",
    "parse_segment_key",
    "purge_record_key",
    "quarantine_key",
    "receipt_key",
    "run_id_from_key",
    "run_id_of_segment",
    "run_prefix",
    "run_segment",
    "segment_key",
]

_SEQ_WIDTH = 12


#: The longest ``<run>`` segment: 255 (a file system's names) less room for the longest
#: name a file store puts after it (``+seg-<12>-<12>.receipt.json``, 43 bytes), rounded down.
MAX_RUN_SEGMENT = 200
_MAPPED = "%~"  # never in a percent-encoding: % is followed by two hex digits there
_MAP_DOMAIN = b"tracevault/v1/run-name\0"
_MAP_HEX = 32  # 128 bits of SHA-256


def _quote(run_id: str) -> str:
    """The run id percent-encoded (reversible: the day batches carry it in their content)."""
    return quote(run_id, safe="-_.")


def run_segment(run_id: str) -> str:
    """The run's path segment in the archive (``<run>``): readable where that fits every
    store, else mapped (see above). Total: any string gets a valid segment."""
    try:
        readable = _quote(run_id)
    except UnicodeEncodeError:  # a lone surrogate: no UTF-8 to encode (never from Avro)
        readable = ""
    if readable and readable not in (".", "..") and len(readable) <= MAX_RUN_SEGMENT:
        return readable
    raw = run_id.encode("utf-8", "surrogatepass")
    digest = hashlib.sha256(_MAP_DOMAIN + raw).hexdigest()[:_MAP_HEX]
    cut = MAX_RUN_SEGMENT - len(_MAPPED) - _MAP_HEX
    head = readable[:cut]
    if "%" in head[-2:]:  # do not split a %XX
        head = head[: head.rindex("%")]
    return f"{head}{_MAPPED}{digest}"


def run_id_of_segment(segment: str) -> str | None:
    """The run id a readable ``<run>`` segment names; None for a mapped one (its run id is
    in the objects' content: a run index, a receipt, a day-index marker)."""
    return None if _MAPPED in segment else unquote(segment)


def run_prefix(run_id: str) -> str:
    return f"runs/{run_segment(run_id)}/"


def segment_key(run_id: str, first_seq: int, last_seq: int) -> str:
    return f"{run_prefix(run_id)}seg-{first_seq:0{_SEQ_WIDTH}d}-{last_seq:0{_SEQ_WIDTH}d}.avro"


def receipt_key(run_id: str, first_seq: int, last_seq: int) -> str:
    return segment_key(run_id, first_seq, last_seq)[: -len(".avro")] + ".receipt.json"


def final_key(run_id: str) -> str:
    return f"{run_prefix(run_id)}final.receipt.json"


def day_prefix(day: date) -> str:
    return f"index/days/{day.isoformat()}/"


def day_index_key(day: date, run_id: str) -> str:
    return f"{day_prefix(day)}{run_segment(run_id)}"


def day_index_marker(run_id: str) -> bytes:
    """The content of a run's day-index marker: empty when its key names the run, else (a
    mapped segment) the run id, so that a listing of the day still gives every run id."""
    seg = run_segment(run_id)
    return b"" if run_id_of_segment(seg) == run_id else run_id.encode("utf-8", "surrogatepass")


DAY_BATCH_ROOT = "index/day-runs/"


def day_batch_prefix(day: date) -> str:
    """Where one day's batched run lists of the static-log layout live (tracevault.archive.tlog)."""
    return f"{DAY_BATCH_ROOT}{day.isoformat()}/"


def day_batch_key(day: date, prefix: str, partition: int, size: int, generation: str = "") -> str:
    """One flush's runs seen on ``day``: the run ids, percent-encoded, one per line. The
    generation keeps flushes of two incarnations of one partition's log (a new cluster on
    the same day) from landing on one key with different lists."""
    gen = f"-{generation}" if generation else ""
    return f"{day_batch_prefix(day)}{quote(prefix, safe='-_.')}-{partition}-{size:012d}{gen}"


def day_batch_runs(data: bytes) -> list[str]:
    return [unquote(x) for x in data.decode("ascii").split("\n") if x]


def encode_day_batch(run_ids: Iterable[str]) -> bytes:
    return "".join(f"{_quote(r)}\n" for r in sorted(run_ids)).encode("ascii")


def purge_record_key(at: datetime, purge_id: str) -> str:
    """Where a purge records what it deleted (added by the archiver; readers may ignore it)."""
    return f"purges/{at.astimezone(UTC).strftime('%Y%m%dT%H%M%SZ')}-{purge_id}.json"


HOLDS_ROOT = "legal-holds/"


def hold_record_key(run_id: str, at: datetime, hold_id: str) -> str:
    """Where ``archive hold``/``release`` records what it held or released, in time order."""
    stamp = at.astimezone(UTC).strftime("%Y%m%dT%H%M%S%fZ")
    return f"{HOLDS_ROOT}{run_segment(run_id)}/{stamp}-{hold_id}.json"


def quarantine_key(topic: str, partition: int, offset: int) -> str:
    """Where the archiver keeps a ``sealed`` record it refused (readers of runs ignore it)."""
    return f"quarantine/{quote(topic, safe='-_.')}/{partition}/{offset:020d}.json"


def run_id_from_key(key: str) -> str | None:
    """The run id in a ``runs/<run>/...`` or ``index/days/<day>/<run>`` key; None when the
    segment is mapped (``run_id_of_segment``: the id is in the object's content)."""
    parts = key.split("/")
    if len(parts) >= 3 and parts[0] == "runs":
        return run_id_of_segment(parts[1])
    if len(parts) == 4 and parts[:2] == ["index", "days"]:
        return run_id_of_segment(parts[3])
    raise ArchiveError(f"object {key!r} is not a run or day-index key of this archive")


def parse_segment_key(key: str) -> tuple[int, int] | None:
    """``(first_seq, last_seq)`` of a segment key, or None if ``key`` is not a segment."""
    name = key.rsplit("/", 1)[-1]
    if not (name.startswith("seg-") and name.endswith(".avro")):
        return None
    try:
        first, last = name[4:-5].split("-")
        return int(first), int(last)
    except ValueError:
        return None


def _canonical(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


RECEIPT_VERSION = 2
"""Version 2 added ``retain_until``; version 1 receipts have none."""

_ADDED_IN_2 = frozenset({"retain_until"})


def _load(data: bytes, key: str, cls: type[Any]) -> dict[str, Any]:
    try:
        obj = json.loads(data)
    except (UnicodeDecodeError, ValueError) as exc:
        raise ArchiveError(f"receipt {key} is not JSON: {exc}") from exc
    if not isinstance(obj, dict):
        raise ArchiveError(f"receipt {key} is not a JSON object")
    expected = set(cls.__dataclass_fields__)
    if obj.get("version", 1) == 1:
        expected -= _ADDED_IN_2
    elif obj.get("version") != RECEIPT_VERSION:
        raise ArchiveError(
            f"receipt {key} has version {obj.get('version')!r}; this tracevault reads versions "
            f"1 and {RECEIPT_VERSION}"
        )
    missing = expected - obj.keys()
    extra = obj.keys() - expected
    if missing or extra:
        raise ArchiveError(
            f"receipt {key} does not match {cls.__name__}: missing {sorted(missing)}, "
            f"unexpected {sorted(extra)}"
        )
    return obj


@dataclass(frozen=True, slots=True)
class SegmentReceipt:
    """What one segment holds, written beside it after the segment is durable.

    ``sha256`` is of the segment object's exact bytes; ``first_prev_hash`` and ``last_hash``
    (hex) tie the segment into the run's chain, so segments can be checked one by one and
    against each other without trusting the listing. ``created_at`` and ``retain_until``
    (ISO 8601, UTC) are the retention facts of the segment and this receipt.
    """

    run_id: str
    segment: str
    sha256: str
    first_seq: int
    last_seq: int
    count: int
    first_prev_hash: str
    last_hash: str
    created_at: str
    retain_until: str = ""
    version: int = RECEIPT_VERSION

    def to_json(self) -> bytes:
        return _canonical(asdict(self))

    @classmethod
    def from_json(cls, data: bytes, key: str = "receipt") -> SegmentReceipt:
        return cls(**_load(data, key, cls))


@dataclass(frozen=True, slots=True)
class FinalReceipt:
    """Written when a run's last event (RUN_FINISHED) is archived: the run is complete.

    ``segments`` lists every segment key in seq order; ``last_hash`` is the chain head;
    ``created_at`` and ``retain_until`` are this receipt's retention facts.
    """

    run_id: str
    count: int
    last_seq: int
    last_hash: str
    segments: list[str] = field(default_factory=list)
    created_at: str = ""
    retain_until: str = ""
    version: int = RECEIPT_VERSION

    def to_json(self) -> bytes:
        return _canonical(asdict(self))

    @classmethod
    def from_json(cls, data: bytes, key: str = "final receipt") -> FinalReceipt:
        return cls(**_load(data, key, cls))
