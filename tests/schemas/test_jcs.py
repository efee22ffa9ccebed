"""Canonical JSON is RFC 8785 (JCS): the RFC's own vectors, and the ``rfc8785`` package as a
reference on generated values. Legacy (pre-JCS) bytes still pass the checks."""

from __future__ import annotations

import collections
import enum
import json
import math
import struct
from typing import Any, NamedTuple

import orjson
import pytest
import rfc8785
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tracevault.errors import NonCanonicalJSONError, PayloadError
from tracevault.schemas import (
    canonical_json,
    canonical_json_like,
    canonical_json_plain,
    check_canonical,
    loads_canonical,
)
from tracevault.schemas._jcs import MAX_SAFE_INTEGER, jcs_number

# RFC 8785 Appendix B: IEEE-754 bit patterns and their JCS text.
APPENDIX_B = [
    ("0000000000000000", "0"),
    ("8000000000000000", "0"),  # minus zero
    ("0000000000000001", "5e-324"),
    ("8000000000000001", "-5e-324"),
    ("7fefffffffffffff", "1.7976931348623157e+308"),
    ("ffefffffffffffff", "-1.7976931348623157e+308"),
    ("4340000000000000", "9007199254740992"),
    ("c340000000000000", "-9007199254740992"),
    ("4430000000000000", "295147905179352830000"),
    ("44b52d02c7e14af5", "9.999999999999997e+22"),
    ("44b52d02c7e14af6", "1e+23"),
    ("44b52d02c7e14af7", "1.0000000000000001e+23"),
    ("444b1ae4d6e2ef4e", "999999999999999700000"),
    ("444b1ae4d6e2ef4f", "999999999999999900000"),
    ("444b1ae4d6e2ef50", "1e+21"),
    ("3eb0c6f7a0b5ed8c", "9.999999999999997e-7"),
    ("3eb0c6f7a0b5ed8d", "0.000001"),
    ("41b3de4355555553", "333333333.3333332"),
    ("41b3de4355555554", "333333333.33333325"),
    ("41b3de4355555555", "333333333.3333333"),
    ("41b3de4355555556", "333333333.3333334"),
    ("41b3de4355555557", "333333333.33333343"),
    ("becbf647612f3696", "-0.0000033333333333333333"),
    ("43143ff3c1cb0959", "1424953923781206.2"),  # round to even
]
APPENDIX_B_REFUSED = ["7fffffffffffffff", "7ff0000000000000"]  # NaN, Infinity


def _double(bits: str) -> float:
    value: float = struct.unpack(">d", bytes.fromhex(bits))[0]
    return value


@pytest.mark.parametrize(("bits", "text"), APPENDIX_B)
def test_rfc8785_appendix_b_numbers(bits: str, text: str) -> None:
    f = _double(bits)
    assert jcs_number(f) == text
    assert canonical_json(f) == text.encode()
    assert canonical_json([f]) == f"[{text}]".encode()
    assert canonical_json({"n": f}) == f'{{"n":{text}}}'.encode()
    check_canonical(text.encode())


@pytest.mark.parametrize("bits", APPENDIX_B_REFUSED)
def test_rfc8785_appendix_b_nan_and_infinity_are_refused(bits: str) -> None:
    with pytest.raises(PayloadError, match="not a JSON number"):
        canonical_json({"n": _double(bits)})


def test_rfc8785_sorting_example() -> None:
    # RFC 8785 section 3.2.3: keys sorted by UTF-16 code units, so the emoji (a surrogate
    # pair, D83D DE00) sorts before U+FB33 although its code point is larger.
    value = json.loads(
        '{"\\u20ac": "Euro Sign", "\\r": "Carriage Return", '
        '"\\ufb33": "Hebrew Letter Dalet With Dagesh", "1": "One", '
        '"\\ud83d\\ude00": "Emoji: Grinning Face", "\\u0080": "Control", '
        '"\\u00f6": "Latin Small Letter O With Diaeresis"}'
    )
    out = canonical_json(value)
    assert list(json.loads(out).values()) == [
        "Carriage Return",
        "One",
        "Control",
        "Latin Small Letter O With Diaeresis",
        "Euro Sign",
        "Emoji: Grinning Face",
        "Hebrew Letter Dalet With Dagesh",
    ]
    check_canonical(out)


