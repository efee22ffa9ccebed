"""A node source over a compact tree and the leaves after it: proofs from a checkpoint record.

A checkpoint record carries the compact tree at ``start`` and the leaf hashes ``start..end``.
Every node an RFC 6962 consistency proof from any size ``m`` in ``[start, end]`` to ``end``
needs is one of those compact hashes, or is built from them and the listed leaves: the proof's
nodes left of ``m`` are the maximal perfect subtrees of ``[0, m)``, and each is a compact node
of ``start`` or splits into compact nodes and listed leaves. So a reader of the sealed topic
(the witness) can prove consistency from the record alone, with no copy of the log.
"""

from __future__ import annotations

from collections.abc import Sequence

from tracevault.errors import LogError
from tracevault.transparency._gather import compact_positions
from tracevault.transparency._merkle import NodeSource, hash_children

__all__ = ["compact_range_source"]


def compact_range_source(
    start: int, prefix: Sequence[bytes], leaves: Sequence[bytes]
) -> NodeSource:
    """Nodes of the tree of ``start + len(leaves)`` leaves; others raise :class:`LogError`."""
    if len(prefix) != start.bit_count():
        raise LogError(f"a compact tree of size {start} has {start.bit_count()} hashes")
    known = dict(zip(compact_positions(start), prefix, strict=True))
    end = start + len(leaves)

    def node(level: int, index: int) -> bytes:
        got = known.get((level, index))
        if got is not None:
            return got
        lo = index << level
        hi = lo + (1 << level)
        if hi > end or (level == 0 and lo < start):
            raise LogError(f"node {level}/{index} is not derivable from the compact range")
        if level == 0:
            return leaves[lo - start]
        got = hash_children(node(level - 1, 2 * index), node(level - 1, 2 * index + 1))
        known[(level, index)] = got
        return got

    return node
