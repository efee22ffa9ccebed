"""RFC 6962 hashing, compact trees and proofs against a literal reading of the RFC."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracevault.errors import LogError
from tracevault.transparency import (
    EMPTY_ROOT,
    CompactTree,
    consistency_proof,
    hash_leaf,
    inclusion_proof,
    list_source,
    root_from_inclusion,
    tree_root,
    verify_consistency,
    verify_inclusion,
)


def mth(leaves: list[bytes]) -> bytes:
    """RFC 6962 section 2.1, as written: the reference the fast code is held to."""
    n = len(leaves)
    if n == 0:
        return hashlib.sha256(b"").digest()
    if n == 1:
        return hashlib.sha256(b"\x00" + leaves[0]).digest()
    k = 1
    while k * 2 < n:
        k *= 2
    return hashlib.sha256(b"\x01" + mth(leaves[:k]) + mth(leaves[k:])).digest()


def data(n: int) -> list[bytes]:
    return [i.to_bytes(4, "big") for i in range(n)]


def test_empty_tree_root_is_hash_of_nothing() -> None:
    assert CompactTree().root() == EMPTY_ROOT == mth([])


@pytest.mark.parametrize("n", [*range(1, 34), 255, 256, 257, 1000])
def test_compact_tree_root_equals_rfc_mth(n: int) -> None:
    leaves = data(n)
    tree = CompactTree()
    tree.extend([hash_leaf(x) for x in leaves])
    assert tree.root() == mth(leaves)
    assert tree_root(n, list_source([hash_leaf(x) for x in leaves])) == mth(leaves)
    again = CompactTree.from_bytes(tree.to_bytes())
    assert again == tree


def test_compact_tree_refuses_wrong_hash_count() -> None:
    with pytest.raises(LogError, match="needs 2"):
        CompactTree(3, [b"\x00" * 32])


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 300), st.data())
def test_every_inclusion_proof_verifies_and_a_wrong_leaf_fails(n: int, d: st.DataObject) -> None:
    hashes = [hash_leaf(x) for x in data(n)]
    src = list_source(hashes)
    root = mth(data(n))
    i = d.draw(st.integers(0, n - 1))
    proof = inclusion_proof(i, n, src)
    verify_inclusion(i, n, hashes[i], proof, root)
    with pytest.raises(LogError):
        verify_inclusion(i, n, hash_leaf(b"forged"), proof, root)
    if n > 1:
        j = (i + 1) % n
        with pytest.raises(LogError):
            verify_inclusion(j, n, hashes[i], proof, root)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 300), st.data())
def test_every_consistency_proof_verifies_and_a_fork_fails(n: int, d: st.DataObject) -> None:
    m = d.draw(st.integers(1, n))
    hashes = [hash_leaf(x) for x in data(n)]
    proof = consistency_proof(m, n, list_source(hashes))
    old_root, new_root = mth(data(m)), mth(data(n))
    verify_consistency(m, n, proof, old_root, new_root)
    forked = data(m)
    forked[-1] = b"fork"
    with pytest.raises(LogError):
        verify_consistency(m, n, proof, mth(forked), new_root)
    if m < n:
        with pytest.raises(LogError, match="shrank"):
            verify_consistency(n, m, proof, new_root, old_root)


def test_inclusion_proof_of_wrong_length_is_refused() -> None:
    hashes = [hash_leaf(x) for x in data(8)]
    proof = inclusion_proof(3, 8, list_source(hashes))
    with pytest.raises(LogError, match="too short"):
        root_from_inclusion(3, 8, hashes[3], proof[:-1])
    with pytest.raises(LogError, match="too long"):
        root_from_inclusion(3, 8, hashes[3], [*proof, proof[0]])
