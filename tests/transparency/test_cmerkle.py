"""The C tree hashing (``_cmerkle.c``) and the SHA-256 under it give exactly what Python gives.

The reference is RFC 6962's recursive definition as ``_merkle.py`` writes it
(``tree_root`` over ``list_source``, ``hash_children``) and hashlib's SHA-256. The SHA-256
of every C path is OpenSSL's libcrypto (``tracevault/_digest.h``), the library hashlib links.
A build that lost its C path fails here, loudly (tests/native.py).
"""

from __future__ import annotations

import hashlib
import random
import ssl

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.native import examples, extension
from tracevault.transparency import _merkle
from tracevault.transparency._merkle import CompactTree, hash_children, list_source, tree_root
from tracevault.transparency._tiles import TileState

_ctake = extension("tracevault.services.archiver._ctake")
_cmerkle = extension("tracevault.transparency._cmerkle")


def _leaves(n: int, seed: int = 0) -> list[bytes]:
    rng = random.Random(seed)
    return [rng.randbytes(32) for _ in range(n)]


@given(data=st.binary(max_size=300))
@settings(max_examples=examples(300), deadline=None)
def test_sha256_is_hashlibs(data: bytes) -> None:
    assert _ctake.sha256(data) == hashlib.sha256(data).digest()


def test_sha256_is_hashlibs_at_every_length_and_node() -> None:
    """Every length 0..300 (1 to 6 blocks, each way the padding can fall), and a node."""
    rng = random.Random(7)
    for n in range(301):
        d = rng.randbytes(n)
        assert _ctake.sha256(d) == hashlib.sha256(d).digest(), n
    left, right = rng.randbytes(32), rng.randbytes(32)
    assert _cmerkle.hash_children(left, right) == hashlib.sha256(b"\x01" + left + right).digest()


def test_the_sha256_of_every_c_path_is_openssls() -> None:
    """Not a compression of our own: each extension names the library it hashes with, and
    it is the OpenSSL that Python's own ssl and hashlib modules link."""
    cseal = extension("tracevault.services.sequencer._cseal")
    libs = {m.sha256_impl for m in (_ctake, _cmerkle, cseal)}
    assert libs == {ssl.OPENSSL_VERSION}, libs


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
