"""RFC 8785 (JSON Canonicalization Scheme) for Python values, with exact refusals.

JCS fixes the bytes of a JSON value so that a producer in any language can write them: keys
sorted by their UTF-16 code units, ECMAScript number formatting (a number is an IEEE-754
double), strings as UTF-8 with only ``"``, ``\\`` and control characters escaped, no white
space. See docs/design.md ("The event").

Speed matters on the agent's thread (the Recorder encodes every request and response), so
one pass over the value (:func:`_scan`) checks what orjson cannot (NaN and Infinity, which it
writes as ``null``; integers a double does not hold; nesting) and notes what orjson writes
differently from JCS (floats; keys with characters past U+FFFF, which orjson sorts by code
point). That pass runs in C where ``tracevault/schemas/_cjcs.c`` is built (``_flags``): the
C leaves subclasses and ints past 2**53 - 1 to the Python walk, ``TRACEVAULT_NO_C=1`` runs
only the Python one, and ``tests/schemas/test_cjcs.py`` pins the two to each other. Values
without either go straight to orjson, whose string escaping and compact layout are JCS's;
floats become pre-formatted ``orjson.Fragment`` numbers; anything else (astral keys,
subclasses such as ``IntEnum`` or ``OrderedDict``) takes a pure-Python encoder.
``tests/schemas/test_jcs.py`` compares all three with the ``rfc8785`` package.

A refusal is explained by a second, slower walk (:func:`explain`) that names the JSON path
and the cause; the fast pass only has to notice that something is wrong.
"""

from __future__ import annotations

import json.encoder
import re
from collections.abc import Callable
from typing import Any

import orjson

from tracevault import native

__all__ = [
    "MAX_DEPTH",
    "MAX_SAFE_INTEGER",
    "Unencodable",
    "encode",
    "encode_plain",
    "exact_int",
    "explain",
    "jcs_number",
    "plain",
]

#: Up to here a double holds every integer (ECMAScript's Number.MAX_SAFE_INTEGER). Past it,
#: an int is recorded only when JCS writes its nearest double back digit for digit
#: (``2**53``, ``10**16``), so that parsing the record and writing it again gives the same
#: bytes; ``2**53 + 1`` would come back as ``9007199254740992`` and is refused.
MAX_SAFE_INTEGER = (1 << 53) - 1
_INT64 = 1 << 63  # orjson writes ints below this
#: Deepest nesting of objects and arrays a payload may have: orjson stops at 254 levels, and
#: no agent payload needs more than a few dozen.
MAX_DEPTH = 200

_FLOATS = 1  # floats present: orjson's number format is not ECMAScript's
_SLOW = 2  # subclasses or keys past U+FFFF: only the pure-Python encoder writes them right
_SORT_KEYS = orjson.OPT_SORT_KEYS
_PLAIN_LOW, _PLAIN_HIGH = 1e-4, 1e16
_ASTRAL = re.compile("[\U00010000-\U0010ffff]").search
_SURROGATE = re.compile("[\ud800-\udfff]").search
# json's C string encoder (ensure_ascii=False): escapes exactly what RFC 8785 section
# 3.2.2.2 escapes, with the same short forms and lower-case \u00xx.
_encode_str: Callable[[str], str] = json.encoder.encode_basestring


class Unencodable(Exception):
    """The value has no RFC 8785 form; :func:`explain` says where and why."""


