"""Inclusion proofs built as they are read, and a run's proofs held as columns."""

from __future__ import annotations

import hashlib

import pytest

from tracevault.errors import LogError
from tracevault.transparency import (
    Checkpoint,
    Ed25519Signer,
    LazyProof,
    LeafProofs,
    RunEvent,
    RunLogEvidence,
    TileState,
    check_run_log,
    edge_source,
    hash_leaf,
    inclusion_proof,
    leaf_hash,
    list_source,
    proof_from,
    sign_note,
    tile_node_source,
    tree_root,
)

ORIGIN = "tv.test/p/0"


def _leaves(n: int) -> list[bytes]:
    return [hash_leaf(b"x%d" % i) for i in range(n)]


def test_a_lazy_proof_is_the_rfc_proof_and_its_tails() -> None:
    for size in range(1, 70):
        src = list_source(_leaves(size))
        edge = edge_source(size, src)
        for i in range(size):
            rfc = inclusion_proof(i, size, src)
            lazy = LazyProof(i, size, src, edge)
            assert list(lazy) == rfc and len(lazy) == len(rfc) and list(lazy[-1:]) == rfc[-1:]
            for start in range(len(rfc) + 2):
                assert list(proof_from(lazy, start)) == rfc[start:], (i, size, start)
                assert list(proof_from(tuple(rfc), start)) == rfc[start:]
    with pytest.raises(LogError, match="not in a tree of size 3"):
        LazyProof(3, 3, src, edge)


def _tiled(leaves: list[bytes]) -> dict[tuple[int, int, int], bytes]:
    state = TileState()
    for h in leaves:
        state.append(h)
    return {(lv, ix, w): d for lv, ix, w, d in state.take_tiles()}


def test_a_run_is_proven_in_ranges_reading_few_tile_nodes() -> None:
    """A 1,000-event run after 700 other leaves: proven against the signed root while
    reading a handful of tile hashes, not one proof (~11 nodes) per event."""
    key = Ed25519Signer.generate("tv.test")
    events = [
        RunEvent(s, hashlib.sha256(b"e%d" % s).digest(), finishes=s == 999) for s in range(1000)
    ]
    leaves = _leaves(700) + [leaf_hash("run-1", e.seq, e.chain_hash) for e in events]
    leaves += _leaves(37)
    size = len(leaves)
    tiles = _tiled(leaves)
    node = tile_node_source(size, lambda lv, ix, w: tiles[(lv, ix, w)])
    asked: list[tuple[int, int]] = []

    def counted(level: int, index: int) -> bytes:
        asked.append((level, index))
        return node(level, index)

    edge = edge_source(size, counted)
    note = sign_note(Checkpoint(ORIGIN, size, tree_root(size, list_source(leaves))).body(), [key])
    proofs = LeafProofs(
        list(range(1000)),
        list(range(700, 1700)),
        ["bundle"] * 1000,
        lambda i: LazyProof(i, size, counted, edge),
    )
    assert proofs[3].index == 703 and list(proofs[3].proof) == inclusion_proof(703, size, node)
    asked.clear()
    ev = RunLogEvidence(ORIGIN, note, proofs)
    assert check_run_log("run-1", events, ev, [key.verifier]).size == size
    assert 0 < len(asked) < 60, len(asked)  # one proof per event would be ~11,000
    # a changed event still fails on its own seq, named with its object
    bad = [*events[:512], events[512]._replace(chain_hash=b"\x01" * 32), *events[513:]]
    with pytest.raises(LogError, match="L2 inclusion: run run-1 seq 512 in bundle") as e:
        check_run_log("run-1", bad, ev, [key.verifier])
    assert e.value.seq == 512 and e.value.obj == "bundle"


def test_a_corrupted_tile_fails_the_events_that_need_it_by_seq() -> None:
    key = Ed25519Signer.generate("tv.test")
    events = [RunEvent(s, hashlib.sha256(b"e%d" % s).digest(), finishes=s == 9) for s in range(10)]
    leaves = _leaves(300) + [leaf_hash("run-1", e.seq, e.chain_hash) for e in events]
    size = len(leaves)
    tiles = _tiled(leaves)
    assert tiles[(1, 0, 1)] == tree_root(256, list_source(leaves))  # leaves 0..255
    tiles[(1, 0, 1)] = b"\x00" * 32  # their subtree, every run-1 proof's left sibling
    node = tile_node_source(size, lambda lv, ix, w: tiles[(lv, ix, w)])
    edge = edge_source(size, node)
    note = sign_note(Checkpoint(ORIGIN, size, tree_root(size, list_source(leaves))).body(), [key])
    proofs = LeafProofs(
        list(range(10)), list(range(300, 310)), ["b"] * 10, lambda i: LazyProof(i, size, node, edge)
    )
    with pytest.raises(LogError, match="L2 inclusion: run run-1 seq 0 in b is not leaf 300"):
        check_run_log("run-1", events, RunLogEvidence(ORIGIN, note, proofs), [key.verifier])
