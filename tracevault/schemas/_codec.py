"""Avro single-object encoding of TraceEvent and SealedEvent.

Wire format (the Avro spec's single-object encoding): ``C3 01``, the writer schema's 8-byte
CRC-64-AVRO fingerprint, then the Avro binary body. The body is read with the writer schema
found by fingerprint and resolved into the current (newest) version, so every old version
stays readable after a schema change.
"""

from __future__ import annotations

from io import BytesIO
from typing import Any

from fastavro import schemaless_reader, schemaless_writer

from tracevault.errors import (
    BadMagicError,
    SchemaError,
    TruncatedError,
    UnknownFingerprintError,
)
from tracevault.schemas._canonical import check_canonical
from tracevault.schemas._events import SealedEvent, TraceEvent
from tracevault.schemas._registry import SchemaSet, SchemaVersion, default_schemas
from tracevault.schemas.fast import fast_decode_event

__all__ = [
    "MAGIC",
    "Codec",
    "decode_event",
    "decode_sealed",
    "encode_event",
    "encode_sealed",
]

MAGIC = b"\xc3\x01"
_HEADER = 10


class Codec:
    """Encoder/decoder for one record name against a set of published versions.

    ``reader_version`` picks the version records are read into (default: newest); writing
    always uses that same version.
    """

    def __init__(
        self, name: str, schemas: SchemaSet | None = None, reader_version: int | None = None
    ) -> None:
        self.schemas = schemas or default_schemas()
        self.name = name
        self.reader: SchemaVersion = self.schemas.get(name, reader_version)
        self._header = MAGIC + self.reader.fingerprint

    def encode(self, record: dict[str, Any]) -> bytes:
        buf = BytesIO()
        buf.write(self._header)
        try:
            schemaless_writer(buf, self.reader.parsed, record, strict_allow_default=True)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise SchemaError(f"{self.name} record does not match its schema: {exc}") from exc
        return buf.getvalue()

    def decode(self, data: bytes, *, what: str = "value") -> dict[str, Any]:
        if len(data) < _HEADER:
            if data[:2] != MAGIC[: len(data)]:
                raise BadMagicError(
                    f"{what} does not start with Avro single-object marker C3 01 "
                    f"(got {data[:2].hex() or 'nothing'}); it was not written by tracevault"
                )
            raise TruncatedError(
                f"{what} is {len(data)} bytes, shorter than the 10-byte single-object header"
            )
        if data[:2] != MAGIC:
            raise BadMagicError(
                f"{what} does not start with Avro single-object marker C3 01 "
                f"(got {data[:2].hex()}); it was not written by tracevault"
            )
        fp = bytes(data[2:_HEADER])
        writer = self.schemas.by_fingerprint(fp)
        if writer is None or writer.name != self.name:
            known = ", ".join(
                f"v{v.version}={v.fingerprint_hex}" for v in self.schemas.versions(self.name)
            )
            raise UnknownFingerprintError(
                f"{what} was written with schema fingerprint {fp.hex()}, which is not a "
                f"published {self.name} version (known: {known}); upgrade tracevault to a "
                "release that ships that schema",
                fingerprint=fp.hex(),
            )
        buf = BytesIO(data)
        buf.seek(_HEADER)
        try:
            if writer is self.reader:
                rec = schemaless_reader(buf, writer.parsed, None)
            else:
                rec = schemaless_reader(buf, writer.parsed, self.reader.parsed)
        except (EOFError, IndexError, ValueError, UnicodeDecodeError, OverflowError) as exc:
            raise TruncatedError(
                f"{what}: the {self.name} body ({len(data) - _HEADER} bytes) ends before the "
                f"record does or is malformed ({type(exc).__name__}: {exc})"
            ) from exc
        end = buf.tell()
        if end != len(data):
            raise TruncatedError(
                f"{what}: {len(data) - end} unexpected bytes after the {self.name} record "
                f"(record ends at byte {end} of {len(data)})"
            )
        if not isinstance(rec, dict):
            raise SchemaError(f"{what} did not decode to a record")
        return rec


_EVENT: Codec | None = None
_SEALED: Codec | None = None


def _event_codec() -> Codec:
    global _EVENT  # noqa: PLW0603 - built on first use, not at import
    if _EVENT is None:
        _EVENT = Codec("TraceEvent")
    return _EVENT


def _sealed_codec() -> Codec:
    global _SEALED  # noqa: PLW0603 - built on first use, not at import
    if _SEALED is None:
        _SEALED = Codec("SealedEvent")
    return _SEALED


def encode_event(event: TraceEvent) -> bytes:
    """Single-object encoding of ``event`` with the current TraceEvent schema."""
    return _event_codec().encode(event.to_avro())


def decode_event(data: bytes, *, check_json: bool = True, what: str = "event") -> TraceEvent:
    """Read a TraceEvent written with any published version.

    ``check_json`` also proves ``request``/``response`` are canonical JSON, so a value that
    was not produced through ``canonical_json`` is refused with the field named.
    """
    ev = fast_decode_event(data) or TraceEvent.from_avro(_event_codec().decode(data, what=what))
    if check_json:
        check_canonical(ev.request, field=f"{what} seq {ev.seq} request")
        check_canonical(ev.response, field=f"{what} seq {ev.seq} response")
    return ev


def encode_sealed(sealed: SealedEvent) -> bytes:
    return _sealed_codec().encode(sealed.to_avro())


def decode_sealed(data: bytes, *, what: str = "sealed event") -> SealedEvent:
    return SealedEvent.from_avro(_sealed_codec().decode(data, what=what))