def jcs_number(f: float) -> str:
    """ECMAScript's Number::toString for a finite double (RFC 8785 section 3.2.2.3).

    Python's ``repr`` already gives the shortest digits that round-trip, as ECMAScript does;
    only the layout differs: ECMAScript writes integral values without ``.0``, switches to
    exponent form below 1e-6 and from 1e21 (Python: below 1e-4 and from 1e16), and writes
    the exponent without leading zeros (``1e-7``, not ``1e-07``).
    """
    r = float.__repr__(f)
    if "e" not in r:  # 1e-4 <= |f| < 1e16 (or zero): the same digits, ECMAScript drops ".0"
        if r.endswith(".0"):
            r = r[:-2]
            return "0" if r == "-0" else r
        return r
    mantissa, _, exp = r.partition("e")
    sign = ""
    if mantissa[0] == "-":
        sign, mantissa = "-", mantissa[1:]
    digits = mantissa.replace(".", "")  # k significant digits, the first one non-zero
    k = len(digits)
    n = int(exp) + 1  # f = 0.digits * 10**n
    if k <= n <= 21:
        return sign + digits + "0" * (n - k)
    if 0 < n <= 21:
        return sign + digits[:n] + "." + digits[n:]
    if -6 < n <= 0:
        return sign + "0." + "0" * -n + digits
    e = n - 1
    tail = ("e+" if e >= 0 else "e-") + str(abs(e))
    return sign + digits + tail if k == 1 else sign + digits[0] + "." + digits[1:] + tail


def encode(value: Any) -> bytes:
    """The RFC 8785 bytes of ``value``; raises :class:`Unencodable` (or orjson's or
    ``UnicodeEncodeError`` for lone surrogates) when it has none."""
    return _written(value, _flags(value))


def encode_plain(value: Any) -> tuple[bytes, bool]:
    """:func:`encode`, and whether ``value`` was plain (:func:`plain`): no float and no int
    past 64 bits, so ``orjson.loads`` of the bytes gives back what ``json.loads`` does (it
    reads a longer int as a float) in a quarter of the time."""
    flags = _flags(value)
    if flags == 0:  # the Recorder's common case, one call fewer
        return orjson.dumps(value, option=_SORT_KEYS), True
    return _written(value, flags), False


def _written(value: Any, flags: int) -> bytes:
    """The bytes of a value :func:`_scan` found ``flags`` in, by the encoder they call for."""
    if flags == 0:
        return orjson.dumps(value, option=_SORT_KEYS)
    if flags == _FLOATS:
        return orjson.dumps(_numbers(value), option=_SORT_KEYS)
    out: list[str] = []
    _write(value, out, 0)
    return "".join(out).encode("utf-8")


def exact_int(n: int) -> bool:
    """Whether JCS writes ``n`` back digit for digit (see :data:`MAX_SAFE_INTEGER`)."""
    if -MAX_SAFE_INTEGER <= n <= MAX_SAFE_INTEGER:
        return True
    # from 1e21 on, ECMAScript writes an exponent; the bound also keeps str() cheap
    return -(10**21) < n < 10**21 and jcs_number(float(n)) == str(n)


def plain(value: Any) -> bool:
    """Whether ``orjson.dumps(value, option=OPT_SORT_KEYS)`` is the RFC 8785 form of
    ``value``: no float orjson writes differently, no key past U+FFFF, no subclass."""
    try:
        return _flags(value) == 0
    except Unencodable:
        return False


def _leaf(value: Any) -> int:
    """Flags of a scalar of an exact built-in type; raises when it has no JCS form."""
    if type(value) is int:
        if -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
            return 0
        if exact_int(value):
            return 0 if -_INT64 <= value < _INT64 else _SLOW
        raise Unencodable
    if value - value != 0.0:  # NaN and +-Infinity
        raise Unencodable
    # Between 1e-4 and 1e16 orjson writes a non-integral double as Python's repr does, which
    # is ECMAScript's form too (a test pins it); only the rest needs rewriting.
    return 0 if _PLAIN_LOW <= abs(value) < _PLAIN_HIGH and not value.is_integer() else _FLOATS


