"""Interop: a bundle's C2SP tlog-proofs verified by Go's own implementations.

``go_tlogproof`` (Go, in this folder) reads a proof file with
``github.com/transparency-dev/formats/proof``, opens its checkpoint with
``golang.org/x/mod/sumdb/note`` and our vkey, and checks the inclusion proof with
``github.com/transparency-dev/merkle``. The Go toolchain must be installed: the test fails
(it is not skipped) without it.
"""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.replayer.conftest import recorded
from tests.replayer.recording import seal
from tracevault.replayer import LoadedRun, export_bundle
from tracevault.transparency import (
    CheckpointRecord,
    CompactTree,
    Ed25519Signer,
    FoundCheckpoint,
    hash_leaf,
    leaf_hash,
)

GO_SRC = Path(__file__).parent / "go_tlogproof"
ORIGIN = "tracevault/tv-go/0"


@pytest.fixture(scope="module")
def go_tool(tmp_path_factory: pytest.TempPathFactory) -> Path:
    go = shutil.which("go")
    assert go is not None, "the Go toolchain is needed for the interop test (go not on PATH)"
    out = tmp_path_factory.mktemp("go") / "go_tlogproof"
    subprocess.run([go, "build", "-o", str(out), "."], cwd=GO_SRC, check=True, timeout=300)
    return out


def _go(tool: Path, vkey: str, proof: Path, leaf: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(tool), vkey, str(proof), leaf], check=False, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip


def test_go_reads_and_verifies_our_bundle_proofs(go_tool: Path, tmp_path: Path) -> None:
    key = Ed25519Signer.generate("tv.go-log")
    sealed = seal(recorded("run-go"))
    leaves = [leaf_hash(s.run_id, s.seq, s.hash) for s in sealed]
    others = [hash_leaf(b"other%d" % i) for i in range(7)]
    tree, found = CompactTree(), []
    for n, batch in enumerate([others[:3] + leaves[:5], leaves[5:8] + others[3:], leaves[8:]]):
        rec, tree = CheckpointRecord.build(tree, batch, ORIGIN, key)
        found.append(FoundCheckpoint(CheckpointRecord.decode(rec.encode()), f"sealed[0]@{n}"))
    run = dataclasses.replace(LoadedRun.of(sealed), log_origin=ORIGIN, log_checkpoints=tuple(found))
    out = tmp_path / "bundle"
    export_bundle(run, out)
    vkey = key.verifier.vkey
    for s in sealed:
        path = out / "log" / f"{s.seq:012d}.tlog-proof"
        res = _go(go_tool, vkey, path, leaf_hash(s.run_id, s.seq, s.hash).hex())
        assert res.returncode == 0, res.stdout + res.stderr
        assert res.stdout.split()[:3] == ["ok", ORIGIN, str(tree.size)]
    # and Go refuses what we refuse: another leaf, another key
    path = out / "log" / "000000000004.tlog-proof"
    wrong = leaf_hash("run-go", 4, b"\x01" * 32).hex()
    res = _go(go_tool, vkey, path, wrong)
    assert res.returncode == 1 and "FAIL inclusion" in res.stdout
    stranger = Ed25519Signer.generate("tv.go-log").verifier.vkey
    res = _go(go_tool, stranger, path, leaves[4].hex())
    assert res.returncode == 1 and "FAIL checkpoint" in res.stdout
