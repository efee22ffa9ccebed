"""The one guard of the fast paths: which exact schema each walk mirrors, and when it may run.

A walk is written for one published schema version, identified by its CRC-64-AVRO
fingerprint (its :class:`Pin`). It runs only when

* that version is the **newest** published version of its record (the version the codec
  reads into: an older writer version must be resolved into the newest, which is fastavro's
  job), checked once per process by :func:`armed_header`;
* the value starts with ``C3 01`` + that fingerprint (the single-object header), checked per
  value by the walk against the header returned here;
* the walk ends exactly at the end of the value (or of the OCF block), checked per value by
  the walk (``p != end`` declines).

Anything else, and any error raised inside a walk (:data:`DECLINE`), makes the fast path
return ``None``: the caller falls back to fastavro and the codec, which decide what is
readable and name the problem. When a new schema version is published, every walk of the
old one disarms itself (correct, but slow); ``tests/schemas/test_fast_pins.py`` fails then,
with :func:`stale` saying what to update.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from tracevault.errors import ConfigError
from tracevault.schemas._registry import SchemaSet, default_schemas

__all__ = [
    "DECLINE",
    "MAGIC",
    "PINS",
    "SEALED_EVENT_V1",
    "TRACE_EVENT_V2",
    "Pin",
    "armed_header",
    "stale",
]

log = logging.getLogger(__name__)

MAGIC = b"\xc3\x01"

#: What a walk may raise on a value it cannot read: it then declines. IndexError: the value
#: ends early; ValueError: a bad varint (VarintError), invalid UTF-8 (UnicodeDecodeError).
DECLINE = (IndexError, ValueError)


@dataclass(frozen=True)
class Pin:
    """The published schema version a set of walks mirrors, byte for byte."""

    record: str
    version: int
    fingerprint: bytes
    walks: str
    """The file holding the walks (named in the message when they are stale)."""


TRACE_EVENT_V2 = Pin(
    "TraceEvent",
    2,
    bytes.fromhex("507a36026c006d8d"),
    "tracevault/schemas/fast/_event.py and _peek.py",
)
SEALED_EVENT_V1 = Pin(
    "SealedEvent", 1, bytes.fromhex("56e7e7d30b5c62aa"), "tracevault/schemas/fast/_sealed.py"
)
PINS = (TRACE_EVENT_V2, SEALED_EVENT_V1)


def stale(pin: Pin, schemas: SchemaSet) -> str | None:
    """Why ``pin``'s walks may not run under ``schemas`` (what to update), or None."""
    try:
        newest = schemas.get(pin.record)
        mine = schemas.get(pin.record, pin.version)
    except ConfigError as exc:
        return f"the fast paths in {pin.walks} mirror {pin.record} v{pin.version}: {exc}"
    if mine.fingerprint != pin.fingerprint:
        return (
            f"{mine.path} has fingerprint {mine.fingerprint_hex}, but the fast paths in "
            f"{pin.walks} were written for {pin.fingerprint.hex()}: a published schema was "
            "edited; restore the file and publish the change as a new version"
        )
    if newest.version != pin.version:
        return (
            f"{pin.record} v{newest.version} ({newest.fingerprint_hex}) is now the newest "
            f"published version, so the fast paths in {pin.walks}, written for "
            f"v{pin.version}, are off and every {pin.record} is read by fastavro: write "
            f"walks for v{newest.version} there, give them a Pin in "
            "tracevault/schemas/fast/_guard.py, and pin them to fastavro in tests/schemas/"
        )
    return None


def armed_header(pin: Pin, schemas: SchemaSet | None = None) -> bytes | None:
    """``C3 01`` + the pinned fingerprint when the walks may run, else None (they decline)."""
    why = stale(pin, schemas or default_schemas())
    if why is not None:
        log.warning("fast path off: %s", why)
        return None
    return MAGIC + pin.fingerprint