def _scan(value: Any, depth: int) -> int:
    """Check ``value`` and say which encoder can write it (0: orjson as is).

    The common leaves (str, None, bool, small ints) are tested inline: this runs on every
    payload the Recorder writes and the sequencer checks.
    """
    t = type(value)
    flags = 0
    if t is dict:
        if depth >= MAX_DEPTH:
            raise Unencodable
        for k, v in value.items():
            if type(k) is not str:
                if not isinstance(k, str):
                    raise Unencodable
                flags |= _SLOW
            if not k.isascii() and _ASTRAL(k) is not None:
                flags |= _SLOW
            tv = type(v)
            if tv is str or v is None or tv is bool:
                continue
            if tv is int and -MAX_SAFE_INTEGER <= v <= MAX_SAFE_INTEGER:
                continue
            flags |= _leaf(v) if tv is int or tv is float else _scan(v, depth + 1)
        return flags
    if t is list or t is tuple:
        if depth >= MAX_DEPTH:
            raise Unencodable
        for v in value:
            tv = type(v)
            if tv is str or v is None or tv is bool:
                continue
            if tv is int and -MAX_SAFE_INTEGER <= v <= MAX_SAFE_INTEGER:
                continue
            flags |= _leaf(v) if tv is int or tv is float else _scan(v, depth + 1)
        return flags
    if t is str or value is None or t is bool:
        return 0
    if t is int or t is float:
        return _leaf(value)
    # Subclasses (IntEnum, StrEnum, OrderedDict, defaultdict, namedtuple, ...): what json
    # accepted before RFC 8785, written by the pure-Python encoder.
    if isinstance(value, str):
        return _SLOW
    if isinstance(value, int):
        return _SLOW | _leaf(int(value))
    if isinstance(value, float):
        return _SLOW | _leaf(float(value))
    if isinstance(value, dict):
        return _SLOW | _scan(dict(value), depth)
    if isinstance(value, (list, tuple)):
        return _SLOW | _scan(list(value), depth)
    raise Unencodable


def _python_flags(value: Any) -> int:
    return _scan(value, 0)


_cjcs = native.load("tracevault.schemas._cjcs")
if _cjcs is not None:
    _cjcs.init(Unencodable, _scan, MAX_DEPTH)
#: :func:`_scan` of a whole value: the C walk where it is built (it runs the Python one itself
#: for what it leaves to it), else the Python walk.
_flags: Callable[[Any], int] = _python_flags if _cjcs is None else _cjcs.scan


def _number(f: float) -> Any:
    if _PLAIN_LOW <= abs(f) < _PLAIN_HIGH and not f.is_integer():
        return f
    return orjson.Fragment(jcs_number(f))


def _numbers(value: Any) -> Any:
    """``value`` with floats orjson would write differently replaced by their JCS text.

    Exact built-in types only (what :func:`_scan` let through with ``_FLOATS``).
    """
    t = type(value)
    if t is dict:
        out = {}
        for k, v in value.items():
            tv = type(v)
            if tv is float:
                out[k] = _number(v)
            elif tv is dict or tv is list or tv is tuple:
                out[k] = _numbers(v)
            else:
                out[k] = v
        return out
    if t is list or t is tuple:
        items = []
        for v in value:
            tv = type(v)
            if tv is float:
                items.append(_number(v))
            elif tv is dict or tv is list or tv is tuple:
                items.append(_numbers(v))
            else:
                items.append(v)
        return items
    return _number(value) if t is float else value


def _utf16(key: str) -> bytes:
    # Big-endian UTF-16 bytes compare as the code units do (RFC 8785 section 3.2.3).
    return key.encode("utf-16-be", "surrogatepass")


def _write(value: Any, out: list[str], depth: int) -> None:
    """The pure-Python JCS writer, for what the fast route cannot write (see the module doc)."""
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, str):
        out.append(_encode_str(value))
    elif isinstance(value, int):
        n = int(value)
        if not exact_int(n):
            raise Unencodable
        out.append(str(n))
    elif isinstance(value, float):
        if value - value != 0.0:
            raise Unencodable
        out.append(jcs_number(value))
    elif depth >= MAX_DEPTH:
        raise Unencodable
    elif isinstance(value, dict):
        if any(not isinstance(k, str) for k in value):
            raise Unencodable
        out.append("{")
        for i, k in enumerate(sorted(value, key=_utf16)):
            if i:
                out.append(",")
            out.append(_encode_str(k))
            out.append(":")
            _write(value[k], out, depth + 1)
        out.append("}")
    elif isinstance(value, (list, tuple)):
        out.append("[")
        for i, v in enumerate(value):
            if i:
                out.append(",")
            _write(v, out, depth + 1)
        out.append("]")
    else:
        raise Unencodable