def test_rfc8785_main_example_with_string_escaping() -> None:
    # RFC 8785 sections 3.2.2-3.2.4: the input as printed in the RFC, and its canonical form.
    text = (
        '{"numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],'
        ' "string": "\\u20ac$\\u000F\\u000aA\'\\u0042\\u0022\\u005c\\\\\\"\\/",'
        ' "literals": [null, true, false]}'
    )
    expected = (
        '{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],'
        '"string":"€$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}'
    ).encode()
    assert canonical_json(json.loads(text)) == expected
    check_canonical(expected)
    with pytest.raises(NonCanonicalJSONError):
        check_canonical(text.encode())


# -- against the rfc8785 package on generated values --------------------------------------

# Characters where UTF-16 and code-point order disagree (U+E000..U+FFFF against astral
# ones), plus ASCII, controls, escapes and BMP letters.
_KEY_CHARS = st.sampled_from(
    ["a", "b", "1", "\r", "\x00", '"', "\\", "é", "\u20ac", "\ue000", "\ufb33", "\uffff",
     "\U00010000", "\U0001f600", "\U0010ffff"]
)  # fmt: skip
_TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=12)
_KEYS = st.one_of(st.text(_KEY_CHARS, max_size=4), _TEXT)
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-MAX_SAFE_INTEGER, MAX_SAFE_INTEGER),
    st.integers(-(2**31), 2**31),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([0.0, -0.0, 1.0, -1.0, 1e-7, 1e16, 1e21, 1e-4, 1e-6, 5e-324, 2.0**53]),
    _TEXT,
)
VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=5),
        st.dictionaries(_KEYS, inner, max_size=5),
    ),
    max_leaves=25,
)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(VALUES)
def test_canonical_json_matches_rfc8785_package(value: Any) -> None:
    out = canonical_json(value)
    assert out == rfc8785.dumps(value)
    check_canonical(out)
    assert canonical_json(loads_canonical(out)) == out  # parse and write again: a fixed point


@settings(max_examples=3000, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False))
def test_every_double_is_written_as_rfc8785_writes_it(f: float) -> None:
    assert jcs_number(f).encode() == rfc8785.dumps(f)
    check_canonical(jcs_number(f).encode())


@settings(max_examples=2000, deadline=None)
@given(st.floats(min_value=1e-4, max_value=1e16, exclude_max=True))
def test_orjson_writes_plain_range_doubles_in_jcs_form(f: float) -> None:
    # _jcs hands these to orjson unchanged: pin that orjson's text is JCS's there.
    if not f.is_integer():
        assert orjson.dumps(f) == orjson.dumps(-f)[1:] == jcs_number(f).encode()


@settings(max_examples=500, deadline=None)
@given(st.dictionaries(st.text(_KEY_CHARS, min_size=1, max_size=3), st.integers(0, 9), min_size=2))
def test_keys_sort_by_utf16_code_units_not_code_points(value: dict[str, int]) -> None:
    out = canonical_json(value)
    assert out == rfc8785.dumps(value)
    keys = list(json.loads(out))
    assert keys == sorted(keys, key=lambda k: k.encode("utf-16-be"))


class Colour(enum.IntEnum):
    RED = 1


class Name(enum.StrEnum):
    ADA = "ada"


class Point(NamedTuple):
    x: float
    y: int


class Ratio(float):
    pass


