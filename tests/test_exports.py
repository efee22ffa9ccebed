"""The public surface is what users import; pin it so a change to it is deliberate."""

from __future__ import annotations

import tracevault.schemas


def test_schemas_exports() -> None:
    assert set(tracevault.schemas.__all__) == {
        "AgentInfo", "ErrorInfo", "EventKind", "SealedEvent", "TraceEvent", "micros_to_datetime",
        "MAGIC", "Codec", "decode_event", "decode_sealed", "encode_event", "encode_sealed",
        "canonical_json", "canonical_json_like", "check_canonical", "loads_canonical",
        "SCHEMA_DIR", "SchemaSet", "SchemaVersion", "default_schemas", "fingerprint",
        "AgentModel", "ErrorModel", "EventModel",
        "VarintError", "avro_bytes", "avro_long", "read_long",
    }  # fmt: skip
    for name in tracevault.schemas.__all__:
        assert getattr(tracevault.schemas, name) is not None
