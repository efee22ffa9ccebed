"""Avro's varint, read: the one implementation every fast path uses.

Avro writes ``long`` and ``int`` as a zig-zag varint of 7 bits a byte, low group first. This
is the only general reader of it in tracevault. It refuses, with :class:`VarintError`, what
fastavro reads differently from the Avro spec: a varint longer than 10 bytes, or one whose
value does not fit 64 bits (fastavro silently drops the high bits). A refusal makes a fast
path decline, so the value goes to the fastavro codec, which decides.

The walks inline three fixed-width cases of this function where it runs several times per
event (a call costs more than the decode): one byte (``b < 0x80``: the value is
``(b >> 1) ^ -(b & 1)``), up to three bytes read as one little-endian word (offsets) or byte
by byte (seqs in the TraceEvent walk and the one-walk columns, where it costs half: no slice)
and exactly eight bytes read as one word (timestamps in µs from 1974 to 2540). Each inline
case hands every other width to this function. ``tests/schemas/test_fast_varint.py`` pins this
function to fastavro at every width; ``tests/schemas/test_fast_pinned.py`` generates values
whose fields take every width, so each inline case is pinned to fastavro too.
"""

from __future__ import annotations

__all__ = ["CONT7", "CONT8", "VarintError", "read_long"]

#: The continuation bits of 8 varint bytes read as one little-endian word ...
CONT8 = 0x8080808080808080
#: ... set on the first 7 only: the word is exactly one 8-byte varint.
CONT7 = 0x0080808080808080


class VarintError(ValueError):
    """A varint longer than 10 bytes, or one whose value does not fit a 64-bit long."""


def read_long(buf: bytes, pos: int) -> tuple[int, int]:
    """The long at ``buf[pos]`` and the position after it.

    Raises IndexError when ``buf`` ends inside the varint, :class:`VarintError` when it is
    longer than 10 bytes or its value needs more than 64 bits.
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
    if shift > 63 and n >> 64:
        raise VarintError("varint value does not fit 64 bits")
    return (n >> 1) ^ -(n & 1), pos
