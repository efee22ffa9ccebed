"""The canonical-JSON check in C (``tracevault/schemas/_cjcs.c``) is ``_jcs._scan``.

``scan(value)`` must give the flags ``_scan(value, 0)`` gives, or raise ``Unencodable`` where
it does, on generated JSON-ish values with every edge the Python walk draws: ints around
±2**53 and ±2**63, floats at the 1e-4 and 1e16 borders, NaN and Infinity, keys past U+FFFF,
subclasses, keys that are not str, nesting around MAX_DEPTH (``FUZZ_SCALE`` times more in
``.ci/native``'s fuzz step, under the sanitizers). The C hands what it does not decide (a
subclass, an int past 2**53 - 1, an object of another type) to the Python walk; these tests
watch that hand-off, so a C that handed everything over would fail them too: values made of
exact built-in types within its reach are decided in C alone.
"""

from __future__ import annotations

import collections
import enum
import json
import math
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any, NamedTuple

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.native import examples, extension
from tracevault import native
from tracevault.schemas import _jcs
from tracevault.schemas._jcs import _FLOATS, _SLOW, MAX_DEPTH, MAX_SAFE_INTEGER, Unencodable

_cjcs = extension("tracevault.schemas._cjcs")

FUZZ = settings(
    max_examples=examples(300),
    deadline=None,
    # the fixture's list is cleared for each example (_check)
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)


class Colour(enum.IntEnum):
    RED = 1
    HUGE = 2**60  # past 2**53 - 1 and not exact: refused once the subclass is unwrapped


class Mode(enum.StrEnum):
    FAST = "fast"


class Key(str):
    pass


class Num(float):
    pass


class Items(list[Any]):
    pass


class Pair(NamedTuple):
    a: Any
    b: Any


class FakeStr:
    """Not a str, yet ``isinstance(x, str)`` says it is (``__class__``): _scan's own rules."""

    @property  # type: ignore[misc]
    def __class__(self) -> type:
        return str

    def isascii(self) -> bool:
        return True

    def __hash__(self) -> int:
        return 7

    def __eq__(self, other: object) -> bool:
        return self is other


def _near(x: float) -> list[float]:
    return [math.nextafter(x, 0.0), x, math.nextafter(x, math.inf)]


_BIG = [2**53 - 1, 2**53, 2**53 + 1, 2**53 + 2, 2**63 - 1, 2**63, 2**64, 10**16, 10**20,
        10**21 - 1, 10**21, 10**22, 2**70]  # fmt: skip
INTS = st.one_of(
    st.integers(-MAX_SAFE_INTEGER, MAX_SAFE_INTEGER),
    st.integers(-(2**66), 2**66),
    st.sampled_from(_BIG + [-n for n in _BIG]),
    st.integers(-(10**22), 10**22).map(lambda n: n - n % 10**6),  # exact doubles among them
)
_EDGE_FLOATS = [0.0, -0.0, 1.0, -1.0, 2.5, 1e15 + 0.5, 5e-324, 1.7976931348623157e308,
                math.nan, math.inf, -math.inf, *_near(1e-4), *_near(-1e-4), *_near(1e16),
                *_near(-1e16)]  # fmt: skip
FLOATS = st.one_of(st.floats(), st.sampled_from(_EDGE_FLOATS))
_CHARS = st.characters(codec=None, exclude_categories=())  # surrogates and astral included
TEXT = st.one_of(
    st.text(max_size=6),
    st.text(_CHARS, max_size=6),
    st.sampled_from(["", "a", "é", "中文", "\U0001f600", "a\U0010ffff", "\ud800", "x\udfff"]),
)
_SUBCLASSED = st.one_of(
    st.sampled_from([Colour.RED, Colour.HUGE, Mode.FAST, Num(2.5), Num(1e20), Num(math.nan)]),
    TEXT.map(Key),
)
_OTHER = st.sampled_from([b"bytes", {1, 2}, object(), FakeStr(), print, 1j])
LEAVES = st.one_of(
    st.none(), st.booleans(), INTS, FLOATS, TEXT, _SUBCLASSED, _OTHER, FLOATS, TEXT, st.none()
)
KEYS = st.one_of(
    TEXT,
    TEXT,
    TEXT.map(Key),
    st.sampled_from([1, 2.5, None, True, (1,), b"k", frozenset(), Mode.FAST, FakeStr()]),
)


