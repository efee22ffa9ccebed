"""The public surface is what users import; pin it so a change to it is deliberate."""

from __future__ import annotations

import importlib
import pkgutil

import tracevault
import tracevault.schemas


def test_schemas_exports() -> None:
    assert set(tracevault.schemas.__all__) == {
        "AgentInfo", "ErrorInfo", "EventKind", "Interleave", "SealedEvent", "TraceEvent",
        "micros_to_datetime",
        "MAGIC", "Codec", "decode_event", "decode_sealed", "encode_event", "encode_sealed",
        "canonical_json", "canonical_json_like", "check_canonical", "loads_canonical",
        "SCHEMA_DIR", "SchemaSet", "SchemaVersion", "default_schemas", "fingerprint",
        "AgentModel", "ErrorModel", "EventModel",
        "VarintError", "avro_bytes", "avro_long", "read_long",
    }  # fmt: skip
    for name in tracevault.schemas.__all__:
        assert getattr(tracevault.schemas, name) is not None


def test_public_class_names_are_unique_across_packages() -> None:
    # One name, one meaning: `from tracevault.x import Name` must not depend on which x.
    owners: dict[str, set[str]] = {}
    for info in pkgutil.walk_packages(tracevault.__path__, "tracevault."):
        if info.name.rsplit(".", 1)[-1].startswith("_") or not info.ispkg:
            continue
        module = importlib.import_module(info.name)
        for name in getattr(module, "__all__", ()):
            obj = getattr(module, name)
            if isinstance(obj, type):
                owners.setdefault(name, set()).add(f"{obj.__module__}.{obj.__qualname__}")
    clashes = {name: sorted(defs) for name, defs in owners.items() if len(defs) > 1}
    assert not clashes
