"""Hostile TraceEvent v2 and SealedEvent v1 values, written field by field.

v2 is what producers write, and the only version the fast paths read (``peek_event``, the
armed walks, the C walks of ``_cseal.c`` and ``_ctake.c``): values of another version would
go straight to fastavro and leave those paths untested.

Independent of tracevault's encoders (only the schema fingerprints come from the registry):
each value is a list of :class:`Field` tokens, so a test can re-encode exactly one field in an
unusual but valid way (a non-minimal varint, a map in negative-count blocks) or break it (a bad
union index, a truncation, bytes that are not UTF-8). Avro binary encoding: longs and lengths
are zig-zag varints; a union is its branch index then the value; a map is blocks of
``count`` (negative: ``-count`` then the block's byte size) ending with a zero count.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from tests.conftest import NOW_US
from tracevault.chain import genesis, link
from tracevault.schemas import MAGIC, default_schemas


def zigzag(n: int) -> int:
    return (n << 1) ^ (n >> 63)


def varint(n: int, *, pad: int = 0) -> bytes:
    """The Avro long ``n``; ``pad`` > 0 adds that many redundant zero groups (non-minimal)."""
    z = zigzag(n) & ((1 << 64) - 1)
    groups = []
    while True:
        groups.append(z & 0x7F)
        z >>= 7
        if not z:
            break
    groups += [0] * pad
    return bytes([g | 0x80 for g in groups[:-1]] + [groups[-1]])


def blob(data: bytes, *, pad: int = 0) -> bytes:
    return varint(len(data), pad=pad) + data


def text(s: str) -> bytes:
    return blob(s.encode("utf-8"))


@dataclass(frozen=True)
class Field:
    """One field of a record: its name, its Avro type family and its encoded bytes."""

    name: str
    kind: str  # "long", "enum", "bytes", "union", "record", "map", "fixed"
    data: bytes


TRACE_VERSION = 2  # what producers write


def trace_header(version: int = TRACE_VERSION) -> bytes:
    return MAGIC + default_schemas().get("TraceEvent", version).fingerprint


def sealed_header() -> bytes:
    return MAGIC + default_schemas().get("SealedEvent", 1).fingerprint


def kind_symbols() -> list[str]:
    v2 = default_schemas().get("TraceEvent", TRACE_VERSION)
    kind = next(f for f in v2.source["fields"] if f["name"] == "kind")
    return list(kind["type"]["symbols"])


def event_fields(
    run_id: str,
    seq: int,
    *,
    kind: str = "TOOL_CALL",
    request: bytes = b'{"q":1}',
    response: bytes = b"null",
    model: str | None = None,
    attributes: dict[str, str] | None = None,
    interleave: tuple[int | None, int, int] | None = None,
) -> list[Field]:
    """The fields of a valid TraceEvent v2 (minimal encodings throughout); ``interleave`` is
    (branch_prev, started_at_done, done_order)."""
    attrs = attributes or {}
    amap = b""
    if attrs:
        amap = varint(len(attrs)) + b"".join(text(k) + text(v) for k, v in attrs.items())
    return [
        Field("run_id", "bytes", text(run_id)),
        Field("seq", "long", varint(seq)),
        Field("kind", "enum", varint(kind_symbols().index(kind))),
        Field("at", "long", varint(NOW_US + seq)),
        Field("agent", "record", b"".join(text(s) for s in ("a", "1", "h", "pytest", "0.1"))),
        Field("model", "union", b"\x00" if model is None else b"\x02" + text(model)),
        Field("seed", "union", b"\x00"),
        Field("request", "bytes", blob(request)),
        Field("response", "bytes", blob(response)),
        Field("error", "union", b"\x00"),
        Field("idempotency_key", "union", b"\x00"),
        Field("parent_seq", "union", b"\x00"),
        Field("attributes", "map", amap + b"\x00"),
        Field("interleave", "union", _interleave(interleave)),
    ]


def _interleave(il: tuple[int | None, int, int] | None) -> bytes:
    if il is None:
        return b"\x00"
    prev, started, order = il
    branch = b"\x00" if prev is None else b"\x02" + varint(prev)
    return b"\x02" + branch + varint(started) + varint(order)


def join(header: bytes, fields: list[Field]) -> bytes:
    return header + b"".join(f.data for f in fields)


def with_field(fields: list[Field], name: str, data: bytes) -> list[Field]:
    return [replace(f, data=data) if f.name == name else f for f in fields]


def event_value(run_id: str, seq: int, *, version: int = TRACE_VERSION, **kw: object) -> bytes:
    """A TraceEvent value; ``version=1`` writes the older schema (no ``interleave``), which
    the fast paths leave to fastavro."""
    fields = event_fields(run_id, seq, **kw)  # type: ignore[arg-type]
    if version == 1:
        fields = [f for f in fields if f.name != "interleave"]
    return join(trace_header(version), fields)


def the_item1_record(run_id: str, seq: int = 0) -> bytes:
    """Issue 10, item 1: valid Avro that the fast peek declines (the ``model`` union's index
    is a non-minimal varint, ``80 00``), whose request is JSON but not canonical."""
    fields = event_fields(run_id, seq, request=b'{"b":1, "a":2}')
    return join(trace_header(), with_field(fields, "model", b"\x80\x00"))


def sealed_fields(
    run_id: str,
    seq: int,
    raw: bytes,
    *,
    prev_hash: bytes | None = None,
    sealed_at: int = 1_700_000_000_000_000,
    source_partition: int = 0,
    source_offset: int = 0,
) -> list[Field]:
    """The fields of a SealedEvent v1 sealing ``raw`` after ``prev_hash`` (genesis if None)."""
    prev = genesis(run_id) if prev_hash is None else prev_hash
    return [
        Field("run_id", "bytes", text(run_id)),
        Field("seq", "long", varint(seq)),
        Field("prev_hash", "fixed", prev),
        Field("hash", "fixed", link(prev, raw)),
        Field("raw", "bytes", blob(raw)),
        Field("sealed_at", "long", varint(sealed_at)),
        Field("source_partition", "long", varint(source_partition)),
        Field("source_offset", "long", varint(source_offset)),
        Field("sequencer_id", "bytes", text("seq-test")),
    ]
