"""The sequencer's direct v1 reader agrees with fastavro on valid and on corrupted values."""

from __future__ import annotations

import random

from tests.schemas.fast_values import reference
from tracevault.schemas import (
    AgentInfo,
    ErrorInfo,
    EventKind,
    TraceEvent,
    canonical_json,
    encode_event,
)
from tracevault.schemas.fast import peek_event


def _events(rng: random.Random, n: int) -> list[bytes]:
    out = []
    for i in range(n):
        text = "".join(rng.choice('aé🙂z\\"{} ') for _ in range(rng.randrange(0, 40)))
        out.append(
            encode_event(
                TraceEvent(
                    run_id=f"run-{text}-{i}",
                    seq=rng.choice([0, 1, 63, 64, 2**31, 2**62, -5]),
                    kind=rng.choice(list(EventKind)),
                    at=rng.randrange(0, 2**60),
                    agent=AgentInfo(text, "1", "h" * rng.randrange(0, 200), "x", "0.1"),
                    request=canonical_json({"q": text, "n": i}),
                    response=canonical_json(rng.choice([None, [1, 2], {"a": text}])),
                    model=rng.choice([None, "gpt-4o-2024-08-06"]),
                    seed=rng.choice([None, 0, -(2**63), 2**63 - 1]),
                    error=rng.choice([None, ErrorInfo("ValueError", text)]),
                    idempotency_key=rng.choice([None, text]),
                    parent_seq=rng.choice([None, 3]),
                    attributes=rng.choice([{}, {"k": text, text: "v"}]),
                )
            )
        )
    return out


def _agrees(value: bytes) -> bool:
    """peek_event declines, or answers what fastavro reads (never decode_event: a fast path)."""
    peeked = peek_event(value)
    ref = reference("TraceEvent", value)
    if ref is None:
        return peeked is None
    if peeked is None:
        return True  # falling back to fastavro is always allowed
    return tuple(peeked) == tuple(ref[k] for k in ("run_id", "seq", "kind", "request", "response"))


def test_valid_events_are_read_like_fastavro_reads_them() -> None:
    for value in _events(random.Random(1), 300):
        peeked = peek_event(value)
        assert peeked is not None
        assert _agrees(value)


def test_corrupted_events_are_never_accepted_where_fastavro_refuses() -> None:
    rng = random.Random(2)
    for value in _events(rng, 150):
        for _ in range(20):
            b = bytearray(value)
            action = rng.randrange(3)
            if action == 0:
                b = b[: rng.randrange(len(b))]
            elif action == 1:
                i = rng.randrange(10, len(b))
                b[i] ^= 1 << rng.randrange(8)
            else:
                b += bytes([rng.randrange(256)])
            assert _agrees(bytes(b)), bytes(b).hex()


def test_other_headers_fall_back() -> None:
    assert peek_event(b"junk") is None
    assert peek_event(b"") is None