def _containers(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    lists = st.lists(inner, max_size=5)
    dicts = st.dictionaries(KEYS, inner, max_size=5)
    return st.one_of(
        lists,
        lists.map(tuple),
        dicts,
        dicts,
        dicts.map(collections.OrderedDict),
        dicts.map(lambda d: collections.defaultdict(int, d)),
        lists.map(Items),
        st.tuples(inner, inner).map(lambda t: Pair(*t)),
    )


VALUES = st.recursive(LEAVES, _containers, max_leaves=30)
# exact built-in types within the C's reach: nothing for it to hand to Python
_C_INTS = st.one_of(st.integers(-MAX_SAFE_INTEGER, MAX_SAFE_INTEGER), st.sampled_from(_BIG[:1]))
_C_LEAVES = st.one_of(st.none(), st.booleans(), _C_INTS, FLOATS, TEXT)
_C_KEYS = st.one_of(TEXT, st.sampled_from([1, 2.5, None, True, (1,), b"k", frozenset()]))
C_VALUES = st.recursive(
    _C_LEAVES,
    lambda inner: st.one_of(
        st.lists(inner, max_size=5),
        st.lists(inner, max_size=5).map(tuple),
        st.dictionaries(_C_KEYS, inner, max_size=5),
    ),
    max_leaves=30,
)


def _python(value: Any) -> object:
    try:
        return _jcs._scan(value, 0)
    except Unencodable:
        return "Unencodable"


def _c(value: Any) -> object:
    try:
        return _cjcs.scan(value)
    except Unencodable:
        return "Unencodable"


@pytest.fixture
def handed() -> Iterator[list[tuple[object, int]]]:
    """The values the C hands to the Python walk, as ``_cjcs`` sees that walk."""
    calls: list[tuple[object, int]] = []

    def spy(value: object, depth: int) -> int:
        calls.append((value, depth))
        return _jcs._scan(value, depth)

    _cjcs.init(Unencodable, spy, MAX_DEPTH)
    try:
        yield calls
    finally:
        _cjcs.init(Unencodable, _jcs._scan, MAX_DEPTH)


_REFUSED_KEYS = (int, float, bool, type(None), tuple, bytes, frozenset)


def _reaches_python(value: Any) -> bool:
    """Whether ``value`` holds something the C leaves to the Python walk."""
    t = type(value)
    if t is int:
        return not -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER
    if t in (str, float, bool) or value is None:
        return False
    if t is dict:
        return any(
            (type(k) is not str and type(k) not in _REFUSED_KEYS) or _reaches_python(v)
            for k, v in value.items()
        )
    if t in (list, tuple):
        return any(_reaches_python(v) for v in value)
    return True


def _refused_in_c(value: Any, depth: int = 0) -> bool:
    """Whether the C may refuse ``value`` before it reaches what it leaves to Python."""
    t = type(value)
    if t is float:
        return not math.isfinite(value)
    if t is dict:
        return depth >= MAX_DEPTH or any(
            type(k) in _REFUSED_KEYS or _refused_in_c(v, depth + 1) for k, v in value.items()
        )
    if t in (list, tuple):
        return depth >= MAX_DEPTH or any(_refused_in_c(v, depth + 1) for v in value)
    return False


def _check(value: Any, handed: list[tuple[object, int]]) -> None:
    handed.clear()
    assert _c(value) == _python(value)
    assert all(v is value and d == 0 for v, d in handed), "only the whole value, at depth 0"
    if handed:
        assert _reaches_python(value), "the C handed to Python a value it decides itself"
    elif not _refused_in_c(value):
        assert not _reaches_python(value), "the C decided what it leaves to Python"


@FUZZ
@given(VALUES)
def test_scan_is_the_python_walk(handed: list[tuple[object, int]], value: Any) -> None:
    _check(value, handed)


@FUZZ
@given(C_VALUES)
def test_exact_built_in_values_are_decided_in_c(
    handed: list[tuple[object, int]], value: Any
) -> None:
    _check(value, handed)
    assert not handed


def _nest(shape: list[int], leaf: Any) -> Any:
    for s in reversed(shape):
        leaf = [leaf] if s == 0 else ({"k": leaf} if s == 1 else (leaf,))
    return leaf


@FUZZ
@given(
    st.integers(MAX_DEPTH - 3, MAX_DEPTH + 2).flatmap(
        lambda n: st.lists(st.integers(0, 2), min_size=n, max_size=n)
    ),
    st.one_of(_C_LEAVES, LEAVES, st.just({}), st.just([])),
)
def test_nesting_around_max_depth(
    handed: list[tuple[object, int]], shape: list[int], leaf: Any
) -> None:
    _check(_nest(shape, leaf), handed)


# Fixed values the generated ones may miss, with the flags the Python walk gives them.
PINNED: list[tuple[Any, object]] = [
    ({"a": [1, "x", None, True, 2.5]}, 0),
    ({"a": 1.0}, _FLOATS),
    ([1e-4, 0.5], 0),
    ([math.nextafter(1e-4, 0.0)], _FLOATS),
    ([math.nextafter(1e16, 0.0)], _FLOATS),  # integral: 1e16 - 2 is
    ([1e15 + 0.5], 0),
    ([1e16], _FLOATS),
    ([-0.0], _FLOATS),
    ({"\U0001f600": 1}, _SLOW),
    ({"\U0001f600": 1.0}, _SLOW | _FLOATS),
    ({"é中": 1}, 0),
    ({Key("a"): 1}, _SLOW),
    ({1: 2}, "Unencodable"),
    ({"a": math.nan}, "Unencodable"),
    ((math.inf,), "Unencodable"),
    ([2**53 - 1, -(2**53) + 1], 0),
    ([2**53], 0),
    ([-(2**53)], 0),
    ([2**53 + 1], "Unencodable"),
    ([2**63], "Unencodable"),
    ([10**20], _SLOW),
    ([Colour.RED], _SLOW),
    ([Colour.HUGE], "Unencodable"),
    (collections.OrderedDict(a=1.0), _SLOW | _FLOATS),
    ({"k": FakeStr()}, _SLOW),
    ({FakeStr(): 1}, _SLOW),
    ([object()], "Unencodable"),
    (_nest([0] * MAX_DEPTH, 1), 0),
    (_nest([1] * (MAX_DEPTH + 1), 1), "Unencodable"),
]


@pytest.mark.parametrize(("value", "want"), PINNED)
def test_pinned_values(handed: list[tuple[object, int]], value: Any, want: object) -> None:
    assert _python(value) == want  # the reference itself, so the pins mean what they say
    _check(value, handed)


def test_the_refusal_is_the_module_class_and_pickles() -> None:
    import pickle

    with pytest.raises(Unencodable) as info:
        _cjcs.scan({"a": [math.nan]})
    assert type(info.value) is Unencodable and issubclass(Unencodable, Exception)
    assert type(pickle.loads(pickle.dumps(info.value))) is Unencodable


_PROBE = (
    "import json\n"
    "from tracevault.schemas import _jcs\n"
    "print(json.dumps({'c': _jcs._cjcs is not None,\n"
    "    'fast': _jcs._flags is getattr(_jcs._cjcs, 'scan', None),\n"
    "    'python': _jcs._flags is _jcs._python_flags,\n"
    "    'flags': _jcs._flags({'a': [1.0]})}))\n"
)


@pytest.mark.parametrize(("no_c", "want"), [("", (True, True, False)), ("1", (False, False, True))])
def test_encoding_runs_the_c_unless_switched_off(no_c: str, want: tuple[bool, ...]) -> None:
    env = {**os.environ, native.NO_C_ENV: no_c}
    res = subprocess.run(
        [sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, timeout=60,
        check=True,
    )  # fmt: skip
    got = json.loads(res.stdout)
    assert (got["c"], got["fast"], got["python"]) == want
    assert got["flags"] == _FLOATS


_BARE = (
    "import importlib.machinery, importlib.util, sys\n"
    "loader = importlib.machinery.ExtensionFileLoader('_cjcs', sys.argv[1])\n"
    "spec = importlib.util.spec_from_loader('_cjcs', loader)\n"
    "importlib.util.module_from_spec(spec).scan(1)\n"
)


def test_scan_before_init_is_an_error() -> None:
    """Loaded without ``_jcs`` (which gives it the walk and the class): it says so."""
    res = subprocess.run(
        [sys.executable, "-c", _BARE, _cjcs.__file__], capture_output=True, text=True,
        timeout=60, check=False,
    )  # fmt: skip
    assert res.returncode == 1 and "RuntimeError: _cjcs.init()" in res.stderr, res.stderr
