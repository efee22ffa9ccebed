"""Proofs across a ``gone`` hole: every node a proof after it needs comes from the compact tree
the next checkpoint record carries, and none inside it is ever made up.

Property test (hypothesis) over hole positions and tree sizes: the tiles' node source holds
zeros for the hole's leaves (as the archiver writes them), ``hole_node_source`` answers for
nodes overlapping it from the compact tree at its end, and RFC 6962 proofs built from it
verify against the roots of the real tree (docs/log.md, "Holes").
"""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracevault.archive._holes import compact_at, hole_node_source
from tracevault.errors import LogError
from tracevault.transparency import (
    CompactTree,
    consistency_proof,
    inclusion_proof,
    list_source,
    tree_root,
    verify_consistency,
    verify_inclusion,
)
from tracevault.transparency._gather import compact_positions

ZERO = bytes(32)


def _leaves(n: int) -> list[bytes]:
    return [hashlib.sha256(b"leaf %d" % i).digest() for i in range(n)]


@st.composite
def holes(draw: st.DrawFn) -> tuple[int, int, int]:
    first = draw(st.integers(0, 300))
    end = draw(st.integers(first + 1, first + 300))
    size = draw(st.integers(end + 1, end + 300))  # at least one leaf after it
    return first, end, size


@settings(max_examples=60, deadline=None)
@given(holes(), st.data())
def test_proofs_after_a_gone_hole_hold_and_none_inside_it_is_made_up(
    hole: tuple[int, int, int], data: st.DataObject
) -> None:
    first, end, size = hole
    real = _leaves(size)
    full = list_source(real)
    seen = real[:first] + [ZERO] * (end - first) + real[end:]  # what the tiles hold
    gap = CompactTree()
    gap.extend(real[:end])  # the compact tree the next checkpoint record carries
    node = hole_node_source(list_source(seen), [gap], [first])
    root = tree_root(size, full)
    assert tree_root(size, node) == root
    assert compact_at(size, node).root() == root
    leaf = data.draw(st.integers(end, size - 1))
    verify_inclusion(leaf, size, real[leaf], inclusion_proof(leaf, size, node), root)
    old = data.draw(st.integers(end, size))
    if old < size:
        proof = consistency_proof(old, size, node)
        verify_consistency(old, size, proof, tree_root(old, full), root)
    inside = data.draw(st.integers(first, end - 1))
    if (0, inside) in compact_positions(end):
        assert node(0, inside) == real[inside]  # a one-leaf subtree of the compact tree
    else:  # a leaf hash the hole took is never answered (zeros or otherwise)
        with pytest.raises(LogError, match="hole"):
            node(0, inside)
