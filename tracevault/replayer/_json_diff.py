"""JSON-path differences between a recorded payload and a re-run's payload.

A divergence report is only useful if it points at the field that changed, so differences
are listed as ``$.messages[2].content: expected "hi", got "hello"`` lines, one per leaf, in
document order. ``1`` and ``true`` differ here because canonical JSON (what the chain
covers) tells them apart; ``1`` and ``1.0`` do not, because RFC 8785 writes both as ``1``.
Two long values that differ are shown around their first differing character (``…`` where
cut, and the character's offset), so a change at the end of a long prompt reads as that
change, not as two equal first 80 characters.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = [
    "MAX_DIFFS",
    "MISSING",
    "Leaf",
    "json_diff",
    "json_leaves",
    "json_path",
    "leaf_line",
    "short_json",
]

MAX_DIFFS = 50
_SHORT = 80


def short_json(value: Any, limit: int = _SHORT) -> str:
    """Compact JSON of ``value``, cut to ``limit`` characters with an ellipsis."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def json_path(parent: str, key: str | int) -> str:
    """``$.a.b``, ``$.a[3]`` or ``$["odd key"]``: the JSONPath of ``key`` under ``parent``."""
    if isinstance(key, int):
        return f"{parent}[{key}]"
    if key.isidentifier():
        return f"{parent}.{key}"
    return f"{parent}[{json.dumps(key, ensure_ascii=False)}]"


def _same_value(a: Any, b: Any) -> bool:
    # bool is an int subclass in Python, but not in the bytes the chain covers; an int and a
    # float of the same value are one JSON number (an RFC 8785 number is a double).
    if type(a) is type(b):
        return bool(a == b)
    numbers = (int, float)
    return (
        isinstance(a, numbers)
        and isinstance(b, numbers)
        and not isinstance(a, bool)
        and not isinstance(b, bool)
        and a == b
    )


#: One differing leaf: its JSON path and each side's value (``MISSING`` when a side has none).
Leaf = tuple[str, Any, Any]
MISSING: Any = type("Missing", (), {"__repr__": lambda self: "MISSING"})()


def json_diff(
    expected: Any, actual: Any, path: str = "$", limit: int = MAX_DIFFS
) -> tuple[str, ...]:
    """Every leaf where ``actual`` differs from ``expected``, as JSON-path lines.

    At most ``limit`` lines; a last line says how many more were left out.
    """
    out = [leaf_line(leaf) for leaf in json_leaves(expected, actual, path)]
    if len(out) > limit:
        more = len(out) - limit
        return (*out[:limit], f"… and {more} more difference{'s' if more > 1 else ''}")
    return tuple(out)


def json_leaves(expected: Any, actual: Any, path: str = "$") -> list[Leaf]:
    """Every differing leaf as ``(path, expected, actual)``, in document order."""
    out: list[Leaf] = []
    _walk(expected, actual, path, out)
    return out


def leaf_line(leaf: Leaf) -> str:
    path, expected, actual = leaf
    if actual is MISSING:
        return f"{path}: missing (recorded {short_json(expected)})"
    if expected is MISSING:
        return f"{path}: unexpected {short_json(actual)} (not in the record)"
    a, b = _compact(expected), _compact(actual)
    if len(a) <= _SHORT and len(b) <= _SHORT:
        return f"{path}: expected {a}, got {b}"
    at = next(
        (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
    )
    return (
        f"{path}: expected {_window(a, at)}, got {_window(b, at)} "
        f"(first difference at character {at})"
    )


def _compact(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


_BEFORE = 30  # characters shown before the first difference


def _window(text: str, at: int) -> str:
    """``text`` around offset ``at``: at most ``_SHORT`` characters, ``…`` where cut."""
    start = max(0, at - _BEFORE)
    end = min(len(text), start + _SHORT)
    head = "…" if start > 0 else ""
    tail = "…" if end < len(text) else ""
    return f"{head}{text[start:end]}{tail}"


def _walk(expected: Any, actual: Any, path: str, out: list[Leaf]) -> None:
    if isinstance(expected, dict) and isinstance(actual, dict):
        for key in sorted(expected.keys() | actual.keys()):
            sub = json_path(path, key)
            _walk(expected.get(key, MISSING), actual.get(key, MISSING), sub, out)
        return
    if isinstance(expected, list) and isinstance(actual, list):
        for i in range(max(len(expected), len(actual))):
            sub = json_path(path, i)
            a = expected[i] if i < len(expected) else MISSING
            b = actual[i] if i < len(actual) else MISSING
            _walk(a, b, sub, out)
        return
    if expected is MISSING or actual is MISSING or not _same_value(expected, actual):
        out.append((path, expected, actual))