# -- refusals -------------------------------------------------------------------------------


def shown(text: str) -> str:
    """``text`` printable as UTF-8: lone surrogates as ``\\udcff`` escapes."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def path_of(parent: str, key: str | int) -> str:
    """``$.a.b``, ``$.a[3]`` or ``$.a["odd key"]``: the JSONPath of ``key`` under ``parent``."""
    if isinstance(key, int):
        return f"{parent}[{key}]"
    if key.isidentifier():
        return f"{parent}.{key}"
    return f"{parent}[{shown(json.dumps(key, ensure_ascii=False))}]"


def _lone_surrogate(text: str, what: str) -> str | None:
    m = _SURROGATE(text)
    if m is None:
        return None
    return (
        f"{what} has a lone surrogate {shown(m.group())} at index {m.start()}, which UTF-8 "
        "cannot encode (it comes from bytes decoded with errors='surrogateescape' or from a "
        "broken pair); decode the bytes properly, or drop it with "
        "text.encode('utf-8', 'replace').decode()"
    )


def explain(value: Any, path: str) -> tuple[str, str]:
    """The JSON path and cause of the first reason ``value`` has no JCS form."""
    found = _explain(value, path, 0, {})
    if found is None:  # pragma: no cover - encode refused something _explain accepts
        return path, "its JSON encoding failed for a reason tracevault cannot name"
    return found


def _explain(value: Any, path: str, depth: int, open_: dict[int, str]) -> tuple[str, str] | None:
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, str):
        why = _lone_surrogate(value, "the string")
        return None if why is None else (path, why)
    if isinstance(value, int):
        n = int(value)
        if exact_int(n):
            return None
        try:
            seen = jcs_number(float(n))
        except OverflowError:
            seen = "Infinity"
        return path, (
            f"the int {n} is past ±(2**53 - 1), where a JSON number (an IEEE-754 double) no "
            f"longer holds every integer: a JSON reader would read {seen}; record it as a "
            "string (str(n))"
        )
    if isinstance(value, float):
        if value - value == 0.0:
            return None
        return path, (
            f"{float(value)!r} is not a JSON number (RFC 8785 has no NaN or Infinity); "
            "record null or a string instead"
        )
    if not isinstance(value, (dict, list, tuple)):
        cls = type(value)
        return path, (
            f"a {cls.__module__}.{cls.__qualname__} is not a JSON value; record only dict "
            "(str keys), list, tuple, str, int, float, bool or None, and convert other "
            "objects (e.g. str(x), x.isoformat(), dataclasses.asdict(x)) before the call"
        )
    if id(value) in open_:
        return path, f"it is the same object as {open_[id(value)]}, which contains it (a cycle)"
    if depth >= MAX_DEPTH:
        return path, f"it is nested more than {MAX_DEPTH} objects and arrays deep"
    open_[id(value)] = path
    try:
        if isinstance(value, dict):
            for k in value:
                if not isinstance(k, str):
                    return path, (
                        f"the key {shown(repr(k))} has type {type(k).__name__}, not str; JSON "
                        "object keys are strings, so convert the key (str(key)) before the call"
                    )
                why = _lone_surrogate(k, "the key")
                if why is not None:
                    return path_of(path, k), why
            items: Any = value.items()
        else:
            items = enumerate(value)
        for k, v in items:
            found = _explain(v, path_of(path, k), depth + 1, open_)
            if found is not None:
                return found
        return None
    finally:
        del open_[id(value)]
