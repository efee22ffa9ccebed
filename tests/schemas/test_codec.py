"""The wire format: single-object encoding, fingerprints, resolution, and its errors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tracevault.errors import (
    BadMagicError,
    NonCanonicalJSONError,
    PayloadError,
    SchemaError,
    TruncatedError,
    UnknownFingerprintError,
)
from tracevault.schemas import (
    MAGIC,
    SCHEMA_DIR,
    AgentInfo,
    Codec,
    ErrorInfo,
    EventKind,
    SchemaSet,
    SealedEvent,
    TraceEvent,
    canonical_json,
    check_canonical,
    decode_event,
    decode_sealed,
    default_schemas,
    encode_event,
    encode_sealed,
    fingerprint,
)

AGENT = AgentInfo("agent-7", "1.4.2", "host-a", "pytest", "0.1.0")


def make_event(**kw: object) -> TraceEvent:
    base: dict[str, object] = {
        "run_id": "run-1",
        "seq": 3,
        "kind": EventKind.TOOL_CALL,
        "at": 1_764_000_000_123_456,
        "agent": AGENT,
        "request": canonical_json({"tool": "search", "args": {"q": "zürich", "k": 3}}),
        "response": canonical_json({"hits": ["a", "b"]}),
        "model": None,
        "seed": 42,
        "error": ErrorInfo("TimeoutError", "slow"),
        "idempotency_key": "run-1/3",
        "parent_seq": 1,
        "attributes": {"tenant": "t1"},
    }
    base.update(kw)
    return TraceEvent(**base)  # type: ignore[arg-type]


def test_event_round_trip_keeps_every_field() -> None:
    ev = make_event()
    data = encode_event(ev)
    assert data[:2] == MAGIC
    assert data[2:10] == default_schemas().get("TraceEvent").fingerprint
    assert decode_event(data) == ev


def test_sealed_round_trip() -> None:
    s = SealedEvent("run-1", 0, b"\x01" * 32, b"\x02" * 32, b"raw-bytes", 17, 2, 99, "seq-a")
    assert decode_sealed(encode_sealed(s)) == s


def test_spec_fingerprint_test_vector() -> None:
    # The Avro specification's CRC-64-AVRO value for the schema "null".
    assert fingerprint("null").hex() == "8a8f25cce724dd63"


def test_fingerprint_ignores_docs_and_logical_types() -> None:
    src = json.loads((SCHEMA_DIR / "TraceEvent.v1.avsc").read_text())
    src["doc"] = "changed documentation"
    assert fingerprint(src) == default_schemas().get("TraceEvent", 1).fingerprint


def _v2_dir(tmp_path: Path) -> Path:
    """v1 as published plus a v2 test schema that adds one defaulted field."""
    d = tmp_path / "schemas"
    d.mkdir()
    shutil.copy(SCHEMA_DIR / "TraceEvent.v1.avsc", d / "TraceEvent.v1.avsc")
    src = json.loads((SCHEMA_DIR / "TraceEvent.v1.avsc").read_text())
    src["fields"].append({"name": "tenant", "type": "string", "default": "none"})
    (d / "TraceEvent.v2.avsc").write_text(json.dumps(src))
    return d


def _v1_record() -> dict[str, object]:
    """``make_event()`` as a TraceEvent v1 record (v2 added ``interleave``)."""
    rec = make_event().to_avro()
    del rec["interleave"]
    return rec


def test_v2_reader_reads_v1_bytes(tmp_path: Path) -> None:
    schemas = SchemaSet(_v2_dir(tmp_path))
    v1 = Codec("TraceEvent", schemas, reader_version=1)
    v2 = Codec("TraceEvent", schemas)
    assert v2.reader.version == 2
    rec = _v1_record()
    got = v2.decode(v1.encode(rec))
    assert got["tenant"] == "none"  # the default filled in by schema resolution
    assert {k: got[k] for k in rec} == rec


def test_v1_reader_reads_v2_bytes(tmp_path: Path) -> None:
    schemas = SchemaSet(_v2_dir(tmp_path))
    v1 = Codec("TraceEvent", schemas, reader_version=1)
    v2 = Codec("TraceEvent", schemas)
    rec = _v1_record()
    data = v2.encode({**rec, "tenant": "acme"})
    assert data[2:10] == schemas.get("TraceEvent", 2).fingerprint
    got = v1.decode(data)
    assert "tenant" not in got  # the new field is dropped, everything else survives
    assert got == rec


def test_every_published_version_decodes_into_current() -> None:
    current = Codec("TraceEvent")
    for version in default_schemas().versions("TraceEvent"):
        older = Codec("TraceEvent", reader_version=version.version)
        names = {f["name"] for f in version.source["fields"]}
        rec = {k: v for k, v in make_event().to_avro().items() if k in names}
        assert {k: v for k, v in current.decode(older.encode(rec)).items() if k in rec} == rec


def test_bad_magic_is_named() -> None:
    data = b"\x00\x01" + encode_event(make_event())[2:]
    with pytest.raises(BadMagicError, match="C3 01"):
        decode_event(data)


def test_unknown_fingerprint_prints_it() -> None:
    data = bytearray(encode_event(make_event()))
    data[2:10] = bytes.fromhex("0123456789abcdef")
    with pytest.raises(UnknownFingerprintError, match="0123456789abcdef") as info:
        decode_event(bytes(data))
    assert info.value.fingerprint == "0123456789abcdef"


@pytest.mark.parametrize("cut", [3, 10, 20, -1])
def test_truncated_body(cut: int) -> None:
    data = encode_event(make_event())
    with pytest.raises(TruncatedError):
        decode_event(data[:cut])


def test_trailing_bytes_are_refused() -> None:
    with pytest.raises(TruncatedError, match="unexpected bytes"):
        decode_event(encode_event(make_event()) + b"\x00")


def test_non_canonical_request_is_refused_with_field_named() -> None:
    ev = make_event(request=b'{"b": 1, "a": 2}')
    with pytest.raises(NonCanonicalJSONError, match="seq 3 request"):
        decode_event(encode_event(ev))


def test_invalid_json_response_is_refused() -> None:
    ev = make_event(response=b"\xff\xfe")
    with pytest.raises(NonCanonicalJSONError, match="response"):
        decode_event(encode_event(ev))


def test_non_canonical_json_may_be_read_without_the_check() -> None:
    ev = make_event(request=b'{"b": 1, "a": 2}')
    assert decode_event(encode_event(ev), check_json=False).request == b'{"b": 1, "a": 2}'


def test_canonical_json_is_sorted_compact_utf8() -> None:
    assert canonical_json({"b": [1, 2.5], "a": "ü"}) == '{"a":"ü","b":[1,2.5]}'.encode()


@pytest.mark.parametrize(
    ("value", "path"),
    [
        ({"messages": [{"content": object()}]}, "$.request.messages[0].content"),
        ({"x": float("nan")}, "$.request.x"),
        ({"x": {1: "int key", "a": 2}}, "$.request.x"),
        ([1, 2, {3}], "$.request[2]"),
    ],
)
def test_canonical_json_names_the_bad_field(value: object, path: str) -> None:
    with pytest.raises(PayloadError) as info:
        canonical_json(value, field="request")
    assert info.value.path == path
    assert path in str(info.value)


def test_encoding_a_record_that_misses_a_field_is_a_schema_error() -> None:
    rec = make_event().to_avro()
    del rec["agent"]
    with pytest.raises(SchemaError):
        Codec("TraceEvent").encode(rec)


def test_errors_pickle_across_processes() -> None:
    import pickle

    err = UnknownFingerprintError("msg", fingerprint="ab")
    back = pickle.loads(pickle.dumps(err))
    assert (str(back), back.fingerprint) == ("msg", "ab")


@pytest.mark.parametrize(
    ("data", "ok"),
    [
        (b"1e+16", True),
        (b"100000.0", True),
        (b"123456789012345678901234567890", True),  # past 64 bits: exact, not a float
        (b'{"a":[1,2.5,"\xc3\xbc"]}', True),
        (b"1e5", False),
        (b"NaN", False),
        (b'{"a":NaN}', False),
        (b'{"a":1,"a":2}', False),  # duplicate keys lose data: refused
        (b'"\\u00fc"', False),  # escaped, not UTF-8
        (b"[1, 2]", False),
    ],
)
def test_canonical_check_is_exact_at_the_edges(data: bytes, ok: bool) -> None:
    if ok:
        check_canonical(data)  # raises when not canonical
    else:
        with pytest.raises(NonCanonicalJSONError):
            check_canonical(data)
