"""Canonical JSON: the one place request/response payloads become bytes.

Sorted keys, compact separators, UTF-8 (no ASCII escaping), no NaN/Infinity. Replay compares
a re-run's request with the recorded one byte for byte, so both sides must go through here.
"""

from __future__ import annotations

import json
import json.encoder
import math
import re
from typing import Any

import orjson

from tracevault.errors import NonCanonicalJSONError, PayloadError

__all__ = ["canonical_json", "check_canonical", "loads_canonical"]

_encoder = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)

# The C encoder that ``_encoder.encode`` builds on every call, built once. ``markers=None``
# turns off only the circular-reference check, which a freshly parsed value never needs;
# the arguments are otherwise exactly the ones ``JSONEncoder.iterencode`` passes.
_c_make_encoder: Any = getattr(json.encoder, "c_make_encoder", None)  # not in typeshed
_c_encode = (
    None
    if _c_make_encoder is None
    else _c_make_encoder(
        None, _encoder.default, json.encoder.encode_basestring, None, ":", ",", True, False, False
    )
)

_SORT_KEYS = orjson.OPT_SORT_KEYS
# A digit directly followed by ".", "e" or "E": every JSON float token has one. Inside strings
# it only costs the exact (slower) path.
_MAYBE_FLOAT = re.compile(rb"[.eE](?<=[0-9].)").search


def _encode_parsed(value: Any) -> str:
    """``_encoder.encode(value)`` for a value json/orjson just parsed (so acyclic)."""
    if _c_encode is None:  # pragma: no cover - CPython always has the C encoder
        return _encoder.encode(value)
    return "".join(_c_encode(value, 0))


def canonical_json(value: Any, *, field: str = "payload") -> bytes:
    """Serialise ``value`` canonically, or raise :class:`PayloadError` naming the bad path."""
    try:
        return _encoder.encode(value).encode("utf-8")
    except (TypeError, ValueError) as exc:
        # Only the failure path walks the value: the fast path is json's C encoder.
        path, why = _find_bad(value, f"$.{field}")
        raise PayloadError(
            f"{path} cannot be recorded: {why}. Record only JSON values (dict with str keys, "
            "list, str, int, float, bool, None); convert other objects before the call.",
            path=path,
        ) from exc


def _find_bad(value: Any, path: str) -> tuple[str, str]:
    if value is None or isinstance(value, (str, bool, int)):
        return path, "unknown problem"
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return path, f"{value!r} is not valid JSON"
        return path, "unknown problem"
    if isinstance(value, dict):
        for k in value:
            if not isinstance(k, str):
                return path, f"key {k!r} is a {type(k).__name__}, not a str"
        for k, v in value.items():
            sub, why = _find_bad(v, f"{path}.{k}" if k.isidentifier() else f"{path}[{k!r}]")
            if why != "unknown problem":
                return sub, why
        return path, "unknown problem"
    if isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            sub, why = _find_bad(v, f"{path}[{i}]")
            if why != "unknown problem":
                return sub, why
        return path, "unknown problem"
    return path, f"a {type(value).__module__}.{type(value).__qualname__} is not JSON-serialisable"


def loads_canonical(data: bytes, *, field: str = "payload") -> Any:
    """Parse canonical JSON bytes, raising :class:`NonCanonicalJSONError` if they are not."""
    # Fast path: orjson parses three times faster than json.loads; when re-encoding its
    # value gives back the exact bytes, json.loads would have built the same value. Anything
    # else (orjson turns ints past 64 bits into floats, refuses some texts) is decided by
    # json.loads, which defines the canonical form together with the encoder.
    try:
        value = orjson.loads(data)
        if _MAYBE_FLOAT(data) is None and orjson.dumps(value, option=_SORT_KEYS) == data:
            # Faster still, for values without floats: on dicts with str keys, lists, str,
            # 64-bit ints, bools and None, orjson writes exactly what the stdlib encoder
            # writes (the same escapes, key order and separators; a test pins it). Floats may
            # be formatted differently (1e-07 vs 1e-7), so they never take this path.
            return value
        if _encode_parsed(value).encode("utf-8") == data:
            return value
    except (orjson.JSONDecodeError, orjson.JSONEncodeError, UnicodeError, ValueError, TypeError):
        pass
    try:
        value = json.loads(data.decode("utf-8"))
        again = _encode_parsed(value).encode("utf-8")
    except (UnicodeError, ValueError, TypeError) as exc:
        raise NonCanonicalJSONError(f"{field} is not UTF-8 JSON: {exc}") from exc
    if again != data:
        raise NonCanonicalJSONError(
            f"{field} is JSON but not canonical (keys must be sorted, no white space between "
            "tokens, UTF-8 not \\u escapes); encode it with tracevault.schemas.canonical_json"
        )
    return value


def check_canonical(data: bytes, *, field: str = "payload") -> None:
    """Raise :class:`NonCanonicalJSONError` unless ``data`` is canonical JSON."""
    try:  # loads_canonical's first test, inline: the sequencer checks two payloads per event
        if (
            _MAYBE_FLOAT(data) is None
            and orjson.dumps(orjson.loads(data), option=_SORT_KEYS) == data
        ):
            return
    except (orjson.JSONDecodeError, orjson.JSONEncodeError, UnicodeError, ValueError, TypeError):
        pass
    loads_canonical(data, field=field)
