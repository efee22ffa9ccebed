"""The direct TraceEvent v2 reader gives exactly what the fastavro codec gives, or defers to it."""

from __future__ import annotations

import dataclasses
import itertools
import random
from collections.abc import Iterator
from typing import Any

import pytest

from tracevault.errors import TraceVaultError
from tracevault.schemas import (
    AgentInfo,
    Codec,
    ErrorInfo,
    EventKind,
    Interleave,
    TraceEvent,
    decode_event,
    default_schemas,
    encode_event,
)
from tracevault.schemas.fast import TRACE_EVENT_V2, fast_decode_event
from tracevault.schemas.fast._event import _TWIN

AGENTS = (
    AgentInfo("agent-7", "1.4.2", "host-a", "pytest", "0.1.0"),
    AgentInfo("ägent-ü", "", "h✓" * 40, "pytest", "0.1.0-dev"),
)
CODEC = Codec("TraceEvent")


def by_codec(raw: bytes) -> TraceEvent:
    """What the generic fastavro path returns (the reference)."""
    return TraceEvent.from_avro(CODEC.decode(raw))


def outcome(fn: object, raw: bytes) -> tuple[str, object]:
    try:
        return "ok", fn(raw)  # type: ignore[operator]
    except TraceVaultError as exc:
        return "error", type(exc)


def small(ev: TraceEvent) -> bool:
    """Events the byte-by-byte corpora walk (every byte of a 20 KB value would be slow)."""
    return len(ev.request) + len(ev.response) < 1000


def events() -> Iterator[TraceEvent]:
    optional: dict[str, list[Any]] = {
        "model": [None, "", "gpt-4o-2024-08-06", "模型-✓"],
        "seed": [None, 0, -1, 63, -64, 2**63 - 1, -(2**63)],
        "error": [None, ErrorInfo("builtins.ValueError", "bad ✗" * 50), ErrorInfo("", "")],
        "idempotency_key": [None, "run:7"],
        "parent_seq": [None, 0, 130, -(2**63)],
        "attributes": [{}, {"duration_us": "12"}, {f"k{i}-ü": "v" * i for i in range(70)}],
        "interleave": [None, Interleave(None, 1, 0), Interleave(2**40, -1, 2**63 - 1)],
    }
    keys = list(optional)
    runs = ["r", "run-ünïcode-✓", "x" * 200, ""]
    shapes = [
        (0, 0),
        (63, -1),
        (2**40, 1_795_950_873_272_582),
        (2**63 - 1, -(2**63)),
        (64, 1),  # 2-byte seq
        (100_000, 2**62),  # 3-byte seq
        (-70_000, 1),  # 3-byte negative seq
        (2**21, 7),  # 4-byte seq
    ]
    payloads = [
        (b"{}", b"null"),
        (b'{"a":"' + "é".encode() * 300 + b'"}', b""),
        (b"\x00\xff", b"x"),
        (b"{}", b'"' + b"y" * 200 + b'"'),  # 2-byte response length
        (b'"' + b"z" * 10_000 + b'"', b'"' + b"w" * 9_000 + b'"'),  # 3-byte lengths
    ]
    for n, combo in enumerate(itertools.product(*optional.values())):
        seq, at = shapes[n % len(shapes)]
        request, response = payloads[n % len(payloads)]
        yield TraceEvent(
            runs[n % len(runs)],
            seq,
            list(EventKind)[n % len(EventKind)],
            at,
            AGENTS[n % 2],
            request,
            response,
            **dict(zip(keys, combo, strict=True)),
        )


def test_the_pinned_fingerprint_is_the_current_version() -> None:
    current = default_schemas().get("TraceEvent")
    assert (current.version, current.fingerprint) == (2, TRACE_EVENT_V2.fingerprint)