def test_subclasses_are_written_as_their_json_base_type() -> None:
    value = {
        "colour": Colour.RED,
        "name": Name.ADA,
        "point": Point(1.0, 2),
        "ordered": collections.OrderedDict([("b", 1), ("a", 2)]),
        "counts": collections.defaultdict(int, {"\U0001f600": 1, "\ufb33": 2}),
        "ratio": Ratio(0.5),
    }
    plain = {
        "colour": 1,
        "name": "ada",
        "point": [1.0, 2],
        "ordered": {"a": 2, "b": 1},
        "counts": {"\U0001f600": 1, "\ufb33": 2},
        "ratio": 0.5,
    }
    assert canonical_json(value) == rfc8785.dumps(plain)


@pytest.mark.parametrize("n", [MAX_SAFE_INTEGER, -MAX_SAFE_INTEGER])
def test_integers_up_to_2_53_minus_1_are_exact(n: int) -> None:
    assert canonical_json(n) == str(n).encode() == rfc8785.dumps(n)


@pytest.mark.parametrize(
    "n", [2**53, -(2**53), 10**16, 10**20, 9223372036854776000, 1152921504606847000]
)
def test_larger_integers_that_jcs_writes_back_digit_for_digit_are_kept(n: int) -> None:
    # What a JCS writer prints for a double past 2**53, parsed back by Python as an int,
    # must record again as the same bytes (the Recorder hands agents the parsed record).
    assert canonical_json(n) == str(n).encode() == rfc8785.dumps(float(n))
    check_canonical(str(n).encode())


@pytest.mark.parametrize(
    ("n", "seen"),
    [(2**53 + 1, "9007199254740992"), (-(2**53) - 1, "-9007199254740992"),
     (2**60, "1152921504606847000"), (2**64, "18446744073709552000"), (10**30, "1e+30"),
     (10**400, "Infinity")],
)  # fmt: skip
def test_integers_a_double_does_not_hold_are_refused(n: int, seen: str) -> None:
    with pytest.raises(rfc8785.IntegerDomainError):
        rfc8785.dumps(n)
    with pytest.raises(PayloadError, match=r"past ±\(2\*\*53 - 1\)") as info:
        canonical_json({"id": n}, field="request")
    assert info.value.path == "$.request.id"
    assert f"a JSON reader would read {seen};" in str(info.value)


@settings(max_examples=1000, deadline=None)
@given(st.integers(-(2**70), 2**70) | st.integers(-(2**54), 2**54))
def test_an_integer_is_kept_exactly_when_jcs_gives_it_back(n: int) -> None:
    try:
        out = canonical_json(n)
    except PayloadError:
        assert abs(n) > MAX_SAFE_INTEGER and rfc8785.dumps(float(n)) != str(n).encode()
    else:
        assert out == str(n).encode() and json.loads(out) == n
        assert out == rfc8785.dumps(float(n) if abs(n) > MAX_SAFE_INTEGER else n)


# -- the checks: RFC 8785 bytes and legacy (pre-JCS) bytes both pass ---------------------


