"""Avro's binary primitives, for the hand-written fast paths.

The producer's encoder, the sequencer's peek and sealed writer, the heads codec, the
archiver's parser and segment writer, and the replayer's chain check each skip fastavro on
their hot path; all of them share these few functions, and each fast path is pinned byte for
byte to the codec by its tests.
"""

from __future__ import annotations

__all__ = ["VarintError", "avro_bytes", "avro_long", "read_long"]


class VarintError(ValueError):
    """A varint longer than the 10 bytes a 64-bit long can take."""


def _varint(z: int) -> bytes:
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


# Seqs, lengths and enum indexes are almost always small: their encodings are looked up.
_TABLE = tuple(_varint(z) for z in range(1 << 14))
# Larger values (offsets, timestamps) are written 14 bits at a time: these are the two bytes
# of a group of 14 low bits that more bytes follow (both carry the continuation bit).
_CONT14 = tuple(bytes(((z & 0x7F) | 0x80, (z >> 7) | 0x80)) for z in range(1 << 14))


def avro_long(n: int) -> bytes:
    """Avro ``long``/``int``: zig-zag, then base-128 varint."""
    z = (n << 1) ^ (n >> 63)
    if z < 16384:
        return _TABLE[z]
    if z < 268435456:  # 2**28: three or four bytes
        return _CONT14[z & 0x3FFF] + _TABLE[z >> 14]
    if z < 4398046511104:  # 2**42
        return _CONT14[z & 0x3FFF] + _CONT14[(z >> 14) & 0x3FFF] + _TABLE[z >> 28]
    if z < 72057594037927936:  # 2**56: timestamps in micros
        return (
            _CONT14[z & 0x3FFF]
            + _CONT14[(z >> 14) & 0x3FFF]
            + _CONT14[(z >> 28) & 0x3FFF]
            + _TABLE[z >> 42]
        )
    return _varint(z)


def avro_bytes(b: bytes) -> bytes:
    """Avro ``bytes``/``string`` (already UTF-8): length, then the bytes."""
    return avro_long(len(b)) + b


def read_long(buf: bytes, pos: int) -> tuple[int, int]:
    """The long at ``buf[pos]`` and the position after it.

    Raises IndexError when ``buf`` ends inside the varint, :class:`VarintError` when it is
    longer than 10 bytes.
    """
    b = buf[pos]
    pos += 1
    if b < 0x80:  # one byte: most lengths, indexes and small numbers
        return (b >> 1) ^ -(b & 1), pos
    n = b & 0x7F
    shift = 7
    while b & 0x80:
        if shift > 63:
            raise VarintError("varint longer than 10 bytes")
        b = buf[pos]
        pos += 1
        n |= (b & 0x7F) << shift
        shift += 7
    return (n >> 1) ^ -(n & 1), pos