def test_every_field_combination_matches_the_codec_field_for_field() -> None:
    n = 0
    for ev in events():
        raw = encode_event(ev)
        fast = fast_decode_event(raw)
        assert fast is not None, ev
        assert fast == by_codec(raw) == ev
        assert type(fast.kind) is EventKind and type(fast.request) is bytes
        assert type(fast.attributes) is dict
        assert decode_event(raw, check_json=False) == fast
        n += 1
    assert n == 4 * 7 * 3 * 2 * 4 * 3 * 3


def test_each_event_gets_its_own_attributes_dict() -> None:
    raw = encode_event(next(iter(events())))
    a, b = fast_decode_event(raw), fast_decode_event(raw)
    assert a is not None and b is not None
    assert a.attributes == b.attributes and a.attributes is not b.attributes


def test_bytearray_and_memoryview_decode_to_bytes_fields() -> None:
    ev = next(iter(events()))
    raw = encode_event(ev)
    for view in (bytearray(raw), memoryview(raw)):
        got = fast_decode_event(view)
        assert got is not None and got == ev and type(got.request) is bytes


@pytest.mark.parametrize("pick", range(6))
def test_every_truncation_fails_like_the_codec(pick: int) -> None:
    ev = next(e for e in itertools.islice(events(), pick * 97, None) if small(e))
    raw = encode_event(ev)
    for cut in range(len(raw)):
        short = raw[:cut]
        assert fast_decode_event(short) is None
        assert outcome(lambda b: decode_event(b, check_json=False), short) == outcome(
            by_codec, short
        )
        assert outcome(lambda b: decode_event(b, check_json=False), short)[0] == "error"


@pytest.mark.parametrize("pick", range(6))
def test_every_corrupted_byte_decodes_or_fails_like_the_codec(pick: int) -> None:
    """Flip each byte of the body to several values: same event or same error type."""
    rng = random.Random(pick)
    ev = next(e for e in itertools.islice(events(), pick * 89, None) if small(e))
    raw = encode_event(ev)
    fast_hits = 0
    for i in range(10, len(raw)):
        for value in {raw[i] ^ 0x01, raw[i] ^ 0x80, 0x00, 0xFF, 0x01, 0x02, rng.randrange(256)}:
            bad = raw[:i] + bytes([value]) + raw[i + 1 :]
            ref = outcome(by_codec, bad)
            fast = fast_decode_event(bad)
            if fast is not None:
                fast_hits += 1
                assert ref == ("ok", fast), (i, value)
            assert outcome(lambda b: decode_event(b, check_json=False), bad) == ref, (i, value)
    assert fast_hits > 0  # the corpus exercises the fast path, not only the fallback


def test_trailing_bytes_and_bad_indexes_defer_to_the_codec() -> None:
    ev = next(iter(events()))
    raw = encode_event(ev)
    for bad in (raw + b"\x00", raw[:-1] + b"\x01\x00"):
        assert fast_decode_event(bad) is None
        assert outcome(lambda b: decode_event(b, check_json=False), bad) == outcome(by_codec, bad)


def test_other_versions_and_headers_are_left_to_the_codec() -> None:
    raw = encode_event(next(iter(events())))
    assert fast_decode_event(raw[:2] + bytes(8) + raw[10:]) is None
    assert fast_decode_event(b"\xc3\x02" + raw[2:]) is None
    assert fast_decode_event(b"") is None
    assert fast_decode_event("not bytes") is None


def test_events_are_built_through_the_layout_twin_and_stay_frozen() -> None:
    assert _TWIN is not None  # TraceEvent is the plain slotted dataclass the fast build expects
    ev = next(iter(events()))
    got = fast_decode_event(encode_event(ev))
    assert got is not None and type(got) is TraceEvent and got == ev
    assert hash(got.agent) == hash(ev.agent) and dataclasses.astuple(got) == dataclasses.astuple(ev)
    assert repr(got) == repr(ev)
    with pytest.raises(dataclasses.FrozenInstanceError):
        got.seq = 1  # type: ignore[misc]
