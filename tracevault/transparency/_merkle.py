"""RFC 6962 Merkle tree hashing, the compact state a writer keeps, and both kinds of proof.

Why our own and not a library: the algorithms are a page of code, the Python packages that
carry them are unmaintained or pull in a whole transparency-log client, and the one test that
matters is interop with Go's ``github.com/transparency-dev/merkle``
(tests/transparency/test_go_interop.py).
The verification functions follow RFC 9162 section 2.1.3.2 and 2.1.4.2 word for word; the proof
builders follow RFC 6962 section 2.1.1 and 2.1.2 over a *node source* so that the same code
proves from an in-memory list, from tiles in the archive, or from a sealed partition
(docs/log.md).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import ModuleType

from tracevault import native
from tracevault.errors import LogError

# the tree hashing in C: optional (pyproject.toml), and off under TRACEVAULT_NO_C=1
_cmerkle: ModuleType | None = native.load("tracevault.transparency._cmerkle")

__all__ = [
    "EMPTY_ROOT",
    "HASH_SIZE",
    "CompactTree",
    "NodeSource",
    "consistency_proof",
    "hash_children",
    "perfect_root",
    "hash_leaf",
    "inclusion_proof",
    "list_source",
    "range_hash",
    "root_from_inclusion",
    "tree_root",
    "verify_consistency",
    "verify_inclusion",
]

HASH_SIZE = 32
EMPTY_ROOT = hashlib.sha256(b"").digest()

#: ``node(level, index)``: the hash of the perfect subtree of ``2**level`` leaves starting at
#: leaf ``index * 2**level``. Tiles store exactly these; proofs need nothing else.
NodeSource = Callable[[int, int], bytes]


def hash_leaf(data: bytes) -> bytes:
    """RFC 6962 leaf hash: the 0x00 prefix keeps a leaf from posing as an inner node."""
    return hashlib.sha256(b"\x00" + data).digest()


def hash_children(left: bytes, right: bytes) -> bytes:
    """RFC 6962 interior node hash."""
    return hashlib.sha256(b"\x01" + left + right).digest()


def perfect_root(layer: list[bytes]) -> bytes:
    """The root of the perfect subtree over ``layer`` (a power of two of hashes): a full
    tile's root, in C where it is built."""
    if _cmerkle is not None:
        try:
            root: bytes = _cmerkle.perfect_root(layer)
            return root
        except ValueError:
            pass  # a hash that is not 32 bytes: hashed as given below
    while len(layer) > 1:
        layer = [hash_children(layer[i], layer[i + 1]) for i in range(0, len(layer), 2)]
    return layer[0]


def _split(n: int) -> int:
    """The largest power of two strictly below ``n`` (RFC 6962's ``k``), for ``n > 1``."""
    return 1 << ((n - 1).bit_length() - 1)


@dataclass(slots=True)
class CompactTree:
    """The right edge of a tree: one hash per set bit of ``size``, largest subtree first.

    This is all a writer needs to append leaves and compute roots, in O(log n) space. The
    sequencer keeps one per sealed partition with its other state, and a checkpoint record
    carries the one at the start of its leaves so a reader can check them alone.
    """

    size: int = 0
    hashes: list[bytes] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.size < 0 or len(self.hashes) != self.size.bit_count():
            raise LogError(
                f"compact tree of size {self.size} needs {max(self.size, 0).bit_count()} "
                f"subtree hashes, got {len(self.hashes)}"
            )
        if any(len(h) != HASH_SIZE for h in self.hashes):
            raise LogError("compact tree holds a hash that is not 32 bytes")

    def append(self, leaf_hash: bytes) -> None:
        hashes = self.hashes
        hashes.append(leaf_hash)
        self.size += 1
        n = self.size
        while not n & 1:
            right = hashes.pop()
            hashes[-1] = hash_children(hashes[-1], right)
            n >>= 1

    def extend(self, leaf_hashes: Sequence[bytes]) -> None:
        """``append`` of each (in C where it is built: a checkpoint record's hundreds)."""
        if _cmerkle is not None:
            try:
                self.size = _cmerkle.extend(self.hashes, self.size, leaf_hashes)
                return
            except ValueError:
                pass  # a hash that is not 32 bytes: nothing changed; appended as given below
        for h in leaf_hashes:
            self.append(h)

    def root(self) -> bytes:
        hashes = self.hashes
        if not hashes:
            return EMPTY_ROOT
        r = hashes[-1]
        for h in reversed(hashes[:-1]):
            r = hash_children(h, r)
        return r

    def copy(self) -> CompactTree:
        return CompactTree(self.size, list(self.hashes))

    def to_bytes(self) -> bytes:
        return self.size.to_bytes(8, "big") + b"".join(self.hashes)

    @classmethod
    def from_bytes(cls, data: bytes) -> CompactTree:
        if len(data) < 8:
            raise LogError("compact tree state shorter than its 8-byte size")
        size = int.from_bytes(data[:8], "big")
        body = data[8:]
        if len(body) != size.bit_count() * HASH_SIZE:
            raise LogError(f"compact tree state of size {size} has {len(body)} hash bytes")
        return cls(size, [body[i : i + HASH_SIZE] for i in range(0, len(body), HASH_SIZE)])


