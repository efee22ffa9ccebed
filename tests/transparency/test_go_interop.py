"""Interop with Go's own implementations, both ways (tests/transparency/go/main.go).

- golang.org/x/mod/sumdb/note opens our signed checkpoints with our vkey, and
  github.com/transparency-dev/formats/note our cosignature/v1 cosignatures with our witness vkey;
- github.com/transparency-dev/merkle verifies our inclusion and consistency proofs, and its
  reference tree computes the same roots and proofs as ours;
- a note signed and cosigned by Go with Go-made keys opens with our verifiers.

The program is built with ``go build`` (modules from the proxy, pinned by go.sum) once per
content of tests/transparency/go into a temporary directory. Go missing is a failure, not a skip.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest

from tracevault.transparency import (
    Checkpoint,
    CheckpointRecord,
    CompactTree,
    CosignatureSigner,
    Ed25519Signer,
    add_cosignature,
    consistency_proof,
    hash_leaf,
    inclusion_proof,
    leaf_hash,
    list_source,
    open_note,
    parse_vkey,
    parse_witness_vkey,
    sign_note,
    split_note,
    tree_root,
)

GO_DIR = Path(__file__).parent / "go"


@pytest.fixture(scope="module")
def interop() -> Path:
    go = shutil.which("go") or (
        "/usr/local/go/bin/go" if Path("/usr/local/go/bin/go").exists() else None
    )
    if go is None:
        pytest.fail("the Go toolchain is not installed: the interop test needs `go` on PATH")
    digest = hashlib.sha256()
    for name in ("go.mod", "go.sum", "main.go"):
        digest.update((GO_DIR / name).read_bytes())
    out = Path(tempfile.gettempdir()) / f"tracevault-go-interop-{digest.hexdigest()[:16]}"
    binary = out / "interop"
    if not binary.exists():
        out.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "GOFLAGS": "-mod=mod -buildvcs=false"}
        tmp = out / f"interop.{os.getpid()}"
        subprocess.run(
            [go, "build", "-o", str(tmp), "."], cwd=GO_DIR, env=env, check=True, timeout=900
        )
        tmp.replace(binary)
    return binary


def _go(binary: Path, request: dict[str, Any]) -> Any:
    res = subprocess.run(
        [str(binary)],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if res.returncode != 0:
        raise AssertionError(f"the Go side refused: {res.stderr.strip()}")
    return json.loads(res.stdout)


def _b64(b: bytes) -> str:
    return base64.b64encode(b).decode()


def _leaves(n: int) -> list[bytes]:
    return [leaf_hash(f"run-{i % 3}", i, hashlib.sha256(bytes([i])).digest()) for i in range(n)]


def test_go_opens_our_checkpoint_and_cosignature(interop: Path) -> None:
    log = Ed25519Signer.generate("tracevault.example/log")
    w = CosignatureSigner.generate("witness.example/w1")
    leaves = _leaves(5)
    rec, _tree = CheckpointRecord.build(CompactTree(), leaves, "tracevault/t/0", log)
    got = _go(interop, {"op": "open", "note": rec.note, "vkeys": [log.verifier.vkey]})
    assert got["text"] == Checkpoint("tracevault/t/0", 5, tree_root(5, list_source(leaves))).body()
    assert [s["name"] for s in got["verified"]] == ["tracevault.example/log"]
    assert got["verified"][0]["hash"] == int.from_bytes(log.key_id, "big")

    cosigned = add_cosignature(rec.note, w)
    got = _go(
        interop,
        {
            "op": "open",
            "note": cosigned,
            "vkeys": [log.verifier.vkey],
            "witness_vkeys": [w.verifier.vkey],
        },
    )
    assert [s["name"] for s in got["verified"]] == ["tracevault.example/log", "witness.example/w1"]
    assert got["verified"][1]["hash"] == int.from_bytes(w.key_id, "big")

    # the Go side really checks: an altered cosignature is refused by it
    text, sigs = split_note(cosigned)
    bad = sigs[1].signature[:-1] + bytes([sigs[1].signature[-1] ^ 1])
    tampered = (
        text + "\n" + sigs[0].line() + type(sigs[1])(sigs[1].name, sigs[1].key_id, bad).line()
    )
    with pytest.raises(AssertionError, match="Go side refused"):
        _go(
            interop,
            {
                "op": "open",
                "note": tampered,
                "vkeys": [log.verifier.vkey],
                "witness_vkeys": [w.verifier.vkey],
            },
        )


def test_go_verifies_our_inclusion_and_consistency_proofs(interop: Path) -> None:
    n = 23
    leaves = _leaves(n)
    src = list_source(leaves)
    root = tree_root(n, src)
    inclusion = [
        {
            "index": i,
            "size": n,
            "leaf_hash": _b64(leaves[i]),
            "proof": [_b64(h) for h in inclusion_proof(i, n, src)],
            "root": _b64(root),
        }
        for i in range(n)
    ]
    consistency = [
        {
            "size1": m,
            "size2": k,
            "root1": _b64(tree_root(m, src)),
            "root2": _b64(tree_root(k, src)),
            "proof": [_b64(h) for h in consistency_proof(m, k, src)],
        }
        for k in range(1, n + 1)
        for m in range(1, k + 1)
    ]
    got = _go(interop, {"op": "proofs", "inclusion": inclusion, "consistency": consistency})
    assert got == {"inclusion": n, "consistency": len(consistency)}
    # and a wrong proof is refused by Go, so the check above is not vacuous
    inclusion[3]["proof"][0] = _b64(b"\x00" * 32)
    with pytest.raises(AssertionError, match="inclusion of 3 in 23"):
        _go(interop, {"op": "proofs", "inclusion": inclusion, "consistency": []})


def test_go_reference_tree_equals_ours(interop: Path) -> None:
    data = [hashlib.sha256(bytes([i])).digest()[: i % 7] for i in range(19)]
    got = _go(interop, {"op": "tree", "leaves": [_b64(d) for d in data]})
    hashes = [hash_leaf(d) for d in data]
    src = list_source(hashes)
    n = len(data)
    assert [base64.b64decode(r) for r in got["roots"]] == [tree_root(s, src) for s in range(n + 1)]
    for i in range(n):
        assert [base64.b64decode(h) for h in got["inclusion"][i]] == inclusion_proof(i, n, src)
    for m in range(1, n + 1):
        assert [base64.b64decode(h) for h in got["consistency"][m]] == consistency_proof(m, n, src)


def test_a_note_go_signed_and_cosigned_opens_with_our_verifiers(interop: Path) -> None:
    body = Checkpoint("go.example/log", 7, hashlib.sha256(b"x").digest()).body()
    got = _go(
        interop,
        {"op": "sign", "name": "go.example/log", "witness_name": "go.example/w", "text": body},
    )
    log_v = parse_vkey(got["vkey"])
    wit_v = parse_witness_vkey(got["witness_vkey"])
    text, good = open_note(got["note"], [log_v, wit_v])
    assert text == body and good == [log_v, wit_v]
    # Go's private key file format is ours: we sign with it, and the signature is the same
    assert Ed25519Signer.from_skey(got["skey"]).verifier == log_v
    assert (
        sign_note(body, [Ed25519Signer.from_skey(got["skey"])])
        == got["note"].split("\u2014 go.example/w")[0]
    )
