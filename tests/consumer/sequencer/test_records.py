"""The sequencer's direct SealedEvent writer is byte-identical to the shared codec."""

from __future__ import annotations

import hashlib

import pytest

from tracevault.consumer.sequencer._records import sealed_value
from tracevault.schemas import decode_sealed, encode_sealed


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
