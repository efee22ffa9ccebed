"""The log's leaf: what binds one sealed record into its partition's Merkle tree.

``"tracevault/v1/leaf\\0" ‖ u16 len ‖ run_id ‖ u64 seq ‖ hash`` (docs/log.md). It names the
run and seq as well as the chain hash, so a record cannot be moved to another run or position
and still match the leaf, and the chain hash covers the exact raw bytes.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable, Sequence

from tracevault.errors import LogError
from tracevault.transparency._merkle import HASH_SIZE, hash_leaf

__all__ = [
    "LEAF_DOMAIN",
    "leaf_data",
    "leaf_hash",
    "leaf_hasher",
    "leaf_hashes",
    "leaf_prefix",
    "parse_leaf",
]

LEAF_DOMAIN = b"tracevault/v1/leaf\x00"
_U16 = struct.Struct(">H")
_U64 = struct.Struct(">Q")


def leaf_data(run_id: str, seq: int, chain_hash: bytes) -> bytes:
    rid = run_id.encode("utf-8")
    if len(rid) > 0xFFFF:
        raise LogError(f"run id of {len(rid)} bytes does not fit a leaf")
    if not 0 <= seq < 1 << 64:
        raise LogError(
            f"seq {seq} of run {run_id!r} does not fit a leaf",
        )
    if len(chain_hash) != HASH_SIZE:
        raise LogError(f"chain hash of run {run_id!r} seq {seq} is not 32 bytes")
    return LEAF_DOMAIN + _U16.pack(len(rid)) + rid + _U64.pack(seq) + chain_hash


def leaf_hash(run_id: str, seq: int, chain_hash: bytes) -> bytes:
    return hash_leaf(leaf_data(run_id, seq, chain_hash))


def leaf_hasher(run_id: str) -> Callable[[int, bytes], bytes]:
    """``leaf_hash`` for one run, its prefix built once: a run's leaves are hashed in bulk."""
    prefix = leaf_prefix(run_id)
    pack, sha = _U64.pack, hashlib.sha256

    def leaf(seq: int, chain_hash: bytes) -> bytes:
        if len(chain_hash) == HASH_SIZE:
            try:
                return sha(prefix + pack(seq) + chain_hash).digest()
            except struct.error:
                pass  # a seq that does not fit: leaf_hash names it
        return leaf_hash(run_id, seq, chain_hash)

    return leaf


def leaf_hashes(run_id: str, seqs: Sequence[int], hashes: Sequence[bytes]) -> list[bytes]:
    """The leaf hashes of a run's records, in one comprehension (a verifier hashes them all).

    A seq or hash that does not fit a leaf is named by ``leaf_hash``, as one by one.
    """
    prefix = leaf_prefix(run_id)
    pack, sha = _U64.pack, hashlib.sha256
    if set(map(len, hashes)) <= {HASH_SIZE}:
        try:
            return [sha(prefix + pack(s) + h).digest() for s, h in zip(seqs, hashes, strict=True)]
        except struct.error:
            pass  # a seq that does not fit: leaf_hash names it
    return [leaf_hash(run_id, s, h) for s, h in zip(seqs, hashes, strict=True)]


def leaf_prefix(run_id: str) -> bytes:
    """What the leaf hash input of every record of ``run_id`` starts with: the RFC 6962 leaf
    prefix 0x00 and the leaf data up to the seq. A writer hashing thousands of leaves a second
    appends ``u64 seq ‖ hash`` to it (the sequencer caches it per run)."""
    rid = run_id.encode("utf-8")
    if len(rid) > 0xFFFF:
        raise LogError(f"run id of {len(rid)} bytes does not fit a leaf")
    return b"\x00" + LEAF_DOMAIN + _U16.pack(len(rid)) + rid


def parse_leaf(data: bytes) -> tuple[str, int, bytes]:
    """``(run_id, seq, chain_hash)`` of leaf data; :class:`LogError` if it is not one."""
    d = len(LEAF_DOMAIN)
    if not data.startswith(LEAF_DOMAIN) or len(data) < d + 2:
        raise LogError("not tracevault leaf data")
    (n,) = _U16.unpack_from(data, d)
    if len(data) != d + 2 + n + 8 + HASH_SIZE:
        raise LogError("tracevault leaf data of the wrong length")
    try:
        rid = data[d + 2 : d + 2 + n].decode("utf-8")
    except UnicodeDecodeError:
        raise LogError("leaf run id is not UTF-8") from None
    (seq,) = _U64.unpack_from(data, d + 2 + n)
    return rid, seq, data[d + 2 + n + 8 :]
