"""Avro's binary primitives, written: for the hand-written encoders.

The producer's encoder, the sequencer's sealed writer, the heads codec, the archiver's segment
writer and the replayer's chain check each skip fastavro when they write; all of them share
these few functions, and each encoder is pinned byte for byte to the codec by its tests. The
readers of the same encoding live in :mod:`tracevault.schemas.fast`.
"""

from __future__ import annotations

__all__ = ["avro_bytes", "avro_long"]


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
