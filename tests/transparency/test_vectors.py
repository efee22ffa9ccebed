"""Published RFC 6962 test vectors: our hashes, roots, inclusion and consistency proofs match.

The vectors (tests/transparency/data/rfc6962_vectors.json, its ``source`` field names where they
come
from) are the certificate-transparency test data as transparency-dev/merkle ships them: a
tree of eight leaves, every node hash, every root from size 0 to 8, and a set of proofs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tracevault.errors import LogError
from tracevault.transparency import (
    EMPTY_ROOT,
    CompactTree,
    compact_range_source,
    consistency_proof,
    hash_children,
    hash_leaf,
    inclusion_proof,
    list_source,
    root_from_inclusion,
    tree_root,
    verify_consistency,
    verify_inclusion,
)

V: dict[str, Any] = json.loads(
    (Path(__file__).parent / "data" / "rfc6962_vectors.json").read_text()
)
LEAVES = [bytes.fromhex(x) for x in V["leaves"]]
HASHES = [hash_leaf(x) for x in LEAVES]
ROOTS = [bytes.fromhex(x) for x in V["roots"]]
SRC = list_source(HASHES)


def _h(xs: list[str]) -> list[bytes]:
    return [bytes.fromhex(x) for x in xs]


def test_hasher_vectors() -> None:
    empty, empty_leaf, leaf, node = V["hasher"]
    assert EMPTY_ROOT.hex() == empty["root_of_empty"]
    assert hash_leaf(b"").hex() == empty_leaf["leaf_hash"]
    assert hash_leaf(bytes.fromhex(leaf["leaf"])).hex() == leaf["leaf_hash"]
    left, right = bytes.fromhex(node["left"]), bytes.fromhex(node["right"])
    assert hash_children(left, right).hex() == node["node_hash"]


def test_node_hashes_and_every_root() -> None:
    for level, row in enumerate(V["node_hashes"]):
        assert [SRC(level, i) for i in range(len(row))] == _h(row)
    assert [tree_root(n, SRC) for n in range(len(ROOTS))] == ROOTS
    tree = CompactTree()
    for n, h in enumerate(HASHES, start=1):
        tree.append(h)
        assert tree.root() == ROOTS[n]


@pytest.mark.parametrize("vec", V["inclusion"], ids=lambda v: f"{v['index']}of{v['size']}")
def test_inclusion_vectors(vec: dict[str, Any]) -> None:
    i, n, proof = vec["index"], vec["size"], _h(vec["proof"])
    assert inclusion_proof(i, n, SRC) == proof
    assert root_from_inclusion(i, n, HASHES[i], proof) == ROOTS[n]
    verify_inclusion(i, n, HASHES[i], proof, ROOTS[n])
    if proof:
        with pytest.raises(LogError):
            verify_inclusion(i, n, HASHES[i], [*proof[:-1], bytes(32)], ROOTS[n])


@pytest.mark.parametrize("vec", V["consistency"], ids=lambda v: f"{v['size1']}to{v['size2']}")
def test_consistency_vectors(vec: dict[str, Any]) -> None:
    m, n, proof = vec["size1"], vec["size2"], _h(vec["proof"])
    assert consistency_proof(m, n, SRC) == proof
    verify_consistency(m, n, proof, ROOTS[m], ROOTS[n])
    # the witness proves from a checkpoint record (compact tree at m + the leaves after it)
    start = CompactTree()
    start.extend(HASHES[:m])
    rsrc = compact_range_source(m, start.hashes, HASHES[m:n])
    assert consistency_proof(m, n, rsrc) == proof
    if proof:
        with pytest.raises(LogError):
            verify_consistency(m, n, proof, ROOTS[m], ROOTS[n - 1])
