"""C2SP tlog-tiles: tile paths, entry bundles, hash tiles and a node source that reads them.

Why tiles: a static log is a set of immutable objects a reader fetches by name, so the archive
needs no server and no mutable index. A hash tile at level ``L`` holds up to 256 consecutive
node hashes of tree level ``8*L``; a *partial* tile (fewer than 256) lives at its own path
(``.p/<W>``), so growing a tile writes a new object instead of changing one (c2sp.org/tlog-tiles).
Entry bundles hold the leaf data of 256 leaves, each entry a big-endian u16 length and the
bytes. Everything here is pure: the archive (``tracevault.archive``) reads and writes objects.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Sequence

from tracevault.errors import LogError
from tracevault.transparency._merkle import (
    HASH_SIZE,
    CompactTree,
    NodeSource,
    hash_children,
    perfect_root,
)

__all__ = [
    "TILE_HEIGHT",
    "TILE_WIDTH",
    "TileState",
    "decode_bundle",
    "encode_bundle",
    "entries_path",
    "tile_hashes",
    "tile_node_source",
    "tile_path",
    "tile_width",
    "tiles_changed",
]

TILE_HEIGHT = 8
TILE_WIDTH = 1 << TILE_HEIGHT
_U16 = struct.Struct(">H")


def _index_path(n: int) -> str:
    """``1234067`` -> ``x001/x234/067``: three-digit elements, all but the last with ``x``."""
    if n < 0:
        raise LogError(f"tile index {n} is negative")
    digits = str(n)
    digits = "0" * (-len(digits) % 3) + digits
    parts = [digits[i : i + 3] for i in range(0, len(digits), 3)]
    return "/".join([*(f"x{p}" for p in parts[:-1]), parts[-1]])


def _suffix(width: int) -> str:
    if not 1 <= width <= TILE_WIDTH:
        raise LogError(f"tile width {width} is not in 1..{TILE_WIDTH}")
    return "" if width == TILE_WIDTH else f".p/{width}"


def tile_path(level: int, index: int, width: int = TILE_WIDTH) -> str:
    """``tile/<L>/<N>[.p/<W>]``."""
    return f"tile/{level}/{_index_path(index)}{_suffix(width)}"


def entries_path(index: int, width: int = TILE_WIDTH) -> str:
    """``tile/entries/<N>[.p/<W>]``: the leaf data of leaves ``index*256 ..``."""
    return f"tile/entries/{_index_path(index)}{_suffix(width)}"


def tile_width(level: int, index: int, size: int) -> int:
    """How many hashes tile ``(level, index)`` holds in a tree of ``size`` leaves (0: none)."""
    nodes = size >> (TILE_HEIGHT * level)
    return max(0, min(TILE_WIDTH, nodes - index * TILE_WIDTH))


def encode_bundle(entries: Iterable[bytes]) -> bytes:
    out = []
    for e in entries:
        if len(e) > 0xFFFF:
            raise LogError(f"an entry of {len(e)} bytes does not fit an entry bundle")
        out.append(_U16.pack(len(e)))
        out.append(e)
    return b"".join(out)


def decode_bundle(data: bytes, what: str = "entry bundle") -> list[bytes]:
    """The entries of a u16-length-prefixed bundle; :class:`LogError` naming ``what``."""
    out: list[bytes] = []
    pos = 0
    while pos < len(data):
        if pos + 2 > len(data):
            raise LogError(f"{what} ends inside an entry length (byte {pos})")
        (n,) = _U16.unpack_from(data, pos)
        pos += 2
        if pos + n > len(data):
            raise LogError(f"{what} ends inside entry {len(out)} (byte {pos})")
        out.append(data[pos : pos + n])
        pos += n
    return out


def tiles_changed(old_size: int, new_size: int) -> list[tuple[int, int, int]]:
    """``(level, index, width)`` of every hash tile that grew from ``old_size`` to ``new_size``.

    Level 0 first; a level with no complete node at ``new_size`` ends the list. These, and
    only these, must be written when the tree grows (each at its own, new path).
    """
    out: list[tuple[int, int, int]] = []
    level = 0
    while (new_size >> (TILE_HEIGHT * level)) > 0:
        lo = old_size >> (TILE_HEIGHT * level)
        hi = new_size >> (TILE_HEIGHT * level)
        if hi > lo:
            for index in range(lo // TILE_WIDTH, (hi - 1) // TILE_WIDTH + 1):
                out.append((level, index, tile_width(level, index, new_size)))
        level += 1
    return out


def tile_node_source(size: int, read_tile: Callable[[int, int, int], bytes]) -> NodeSource:
    """A node source for a tree of ``size`` leaves whose hashes come from tiles.

    ``read_tile(level, index, width)`` returns the tile's bytes (``width`` hashes). A node of
    tree level ``8*L + r`` is the Merkle hash of ``2**r`` consecutive hashes of a level-``L``
    tile. Tiles and the nodes built from them are memoised; a tile of the wrong length
    raises :class:`LogError`.
    """
    cache: dict[tuple[int, int], Sequence[bytes]] = {}

    def hashes(level: int, index: int) -> Sequence[bytes]:
        got = cache.get((level, index))
        if got is None:
            width = tile_width(level, index, size)
            if width == 0:
                raise LogError(f"tile {tile_path(level, index)} is beyond a tree of {size}")
            data = read_tile(level, index, width)
            if len(data) != width * HASH_SIZE:
                raise LogError(
                    f"tile {tile_path(level, index, width)} holds {len(data)} bytes, "
                    f"expected {width * HASH_SIZE}"
                )
            got = [data[i : i + HASH_SIZE] for i in range(0, len(data), HASH_SIZE)]
            cache[(level, index)] = got
        return got

    memo: dict[tuple[int, int], bytes] = {}

    def node(level: int, index: int) -> bytes:
        tl, r = divmod(level, TILE_HEIGHT)
        if r == 0:
            tile_hashes = hashes(tl, index // TILE_WIDTH)
            off = index % TILE_WIDTH
            if off >= len(tile_hashes):
                raise LogError(f"node ({level}, {index}) is not complete in a tree of {size}")
            return tile_hashes[off]
        # between tile levels: built from the level below, once (proofs share their nodes)
        got = memo.get((level, index))
        if got is None:
            got = hash_children(node(level - 1, 2 * index), node(level - 1, 2 * index + 1))
            memo[(level, index)] = got
        return got

    return node


def tile_hashes(level: int, index: int, width: int, node: NodeSource) -> bytes:
    """The bytes of tile ``(level, index, width)``, from any node source."""
    first = index * TILE_WIDTH
    return b"".join(node(TILE_HEIGHT * level, first + i) for i in range(width))


class TileState:
    """The right edge of a tiled log: the hashes of the newest (partial) tile of each level.

    All a writer needs to append leaves and emit the tiles that changed, without reading back
    what it wrote: a full tile is emitted once, when it completes, and its root moves up a
    level. ``restore`` rebuilds it from the partial tiles of an archived size.
    """

    def __init__(self, size: int = 0, levels: list[list[bytes]] | None = None) -> None:
        self.size = size
        self.levels: list[list[bytes]] = levels if levels is not None else []
        self._done: dict[tuple[int, int], bytes] = {}
        self._touched: set[tuple[int, int]] = set()

    @classmethod
    def restore(cls, size: int, read_tile: Callable[[int, int, int], bytes]) -> TileState:
        levels: list[list[bytes]] = []
        level = 0
        while (size >> (TILE_HEIGHT * level)) > 0:
            nodes = size >> (TILE_HEIGHT * level)
            width = nodes % TILE_WIDTH
            hashes: list[bytes] = []
            if width:
                data = read_tile(level, nodes // TILE_WIDTH, width)
                if len(data) != width * HASH_SIZE:
                    raise LogError(
                        f"tile {tile_path(level, nodes // TILE_WIDTH, width)} holds "
                        f"{len(data)} bytes, expected {width * HASH_SIZE}"
                    )
                hashes = [data[i : i + HASH_SIZE] for i in range(0, len(data), HASH_SIZE)]
            levels.append(hashes)
            level += 1
        return cls(size, levels)

    def append(self, leaf_hash: bytes) -> None:
        self.size += 1
        h, level = leaf_hash, 0
        while True:
            if level == len(self.levels):
                self.levels.append([])
            row = self.levels[level]
            row.append(h)
            index = (self.size >> (TILE_HEIGHT * level)) // TILE_WIDTH
            if len(row) < TILE_WIDTH:
                self._touched.add((level, index))
                return
            self._done[(level, index - 1)] = b"".join(row)
            self._touched.discard((level, index - 1))
            h = perfect_root(row)
            row.clear()
            level += 1

    def extend(self, leaf_hashes: Sequence[bytes]) -> None:
        """``append`` of each, a level-0 tile at a time (the archiver adds hundreds at once)."""
        levels, touched = self.levels, self._touched
        i, n = 0, len(leaf_hashes)
        while i < n:
            if not levels:
                levels.append([])
            row = levels[0]
            room = TILE_WIDTH - len(row)
            if n - i < room:  # the tile stays partial
                row.extend(leaf_hashes[i:])
                self.size += n - i
                touched.add((0, self.size // TILE_WIDTH))
                return
            row.extend(leaf_hashes[i : i + room - 1])
            self.size += room - 1
            self.append(leaf_hashes[i + room - 1])  # completes the tile, carries its root up
            i += room

    def compact(self) -> CompactTree:
        """The compact tree of the same size (so a writer can check its root against a
        signed checkpoint without keeping a second tree)."""
        hashes: list[bytes] = []
        for row in reversed(self.levels):
            pos = 0
            for bit in reversed(range(TILE_HEIGHT)):
                if len(row) >> bit & 1:
                    hashes.append(perfect_root(row[pos : pos + (1 << bit)]))
                    pos += 1 << bit
        return CompactTree(self.size, hashes)

    def take_tiles(self) -> list[tuple[int, int, int, bytes]]:
        """``(level, index, width, bytes)`` of every tile changed since the last call."""
        out = [(lv, ix, TILE_WIDTH, data) for (lv, ix), data in sorted(self._done.items())]
        for lv, ix in sorted(self._touched):
            row = self.levels[lv]
            if row:
                out.append((lv, ix, len(row), b"".join(row)))
        self._done.clear()
        self._touched.clear()
        return out
