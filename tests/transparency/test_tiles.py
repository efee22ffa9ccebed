"""C2SP tlog-tiles: paths, bundles, the writer's tile state and proofs read back from tiles."""

from __future__ import annotations

import hashlib

import pytest

from tracevault.errors import LogError
from tracevault.transparency import (
    CompactTree,
    TileState,
    consistency_proof,
    decode_bundle,
    encode_bundle,
    entries_path,
    hash_leaf,
    inclusion_proof,
    list_source,
    tile_hashes,
    tile_node_source,
    tile_path,
    tiles_changed,
    tree_root,
)


def _leaves(n: int) -> list[bytes]:
    return [hash_leaf(hashlib.sha256(str(i).encode()).digest()) for i in range(n)]


def test_paths_follow_the_spec() -> None:
    assert tile_path(0, 1234067) == "tile/0/x001/x234/067"
    assert tile_path(1, 0, 7) == "tile/1/000.p/7"
    assert entries_path(12) == "tile/entries/012"
    assert entries_path(1000, 255) == "tile/entries/x001/000.p/255"
    with pytest.raises(LogError):
        tile_path(0, 0, 0)


def test_bundle_round_trip_and_truncation_is_named() -> None:
    entries = [b"", b"a", b"x" * 300]
    data = encode_bundle(entries)
    assert data[:2] == b"\x00\x00" and decode_bundle(data) == entries
    with pytest.raises(LogError, match="bundle obj ends inside entry 2"):
        decode_bundle(data[:-1], "bundle obj")


@pytest.mark.parametrize("sizes", [[1, 255, 256, 257], [300, 65536 + 300], [70000]])
def test_tile_state_emits_exactly_the_tiles_of_the_tree(sizes: list[int]) -> None:
    leaves = _leaves(sizes[-1])
    node = list_source(leaves)
    state = TileState()
    written: dict[tuple[int, int, int], bytes] = {}
    old = 0
    for size in sizes:
        for h in leaves[old:size]:
            state.append(h)
        got = {(lv, ix, w): d for lv, ix, w, d in state.take_tiles()}
        assert sorted(got) == sorted(tiles_changed(old, size))
        for (lv, ix, w), d in got.items():
            assert d == tile_hashes(lv, ix, w, node)
        written.update(got)
        # a reader of the tiles at this size gets the same roots and proofs
        src = tile_node_source(size, lambda lv, ix, w: written[(lv, ix, w)])
        assert tree_root(size, src) == tree_root(size, node)
        for i in {0, size // 2, size - 1}:
            assert inclusion_proof(i, size, src) == inclusion_proof(i, size, node)
        if old:
            assert consistency_proof(old, size, src) == consistency_proof(old, size, node)
        assert state.compact().root() == tree_root(size, node)
        restored = TileState.restore(size, lambda lv, ix, w: written[(lv, ix, w)])
        assert restored.levels == state.levels
        old = size


@pytest.mark.parametrize("start", [0, 5, 255, 256, 300])
@pytest.mark.parametrize("n", [1, 200, 256, 700])
def test_extending_a_tile_state_in_bulk_equals_appending_each_leaf(start: int, n: int) -> None:
    """The archiver adds a checkpoint's leaves at once; the tiles must be the same."""
    leaves = [hashlib.sha256(i.to_bytes(4, "big")).digest() for i in range(start + n)]
    one, bulk = TileState(), TileState()
    for h in leaves[:start]:
        one.append(h)
        bulk.append(h)
    one.take_tiles()
    bulk.take_tiles()
    for h in leaves[start:]:
        one.append(h)
    bulk.extend(leaves[start:])
    assert (bulk.size, bulk.levels, bulk.take_tiles()) == (one.size, one.levels, one.take_tiles())
    tree = CompactTree()
    tree.extend(leaves)
    assert tree.root() == bulk.compact().root() == tree_root(start + n, list_source(leaves))