def list_source(leaf_hashes: Sequence[bytes]) -> NodeSource:
    """A node source over leaf hashes held in memory (memoised: proofs reuse nodes)."""
    memo: dict[tuple[int, int], bytes] = {}

    def node(level: int, index: int) -> bytes:
        if level == 0:
            return leaf_hashes[index]
        key = (level, index)
        got = memo.get(key)
        if got is None:
            got = hash_children(node(level - 1, 2 * index), node(level - 1, 2 * index + 1))
            memo[key] = got
        return got

    return node


def range_hash(lo: int, hi: int, node: NodeSource) -> bytes:
    """MTH of leaves ``[lo, hi)``, for the ranges RFC 6962's recursion visits."""
    n = hi - lo
    if n <= 0:
        raise LogError(f"empty leaf range [{lo}, {hi})")
    if not n & (n - 1) and not lo % n:
        level = n.bit_length() - 1
        return node(level, lo >> level)
    k = _split(n)
    return hash_children(range_hash(lo, lo + k, node), range_hash(lo + k, hi, node))


def tree_root(size: int, node: NodeSource) -> bytes:
    return EMPTY_ROOT if size == 0 else range_hash(0, size, node)


def inclusion_proof(index: int, size: int, node: NodeSource) -> list[bytes]:
    """RFC 6962 ``PATH(index, D[size])``, leaf to root."""
    if not 0 <= index < size:
        raise LogError(f"leaf {index} is not in a tree of size {size}")
    proof: list[bytes] = []

    def path(m: int, lo: int, hi: int) -> None:
        n = hi - lo
        if n == 1:
            return
        k = _split(n)
        if m < k:
            path(m, lo, lo + k)
            proof.append(range_hash(lo + k, hi, node))
        else:
            path(m - k, lo + k, hi)
            proof.append(range_hash(lo, lo + k, node))

    path(index, 0, size)
    return proof


def consistency_proof(old_size: int, new_size: int, node: NodeSource) -> list[bytes]:
    """RFC 6962 ``PROOF(old_size, D[new_size])``; empty when either tree is trivially related."""
    if not 0 <= old_size <= new_size:
        raise LogError(f"no consistency proof from size {old_size} to {new_size}")
    if old_size in (0, new_size):
        return []
    proof: list[bytes] = []

    def sub(m: int, lo: int, hi: int, whole: bool) -> None:
        n = hi - lo
        if m == n:
            if not whole:
                proof.append(range_hash(lo, hi, node))
            return
        k = _split(n)
        if m <= k:
            sub(m, lo, lo + k, whole)
            proof.append(range_hash(lo + k, hi, node))
        else:
            sub(m - k, lo + k, hi, False)
            proof.append(range_hash(lo, lo + k, node))

    sub(old_size, 0, new_size, True)
    return proof


def root_from_inclusion(index: int, size: int, leaf_hash: bytes, proof: Sequence[bytes]) -> bytes:
    """RFC 9162 2.1.3.2: the root that ``proof`` implies; raises when its shape is wrong."""
    if not 0 <= index < size:
        raise LogError(f"leaf {index} is not in a tree of size {size}")
    fn, sn = index, size - 1
    r = leaf_hash
    for p in proof:
        if sn == 0:
            raise LogError(f"inclusion proof for leaf {index} of {size} is too long")
        if fn & 1 or fn == sn:
            r = hash_children(p, r)
            if not fn & 1:
                while not fn & 1 and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            r = hash_children(r, p)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise LogError(f"inclusion proof for leaf {index} of {size} is too short")
    return r


def verify_inclusion(
    index: int, size: int, leaf_hash: bytes, proof: Sequence[bytes], root: bytes
) -> None:
    if root_from_inclusion(index, size, leaf_hash, proof) != root:
        raise LogError(f"leaf {index} is not in the tree of size {size} with that root")


def verify_consistency(
    old_size: int, new_size: int, proof: Sequence[bytes], old_root: bytes, new_root: bytes
) -> None:
    """RFC 9162 2.1.4.2; raises :class:`LogError` when the log forked or shrank."""
    if old_size > new_size:
        raise LogError(f"the log shrank from {old_size} to {new_size} leaves")
    if old_size == new_size:
        if proof or old_root != new_root:
            raise LogError(f"two different roots for the same size {old_size}: the log forked")
        return
    if old_size == 0:
        if proof:
            raise LogError("a consistency proof from the empty tree must be empty")
        return
    if not proof:
        raise LogError(f"empty consistency proof from {old_size} to {new_size}")
    path = list(proof)
    if not old_size & (old_size - 1):
        path.insert(0, old_root)
    fn, sn = old_size - 1, new_size - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            raise LogError(f"consistency proof from {old_size} to {new_size} is too long")
        if fn & 1 or fn == sn:
            fr = hash_children(c, fr)
            sr = hash_children(c, sr)
            if not fn & 1:
                while not fn & 1 and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            sr = hash_children(sr, c)
        fn >>= 1
        sn >>= 1
    if sn != 0 or fr != old_root or sr != new_root:
        raise LogError(
            f"the log of {new_size} leaves is not an extension of the one of {old_size}: "
            "it forked or was rewritten"
        )
