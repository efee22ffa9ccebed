"""The C tree hashing (``_cmerkle.c``) and the SHA-256 under it give exactly what Python gives.

The reference is RFC 6962's recursive definition as ``_merkle.py`` writes it
(``tree_root`` over ``list_source``, ``hash_children``) and hashlib's SHA-256. The SHA
extensions are used where the CPU has them; ``TRACEVAULT_PORTABLE_SHA256`` forces the
portable compression, and both are checked here. The modules are imported unconditionally:
a build that lost its C path fails here, loudly.
"""

from __future__ import annotations

import hashlib
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.sha256_compressions import compressions_here, under_each_compression
from tracevault.consumer.archive import _ctake
from tracevault.log import _cmerkle, _merkle
from tracevault.log._merkle import CompactTree, hash_children, list_source, tree_root
from tracevault.log._tiles import TileState


def _leaves(n: int, seed: int = 0) -> list[bytes]:
    rng = random.Random(seed)
    return [rng.randbytes(32) for _ in range(n)]


@given(data=st.binary(max_size=300))
@settings(max_examples=300, deadline=None)
def test_sha256_is_hashlibs(data: bytes) -> None:
    assert _ctake.sha256(data) == hashlib.sha256(data).digest()


def test_both_compressions_are_hashlibs_at_every_length() -> None:
    """In a child process per compression, every length 0..300 (1 to 6 blocks, each way the
    padding can fall)."""
    code = (
        "import hashlib, random, sys\n"
        "from tracevault.consumer.archive import _ctake\n"
        "from tracevault.log import _cmerkle\n"
        "rng = random.Random(7)\n"
        "for n in range(301):\n"
        "    d = rng.randbytes(n)\n"
        "    assert _ctake.sha256(d) == hashlib.sha256(d).digest(), n\n"
        "l, r = rng.randbytes(32), rng.randbytes(32)\n"
        "assert _cmerkle.hash_children(l, r) == hashlib.sha256(b'\\x01' + l + r).digest()\n"
        "print(_ctake.sha256_impl, _cmerkle.sha256_impl)\n"
    )
    outs = under_each_compression(code)
    assert all(out[0] == out[1] for out in outs)
    assert {out[0] for out in outs} == compressions_here()


@pytest.mark.parametrize("n", [0, 1, 2, 3, 7, 8, 255, 256, 257, 511, 1000])
def test_a_compact_tree_extended_in_c_has_the_rfc_6962_root(n: int) -> None:
    leaves = _leaves(n, n)
    rng = random.Random(n)
    tree, i = CompactTree(), 0
    while i < n:  # in uneven pieces, as checkpoint records come
        k = rng.randint(1, 40)
        tree.extend(leaves[i : i + k])
        i += k
    assert tree.size == n
    assert tree.root() == tree_root(n, list_source(leaves))
    assert len(tree.hashes) == n.bit_count()


def test_a_hash_that_is_not_32_bytes_changes_nothing_in_c_and_is_hashed_as_given() -> None:
    tree = CompactTree()
    tree.extend(_leaves(3))
    before = (tree.size, list(tree.hashes))
    with pytest.raises(ValueError, match="32 bytes"):
        _cmerkle.extend(tree.hashes, tree.size, [*_leaves(2, 9), b"short"])
    assert (tree.size, tree.hashes) == before
    tree.extend([b"short"])  # the Python path, as before there was a C one
    assert tree.size == 4
    want = hash_children(hash_children(*_leaves(3)[:2]), hash_children(_leaves(3)[2], b"short"))
    assert tree.root() == want


@pytest.mark.parametrize("n", [1, 2, 4, 64, 256])
def test_perfect_root_is_the_subtree_root(n: int) -> None:
    leaves = _leaves(n, 3)
    assert _cmerkle.perfect_root(leaves) == tree_root(n, list_source(leaves))


def test_tiles_are_the_same_with_and_without_c(monkeypatch: pytest.MonkeyPatch) -> None:
    leaves = _leaves(256 * 3 + 17, 5)

    def tiles() -> tuple[list[tuple[int, int, int, bytes]], bytes]:
        state = TileState()
        for i in range(0, len(leaves), 100):
            state.extend(leaves[i : i + 100])
        return state.take_tiles(), state.compact().root()

    with_c = tiles()
    monkeypatch.setattr(_merkle, "_cmerkle", None)  # the one switch for trees and tiles
    assert tiles() == with_c
    assert with_c[1] == tree_root(len(leaves), list_source(leaves))