def _legacy(value: Any) -> bytes:
    """What tracevault 0.1 wrote: CPython's json with sorted keys, compact, UTF-8."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


@pytest.mark.parametrize(
    ("value", "legacy", "jcs"),
    [
        (1.0, b"1.0", b"1"),
        (1e-07, b"1e-07", b"1e-7"),
        (1e16, b"1e+16", b"10000000000000000"),
        (-0.0, b"-0.0", b"0"),
        (2**60, b"1152921504606846976", None),
        (2.0**60, b"1.152921504606847e+18", b"1152921504606847000"),
        ({"\U0001f600": 1, "\ufb33": 2}, '{"\ufb33":2,"\U0001f600":1}'.encode(),
         '{"\U0001f600":1,"\ufb33":2}'.encode()),
    ],
)  # fmt: skip
def test_legacy_and_jcs_forms_both_pass_the_check(
    value: Any, legacy: bytes, jcs: bytes | None
) -> None:
    assert _legacy(value) == legacy
    check_canonical(legacy)  # a sealed 0.1 event still verifies; a 0.1 SDK is still sealed
    assert canonical_json_like(value, legacy) == legacy  # and replays against its record
    if jcs is not None:
        assert canonical_json(value) == jcs
        check_canonical(jcs)
        assert canonical_json_like(value, jcs) == jcs


@pytest.mark.parametrize(
    "data",
    [b"1E-7", b"1e5", b"0.10", b"1.50", b"+1", b"01", b"1e+7", b'{"b":1,"a":2}', b"[1, 2]",
     b'"\\u00fc"', b'{"a":1,"a":1}', b"NaN", b"-0",
     b"[1e-7,1.0]"],  # half JCS, half legacy: orjson's own form, which is neither
)  # fmt: skip
def test_bytes_in_neither_form_are_refused(data: bytes) -> None:
    with pytest.raises(NonCanonicalJSONError):
        check_canonical(data)


def test_deep_nesting_is_refused_not_raised_as_recursion_error() -> None:
    deep = b"[" * 100_000 + b"]" * 100_000
    with pytest.raises(NonCanonicalJSONError):
        check_canonical(deep)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(VALUES)
def test_legacy_bytes_of_any_value_pass_the_check(value: Any) -> None:
    legacy = _legacy(value)
    check_canonical(legacy)
    assert canonical_json_like(value, legacy) == legacy


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_nan_and_infinity_are_refused_wherever_they_are(bad: float) -> None:
    for value, path in [
        (bad, "$.payload"),
        ([1, bad], "$.payload[1]"),
        ({"a b": bad}, '$.payload["a b"]'),
    ]:
        with pytest.raises(PayloadError, match="not a JSON number") as info:
            canonical_json(value)
        assert info.value.path == path


def _typed(value: Any) -> Any:
    """``value`` with every scalar paired with its type: equal only if the types are too."""
    if isinstance(value, dict):
        return {k: _typed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_typed(v) for v in value]
    return (type(value), value)


_BIG_INTS = st.sampled_from(
    [10**17, 10**18, 10**19, -(10**19), 10**20, -(10**20)]
)  # exact; four past 2**63


@settings(max_examples=800, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.recursive(
    st.one_of(_SCALARS, _BIG_INTS),
    lambda inner: st.one_of(st.lists(inner, max_size=5), st.dictionaries(_KEYS, inner, max_size=5)),
    max_leaves=25,
))  # fmt: skip
def test_plain_values_read_back_through_orjson_as_json_reads_them(value: Any) -> None:
    """The Recorder hands the agent ``orjson.loads`` of a plain answer (canonical_json_plain)
    instead of ``json.loads``: only where the two give the same values of the same types."""
    data, plain = canonical_json_plain(value)
    assert data == canonical_json(value)
    if plain:
        assert _typed(orjson.loads(data)) == _typed(json.loads(data))
    else:  # a float or an int past 64 bits, where orjson differs (it reads 10**20 as 1e20),
        # or a key past U+FFFF, which the pure-Python encoder writes
        assert any(
            type(x) is float or (type(x) is int and not -(2**63) <= x < 2**63) or _astral(x)
            for x in _leaves_and_keys(value)
        )


def _astral(x: Any) -> bool:
    return type(x) is str and any(ord(c) > 0xFFFF for c in x)


def _leaves_and_keys(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [*value, *(n for v in value.values() for n in _leaves_and_keys(v))]
    if isinstance(value, list):
        return [n for v in value for n in _leaves_and_keys(v)]
    return [value]


def test_orjson_would_read_a_long_int_as_a_float() -> None:
    """Why the check: the case the plain flag keeps from the agent."""
    data, plain = canonical_json_plain({"n": 10**20})
    assert not plain and type(orjson.loads(data)["n"]) is float and json.loads(data)["n"] == 10**20
