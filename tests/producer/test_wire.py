"""The hot-path Avro writer produces exactly fastavro's single-object bytes."""

from __future__ import annotations

import itertools

import pytest

from tracevault.producer._wire import EventEncoder, avro_long, read_run_seq
from tracevault.schemas import (
    AgentInfo,
    ErrorInfo,
    EventKind,
    Interleave,
    TraceEvent,
    encode_event,
)

AGENT = AgentInfo("triage-bot", "1.2.0", "host-ü", "pytest", "0.1.0")


@pytest.mark.parametrize("run_id", ["r", "run-ünïcode-✓", "x" * 200])
def test_every_field_combination_matches_fastavro(run_id: str) -> None:
    enc = EventEncoder(run_id, AGENT)
    optional = {
        "model": [None, "gpt-4o-2024-08-06"],
        "seed": [None, 0, -1, 2**63 - 1, -(2**63)],
        "error": [None, ErrorInfo("builtins.ValueError", "bad ✗" * 50)],
        "idempotency_key": [None, f"{run_id}:7"],
        "parent_seq": [None, 0, 130],
        "attributes": [{}, {"duration_us": "12"}, {f"k{i}": "v" * i for i in range(70)}],
        "interleave": [None, Interleave(None, 1, 0), Interleave(70, 2**40, 64)],
    }
    keys = list(optional)
    for seq, kind in (
        (0, EventKind.RUN_STARTED),
        (63, EventKind.TOOL_CALL),
        (2**40, EventKind.GAP),
    ):
        for combo in itertools.product(*optional.values()):
            kw = dict(zip(keys, combo, strict=True))
            request, response = b'{"a":"' + b"x" * 300 + b'"}', b"null"
            at = 1_795_950_873_272_582
            ours = enc.encode(seq, kind, at, request, response, **kw)  # type: ignore[arg-type]
            theirs = encode_event(
                TraceEvent(run_id, seq, kind, at, AGENT, request, response, **kw)  # type: ignore[arg-type]
            )
            assert ours == theirs
            assert read_run_seq(ours) == (run_id, seq)


@pytest.mark.parametrize("n", [0, 1, -1, 63, 64, -64, -65, 2**31, 2**63 - 1, -(2**63)])
def test_avro_long_is_zigzag_varint(n: int) -> None:
    from io import BytesIO

    from fastavro.io.binary_decoder import BinaryDecoder  # type: ignore[import-untyped]

    assert BinaryDecoder(BytesIO(avro_long(n))).read_long() == n
