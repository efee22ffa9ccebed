"""The report's one inclusion proof per run (``tracevault.desk.rangeproof``), in Python.

The browser's ``runRoot`` (report.js) walks the tree as ``run_root`` does; the browser tests
(test_report.py) hold it to the same proofs. Here: for many sets of leaves, in trees of many
sizes, the proof built from the leaves' own RFC 6962 proofs leads to the tree's root, is as
short as the subtrees beside the leaves, and a changed, missing or extra hash fails.
"""

from __future__ import annotations

import hashlib
import random

import pytest

from tracevault.desk.rangeproof import path_ranges, run_proof, run_root
from tracevault.transparency import hash_children, inclusion_proof, list_source, tree_root


def _tree(size: int) -> list[bytes]:
    return [hashlib.sha256(b"leaf %d" % i).digest() for i in range(size)]


def _proof(indexes: list[int], size: int, leaves: list[bytes]) -> list[bytes]:
    """The run's proof as the report writes it: from each leaf's own inclusion proof."""
    node = list_source(leaves)
    known: dict[tuple[int, int], bytes] = {}
    for i in indexes:
        known.update(zip(path_ranges(i, size), inclusion_proof(i, size, node), strict=True))
    return run_proof(indexes, size, known)


def _cases() -> list[tuple[int, list[int]]]:
    rng = random.Random(32)
    out = [(1, [0]), (2, [1]), (33, list(range(22, 33))), (1000, list(range(500, 600)))]
    for size in (3, 7, 8, 9, 100, 257, 1023):
        out.append((size, list(range(size))))  # every leaf: nothing beside them
        out.append((size, sorted(rng.sample(range(size), max(1, size // 5)))))  # interleaved
        lo = rng.randrange(size)
        out.append((size, list(range(lo, rng.randrange(lo, size) + 1))))  # one range
    return out


@pytest.mark.parametrize(("size", "indexes"), _cases())
def test_the_leaves_and_the_proof_lead_to_the_root(size: int, indexes: list[int]) -> None:
    leaves = _tree(size)
    proof = _proof(indexes, size, leaves)
    mine = [leaves[i] for i in indexes]
    assert run_root(indexes, size, mine, proof, hash_children) == tree_root(
        size, list_source(leaves)
    )
    if len(indexes) == size:
        assert proof == []
    if indexes == list(range(indexes[0], indexes[-1] + 1)):  # one range: two paths at most
        assert len(proof) <= 2 * size.bit_length()


def test_a_changed_missing_or_extra_hash_fails() -> None:
    size, indexes = 1000, list(range(500, 600))
    leaves = _tree(size)
    root = tree_root(size, list_source(leaves))
    mine = [leaves[i] for i in indexes]
    proof = _proof(indexes, size, leaves)
    for k in range(len(proof)):
        changed = [*proof[:k], bytes(32), *proof[k + 1 :]]
        assert run_root(indexes, size, mine, changed, hash_children) != root
    other = list(mine)
    other[7] = bytes(32)  # one leaf's hash changed
    assert run_root(indexes, size, other, proof, hash_children) != root
    with pytest.raises(ValueError, match="too few"):
        run_root(indexes, size, mine, proof[:-1], hash_children)
    with pytest.raises(ValueError, match="more hashes"):
        run_root(indexes, size, mine, [*proof, proof[0]], hash_children)


def test_a_subtree_no_proof_gave_is_zeros_so_it_fails() -> None:
    size, indexes = 64, [10, 11]
    leaves = _tree(size)
    proof = run_proof(indexes, size, {})  # nothing known
    assert proof and all(h == bytes(32) for h in proof)
    mine = [leaves[i] for i in indexes]
    assert run_root(indexes, size, mine, proof, hash_children) != tree_root(
        size, list_source(leaves)
    )
