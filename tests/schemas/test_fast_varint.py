"""The fast paths' one varint reader agrees with fastavro at every width, or refuses."""

from __future__ import annotations

from io import BytesIO

import pytest
from fastavro import schemaless_reader
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.schemas.fast_values import LONG_MAX, LONG_MIN
from tracevault.schemas.fast import VarintError, read_long


def _varint(n: int, extra: int = 0) -> bytes:
    z = ((n << 1) ^ (n >> 63)) & ((1 << 64) - 1)
    groups = []
    while True:
        groups.append(z & 0x7F)
        z >>= 7
        if not z:
            break
    groups += [0] * extra
    return bytes([g | 0x80 for g in groups[:-1]] + [groups[-1]])


def _fastavro(b: bytes) -> int:
    return int(schemaless_reader(BytesIO(b), "long", None))


@settings(max_examples=300, deadline=None)  # a loaded CI machine is no failure
@given(n=st.integers(LONG_MIN, LONG_MAX), extra=st.integers(0, 9), pos=st.integers(0, 3))
def test_every_long_at_every_width_reads_as_fastavro_reads_it(n: int, extra: int, pos: int) -> None:
    b = _varint(n, extra)
    if len(b) > 10:
        with pytest.raises(VarintError):
            read_long(b"\x00" * pos + b, pos)
        return
    assert read_long(b"\x00" * pos + b + b"\x7f", pos) == (_fastavro(b), pos + len(b))


@pytest.mark.parametrize("width", range(1, 11))
def test_the_limits_of_each_width(width: int) -> None:
    for n in (1 << (7 * width - 1)) - 1, -(1 << (7 * width - 1)), LONG_MAX, LONG_MIN:
        b = _varint(n)
        if len(b) == width and LONG_MIN <= n <= LONG_MAX:
            assert read_long(b, 0) == (_fastavro(b), width) == (n, width)


def test_what_fastavro_reads_differently_from_the_spec_is_refused() -> None:
    # fastavro drops bits past 64 and reads 11-byte varints; the fast paths decline both
    for b in (b"\xff" * 9 + b"\x03", b"\x80" * 10 + b"\x00", b"\xff" * 9 + b"\x7f"):
        with pytest.raises(VarintError):
            read_long(b, 0)


def test_a_varint_cut_short_raises_index_error() -> None:
    for b in (b"", b"\x80", b"\xff" * 9):
        with pytest.raises(IndexError):
            read_long(b, 0)
