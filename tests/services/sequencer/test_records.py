"""The sequencer's direct SealedEvent writer is byte-identical to the shared codec."""

from __future__ import annotations

import hashlib
import random
from io import BytesIO

import pytest
from fastavro.io.binary_decoder import BinaryDecoder

from tracevault.schemas import avro_long, decode_sealed, encode_sealed
from tracevault.services.sequencer._records import sealed_value


@pytest.mark.parametrize(
    "case",
    [
        ("r", 0, b"", 0, 0, "s"),
        ("run-é-🙂", 2**40, b"\xc3\x01" + bytes(range(256)) * 3, 5, -1, "seq-a"),
        ("x" * 300, 63, b"x" * 64, 2**31 - 1, 2**62, ""),
        ("neg", 64, b"y", 0, -(2**63), "z"),
    ],
)
def test_sealed_value_matches_encode_sealed(case: tuple[str, int, bytes, int, int, str]) -> None:
    run_id, seq, raw, partition, offset, sid = case
    prev = hashlib.sha256(b"p").digest()
    h = hashlib.sha256(b"h").digest()
    value = sealed_value(
        run_id=run_id,
        seq=seq,
        prev_hash=prev,
        hash_=h,
        raw=raw,
        source_partition=partition,
        source_offset=offset,
        sequencer_id=sid,
    )
    ev = decode_sealed(value)
    assert (ev.run_id, ev.seq, ev.prev_hash, ev.hash, ev.raw) == (run_id, seq, prev, h, raw)
    assert (ev.source_partition, ev.source_offset, ev.sequencer_id) == (partition, offset, sid)
    assert encode_sealed(ev) == value


def _reference_long(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def test_avro_long_table_paths_match_the_varint_definition() -> None:
    # sealed records and heads write offsets and micros timestamps through avro_long's
    # 14-bit table paths; every size class and its edges agrees with the plain loop.
    rng = random.Random(5)
    edges = [0, -1, 2**63 - 1, -(2**63)]
    for bits in (6, 13, 14, 27, 28, 41, 42, 55, 56, 62):
        edges += [2**bits - 1, 2**bits, -(2**bits), -(2**bits) - 1]
    values = edges + [rng.randrange(-(2**63), 2**63) >> rng.randrange(64) for _ in range(50_000)]
    for n in values:
        assert avro_long(n) == _reference_long(n), n
    assert BinaryDecoder(BytesIO(avro_long(1_764_000_000_123_456))).read_long() == (
        1_764_000_000_123_456
    )
