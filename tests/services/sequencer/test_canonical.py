"""check_canonical's fast paths decide exactly what the two definitions decide.

The sequencer checks every request and response, so check_canonical takes shortcuts
(orjson parsing and re-encoding, a reused C encoder, RFC 8785 through orjson). These tests
pin it to the definitions of the two accepted forms: RFC 8785 as the ``rfc8785`` package
writes the I-JSON reading of the bytes (every number a double), or the legacy form
(``json.loads`` then the old canonical ``json.dumps`` gives back the exact bytes).
"""

from __future__ import annotations

import contextlib
import json
import random
from typing import Any

import orjson
import rfc8785

from tracevault.errors import NonCanonicalJSONError, PayloadError
from tracevault.schemas import canonical_json, check_canonical, loads_canonical


def _legacy(value: Any) -> bytes:
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


def _ijson_int(text: str) -> int | float:
    n = int(text)
    return n if abs(n) <= 2**53 - 1 else float(n)  # what rfc8785 writes as an integer


def _by_definition(data: bytes) -> bool:
    try:
        text = data.decode("utf-8")
        if _legacy(json.loads(text)) == data:
            return True
        return rfc8785.dumps(json.loads(text, parse_int=_ijson_int)) == data
    except (UnicodeError, ValueError, TypeError, OverflowError):
        return False


def _accepted(data: bytes) -> bool:
    try:
        check_canonical(data)
    except NonCanonicalJSONError:
        return False
    return True


def test_orjson_escapes_every_character_like_the_stdlib_encoder() -> None:
    # The fast path compares with orjson's output: string escaping is per character, so
    # agreeing on every code point means agreeing on every string.
    for c in range(0x110000):
        if 0xD800 <= c <= 0xDFFF:
            continue
        s = chr(c)
        assert orjson.dumps(s) == canonical_json(s), hex(c)


_CHARS = [*'ab"\\/ é\x00\x1f\x7f\n\t', "\u2028", "\ufeff", "\uffff", "\U0001f642", "\U0010ffff"]
_NUMBERS = [
    0,
    -1,
    7,
    2**53 + 1,
    2**63 - 1,
    -(2**63),
    2**64 - 1,
    2**64,
    -(2**63) - 1,
    10**30,
    0.5,
    -0.0,
    1e16,
    1e-7,
    1e22,
    123456.789,
    5e-324,
    1.7976931348623157e308,
]


def _value(rng: random.Random, depth: int = 0) -> Any:
    pick = rng.randrange(8 if depth < 3 else 5)
    if pick == 0:
        return rng.choice([None, True, False])
    if pick in (1, 2):
        return rng.choice(_NUMBERS)
    if pick in (3, 4):
        return "".join(rng.choice(_CHARS) for _ in range(rng.randrange(6)))
    if pick == 5:
        return [_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {
        "".join(rng.choice(_CHARS) for _ in range(rng.randrange(3))): _value(rng, depth + 1)
        for _ in range(rng.randrange(4))
    }


def _mutations(rng: random.Random, data: bytes) -> list[bytes]:
    out = [data, data + b" ", b" " + data, data.replace(b",", b", ", 1)]
    out.append(data.replace(b"e+", b"e", 1).replace(b"e-0", b"e-", 1))
    out.append(data.replace(b".0", b"", 1))
    out.append(data.replace(b"\xc3\xa9", b"\\u00e9", 1))
    for _ in range(4):
        b = bytearray(data)
        if b:
            b[rng.randrange(len(b))] = rng.choice(b'0123456789.eE+-"{}[],: \\\xc3')
        out.append(bytes(b))
    if data.startswith(b"{") and b"," in data:
        head, _, tail = data[1:-1].partition(b",")
        out.append(b"{" + tail + b"," + head + b"}")  # keys out of order (or broken)
    return out


def test_random_values_and_their_mutations_are_judged_by_the_definition() -> None:
    rng = random.Random(7)
    seen = {True: 0, False: 0}
    for _ in range(10_000):
        value = _value(rng)
        bases = [_legacy(value)]
        # an int a double does not hold: only the legacy form has it
        with contextlib.suppress(PayloadError):
            bases.append(canonical_json(value))
        for base in bases:
            for data in _mutations(rng, base):
                want = _by_definition(data)
                assert _accepted(data) is want, data
                seen[want] += 1
                if want:
                    assert loads_canonical(data) == json.loads(data)
    assert min(seen.values()) > 10_000  # both outcomes are really exercised


def test_edges_where_orjson_and_the_stdlib_differ() -> None:
    for data in [
        b"1e-07",  # the stdlib's repr: the legacy form
        b"1e-7",  # RFC 8785's (and orjson's) form of the same float
        b"[1e-7,1.0]",  # orjson's form: half of each, so neither
        b"1e16",
        b"1e+16",
        b"[1.0]",
        b"[1]",
        b"18446744073709551615",
        b"18446744073709551616",
        b"-0",
        b'"\\ud800"',
        b'"\xed\xa0\x80"',
        b'{"a":1,"a":1}',
        b'{"b":1,"a":1}',
        b"\xef\xbb\xbf1",
        b'"1.5"',
        b'{"v":"1.5","w":[2.5]}',
    ]:
        assert _accepted(data) is _by_definition(data), data
