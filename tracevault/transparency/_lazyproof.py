"""An inclusion proof built as it is read, from any node source (topic records or tiles).

Why lazy: a verifier proves a run's consecutive leaves as ranges (``check_run_log``): it
hashes each range into perfect subtrees and climbs from each with the proof of its first
leaf, *from that subtree's level*, and stops at a node already proven. So of a 100,000-event
run's proofs only a few elements are ever read; building every proof up front (one RFC 6962
recursion per event) cost more than the rest of verify together. The elements, when read,
are exactly RFC 6962 ``PATH(index, D[size])`` (tests/transparency/test_lazyproof.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from itertools import islice
from typing import overload

from tracevault.errors import LogError
from tracevault.transparency._merkle import NodeSource, range_hash

__all__ = ["LazyProof", "edge_source", "proof_from"]

#: ``edge(first)``: the hash of leaves ``first .. size-1`` (the tree's incomplete right edge).
EdgeSource = Callable[[int], bytes]


def edge_source(size: int, node: NodeSource) -> EdgeSource:
    """The right-edge hashes of the tree of ``size`` leaves, memoised (proofs share them)."""
    memo: dict[int, bytes] = {}

    def edge(first: int) -> bytes:
        got = memo.get(first)
        if got is None:
            got = memo[first] = range_hash(first, size, node)
        return got

    return edge


class LazyProof(Sequence[bytes]):
    """Leaf ``index``'s inclusion proof in the tree of ``size`` leaves, built on reading."""

    __slots__ = ("_edge", "_index", "_node", "_size")

    def __init__(self, index: int, size: int, node: NodeSource, edge: EdgeSource) -> None:
        if not 0 <= index < size:
            raise LogError(f"leaf {index} is not in a tree of size {size}")
        self._index, self._size, self._node, self._edge = index, size, node, edge

    def tail(self, start: int) -> Iterator[bytes]:
        """The proof from its element ``start`` on, without building the ones before.

        Below level ``inner`` the elements are the siblings at levels 0, 1, ... (perfect
        subtrees, but for one right-edge range); above, the path runs along the tree's right
        border and only the left siblings (the set bits of ``index``) are elements.
        """
        index, size, node = self._index, self._size, self._node
        inner = (index ^ (size - 1)).bit_length()
        for level in range(start, inner):
            sib = (index >> level) ^ 1
            if (sib + 1) << level <= size:
                yield node(level, sib)
            else:
                yield self._edge(sib << level)
        skip = max(0, start - inner)
        for level in range(inner, size.bit_length()):
            if index >> level & 1:
                if skip:
                    skip -= 1
                    continue
                yield node(level, (index >> level) ^ 1)

    def __iter__(self) -> Iterator[bytes]:
        return self.tail(0)

    def __len__(self) -> int:
        inner = (self._index ^ (self._size - 1)).bit_length()
        return inner + (self._index >> inner).bit_count()

    @overload
    def __getitem__(self, i: int) -> bytes: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[bytes]: ...
    def __getitem__(self, i: int | slice) -> bytes | Sequence[bytes]:
        return tuple(self)[i]


def proof_from(proof: Sequence[bytes], start: int) -> Iterator[bytes]:
    """``proof`` from element ``start``; a :class:`LazyProof` skips without building."""
    if isinstance(proof, LazyProof):
        return proof.tail(start)
    return islice(proof, start, None)
