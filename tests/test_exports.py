"""The public surface is what users import; pin it so a change to it is deliberate."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys

import tracevault
import tracevault.archive.witness_layout
import tracevault.heads
import tracevault.recorded_error
import tracevault.replayer
import tracevault.schemas
import tracevault.witness


def test_schemas_exports() -> None:
    assert set(tracevault.schemas.__all__) == {
        "AgentInfo", "ErrorInfo", "EventKind", "Interleave", "SealedEvent", "TraceEvent",
        "micros_to_datetime",
        "MAGIC", "Codec", "decode_event", "decode_sealed", "encode_event", "encode_sealed",
        "canonical_json", "canonical_json_like", "canonical_json_plain", "check_canonical",
        "loads_canonical",
        "SCHEMA_DIR", "SchemaSet", "SchemaVersion", "default_schemas", "fingerprint",
        "AgentModel", "ErrorModel", "EventModel",
        "VarintError", "avro_bytes", "avro_long", "read_long",
    }  # fmt: skip
    for name in tracevault.schemas.__all__:
        assert getattr(tracevault.schemas, name) is not None


def test_witness_layout_exports() -> None:
    # the witness's store layout, read by the witness and by `replay verify --witness-store`
    assert set(tracevault.archive.witness_layout.__all__) == {
        "checkpoint_key", "cosigned_checkpoint", "cosigned_sizes", "origin_prefix",
    }  # fmt: skip
    for name in tracevault.archive.witness_layout.__all__:  # the witness's names are the same
        assert getattr(tracevault.witness, name, None) in (
            None,
            getattr(tracevault.archive.witness_layout, name),
        )


def test_s3store_is_exported_without_importing_boto3() -> None:
    code = (
        "import sys, tracevault.archive as a\n"
        "assert 'boto3' not in sys.modules, 'boto3 on import'\n"
        "assert a.S3Store.__name__ == 'S3Store' and 'boto3' in sys.modules"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr


def test_heads_exports() -> None:
    assert set(tracevault.heads.__all__) == {
        "GapRange", "Head", "HeldEvent", "decode_head", "encode_head", "head_v1_header",
        "plain_head_value",
        "FINISHED_KEY_PREFIX", "FinishedChunk", "fingerprint", "is_finished_key",
        "HeadsState", "RunLocation", "find_head", "read_state", "heads_partition_count",
        "locate_run", "read_heads", "read_heads_and_trees",
        "ProvenState", "Rejection", "prove_state",
    }  # fmt: skip


def test_recorded_error_lives_beneath_the_replayer_and_the_adapters() -> None:
    assert set(tracevault.recorded_error.__all__) == {
        "RecordedError", "raise_recorded", "recorded_error", "recorded_type", "type_name",
    }  # fmt: skip
    # `from tracevault.replayer import RecordedError` keeps working, as the same class
    assert tracevault.replayer.RecordedError is tracevault.recorded_error.RecordedError


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
