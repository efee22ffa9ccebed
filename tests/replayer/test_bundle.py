"""Evidence bundles: exported from the archive, checked offline, and every edit caught."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.replayer.archiving import write_run
from tracevault.archive import open_store
from tracevault.errors import ChainError, ConfigError
from tracevault.replayer import export_bundle, verify_bundle
from tracevault.replayer.load.archive import load_from_archive


@pytest.fixture
def bundle(tmp_path: Path, sealed) -> Path:
    store = open_store(f"file://{tmp_path / 'archive'}")
    write_run(store, sealed, per_segment=4)
    out = tmp_path / "bundle"
    export_bundle(load_from_archive(store, "run-a"), out, store=store)
    return out


def _rehash(root: Path, rel: str) -> None:
    """Re-sign a file in the manifest, as a forger who edits both would."""
    import hashlib

    m = json.loads((root / "manifest.json").read_bytes())
    m["files"][rel] = hashlib.sha256((root / rel).read_bytes()).hexdigest()
    (root / "manifest.json").write_text(json.dumps(m))


def test_bundle_holds_everything_and_verifies(bundle: Path) -> None:
    names = {p.relative_to(bundle).as_posix() for p in bundle.rglob("*") if p.is_file()}
    assert {"README.md", "manifest.json", "chain.jsonl", "events.jsonl"} <= names
    assert "schemas/TraceEvent.v1.avsc" in names and "raw/000000000010.bin" in names
    assert "archive/runs/run-a/final.receipt.json" in names
    report = verify_bundle(bundle)
    assert report.finished and report.count == 11
    assert [c.split()[0] for c in report.checks] == [
        "B1", "1", "2", "3", "4", "5", "6", "A1", "A2", "A3", "B3",
    ]  # fmt: skip


def test_a_bundle_whose_final_receipt_was_removed_does_not_verify(bundle: Path) -> None:
    # A forger drops the final receipt from archive/ and from the manifest: raw/ still ends in
    # RUN_FINISHED, so the archive part of the bundle must have one.
    rel = "archive/runs/run-a/final.receipt.json"
    (bundle / rel).unlink()
    m = json.loads((bundle / "manifest.json").read_bytes())
    del m["files"][rel]
    (bundle / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(ChainError, match="A3 final receipt") as info:
        verify_bundle(bundle)
    assert info.value.obj == "runs/run-a/final.receipt.json"


def test_export_refuses_a_non_empty_folder(tmp_path: Path, sealed, bundle: Path) -> None:
    store = open_store(f"file://{tmp_path / 'archive'}")
    with pytest.raises(ConfigError):
        export_bundle(load_from_archive(store, "run-a"), bundle, store=store)


def test_a_flipped_raw_byte_is_caught_even_with_a_forged_manifest(bundle: Path) -> None:
    p = bundle / "raw/000000000006.bin"
    data = bytearray(p.read_bytes())
    data[-1] ^= 0x01
    p.write_bytes(bytes(data))
    with pytest.raises(ChainError) as info:
        verify_bundle(bundle)
    assert info.value.obj == "raw/000000000006.bin" and "B1" in str(info.value)
    _rehash(bundle, "raw/000000000006.bin")
    with pytest.raises(ChainError) as info:
        verify_bundle(bundle)
    assert info.value.seq == 6 and info.value.obj == "raw/000000000006.bin"


def test_an_edited_events_line_is_caught(bundle: Path) -> None:
    p = bundle / "events.jsonl"
    lines = p.read_bytes().splitlines(keepends=True)
    lines[3] = lines[3].replace(b"gpt-4o-2024-08-06", b"gpt-4o-2024-11-20")
    p.write_bytes(b"".join(lines))
    _rehash(bundle, "events.jsonl")
    with pytest.raises(ChainError) as info:
        verify_bundle(bundle)
    assert info.value.seq == 3 and info.value.obj == "events.jsonl"


def test_a_deleted_raw_file_is_caught(bundle: Path) -> None:
    (bundle / "raw/000000000002.bin").unlink()
    with pytest.raises(ChainError) as info:
        verify_bundle(bundle)
    assert info.value.obj == "raw/000000000002.bin"
