"""Canonical JSON: the one place request/response payloads become bytes.

The form is RFC 8785 (JCS, ``tracevault.schemas._jcs``), so a producer in any language can
write it. Replay compares a re-run's request with the recorded one byte for byte, so the
Recorder and the Replayer both go through here.

Records made by SDKs before RFC 8785 hold CPython's
``json.dumps(sort_keys=True, separators=(",", ":"), ensure_ascii=False)`` bytes, the
*legacy form*. The two agree except for some floats (``1.0``/``1``, ``1e-07``/``1e-7``,
``1e+16``/``10000000000000000``), integers a double does not hold (legacy only) and the
order of keys with characters past U+FFFF. The checks here accept either form: the chain
covers bytes, so sealed legacy events keep verifying, and an old SDK still running during an
upgrade keeps being sealed instead of going to the DLQ. Replay matches a re-run against a
record in the form the record was written in (:func:`canonical_json_like`). See
docs/design.md ("The event").
"""

from __future__ import annotations

import json
import json.encoder
from typing import Any

import orjson

from tracevault.errors import NonCanonicalJSONError, PayloadError
from tracevault.schemas import _jcs

__all__ = [
    "canonical_json",
    "canonical_json_like",
    "canonical_json_plain",
    "check_canonical",
    "loads_canonical",
]

_legacy_encoder = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)

# The C encoder that ``_legacy_encoder.encode`` builds on every call, built once.
# ``markers=None`` turns off only the circular-reference check, which a freshly parsed value
# never needs; the arguments are otherwise exactly the ones ``JSONEncoder.iterencode`` passes.
_c_make_encoder: Any = getattr(json.encoder, "c_make_encoder", None)  # not in typeshed
_c_encode = (
    None
    if _c_make_encoder is None
    else _c_make_encoder(
        None,
        _legacy_encoder.default,
        json.encoder.encode_basestring,
        None,
        ":",
        ",",
        True,
        False,
        False,
    )
)

_SORT_KEYS = orjson.OPT_SORT_KEYS
_PARSE_ERRORS = (
    orjson.JSONDecodeError,
    orjson.JSONEncodeError,
    UnicodeError,
    ValueError,
    TypeError,
    RecursionError,
)


_ENCODE_ERRORS = (_jcs.Unencodable, orjson.JSONEncodeError, UnicodeEncodeError, RecursionError)


def canonical_json(value: Any, *, field: str = "payload") -> bytes:
    """RFC 8785 bytes of ``value``, or :class:`PayloadError` naming the JSON path and cause."""
    try:
        return _jcs.encode(value)
    except _ENCODE_ERRORS:
        raise _refused(value, field) from None


def canonical_json_plain(value: Any, *, field: str = "payload") -> tuple[bytes, bool]:
    """:func:`canonical_json`, and whether ``orjson.loads`` reads the bytes back as
    ``json.loads`` does (no float, no int past 64 bits: ``_jcs.encode_plain``)."""
    try:
        return _jcs.encode_plain(value)
    except _ENCODE_ERRORS:
        raise _refused(value, field) from None


def _refused(value: Any, field: str) -> PayloadError:
    # Only the failure path walks the value a second time, to name what is wrong.
    path, why = _jcs.explain(value, f"$.{field}")
    return PayloadError(f"{path} cannot be recorded: {why}", path=path)


def _legacy(value: Any) -> bytes | None:
    """The legacy form of ``value`` (see the module doc), or None when json refuses it."""
    try:
        return _legacy_encoder.encode(value).encode("utf-8")
    except (TypeError, ValueError, UnicodeError, RecursionError):
        return None


def canonical_json_like(value: Any, recorded: bytes | None, *, field: str = "payload") -> bytes:
    """``value``'s canonical bytes in the form ``recorded`` was written in.

    RFC 8785 unless ``recorded`` holds the legacy form of this very value (a record made
    before RFC 8785); then those bytes, so an old run still replays. A value that neither
    form can encode raises :class:`PayloadError` as :func:`canonical_json` does.
    """
    try:
        data = canonical_json(value, field=field)
    except PayloadError:
        if recorded is not None and _legacy(value) == recorded:
            return recorded
        raise
    if recorded is None or data == recorded:
        return data
    return recorded if _legacy(value) == recorded else data


def _encode_parsed(value: Any) -> bytes:
    """The legacy form of a value json/orjson just parsed (so acyclic)."""
    if _c_encode is None:  # pragma: no cover - CPython always has the C encoder
        return _legacy_encoder.encode(value).encode("utf-8")
    return "".join(_c_encode(value, 0)).encode("utf-8")


def _jcs_parsed(value: Any) -> bytes | None:
    try:
        return _jcs.encode(value)
    except (_jcs.Unencodable, orjson.JSONEncodeError, UnicodeEncodeError, RecursionError):
        return None


def _written_as(value: Any, data: bytes) -> bool:
    """Whether ``data`` is the RFC 8785 or the legacy form of a freshly parsed ``value``.

    RFC 8785 first: it is what current producers write, and its encoder is the faster one on
    payloads with floats (orjson, where the legacy form needs json's C encoder).
    """
    return _jcs_parsed(value) == data or _encode_parsed(value) == data


def loads_canonical(data: bytes, *, field: str = "payload") -> Any:
    """Parse canonical JSON bytes (RFC 8785 or the legacy form), or raise
    :class:`NonCanonicalJSONError`."""
    # Fast path: orjson parses three times faster than json.loads; when re-encoding its value
    # gives back the exact bytes, json.loads would have built the same value. Anything else
    # (orjson turns ints past 64 bits into floats, refuses some texts) is decided by
    # json.loads, which defines the legacy form together with its encoder.
    try:
        value = orjson.loads(data)
        if orjson.dumps(value, option=_SORT_KEYS) == data and _jcs.plain(value):
            # Faster still: orjson's bytes are the RFC 8785 form (and the legacy one) when the
            # value has no float that orjson writes differently, no key past U+FFFF and no
            # integer a double does not hold (_jcs.plain; tests pin orjson's escapes and
            # number forms). A look at the value is cheaper than a regex over long strings.
            return value
        if _written_as(value, data):
            return value
    except _PARSE_ERRORS:
        pass
    try:
        value = json.loads(data.decode("utf-8"))
        ok = _written_as(value, data)
    except RecursionError as exc:  # thousands of nested brackets: say so, not Python's words
        raise NonCanonicalJSONError(
            f"{field} JSON is nested deeper than a parser can read"
        ) from exc
    except _PARSE_ERRORS as exc:
        raise NonCanonicalJSONError(f"{field} is not UTF-8 JSON: {exc}") from exc
    if not ok:
        raise NonCanonicalJSONError(
            f"{field} is JSON but not canonical: RFC 8785 (JCS) wants keys sorted by UTF-16 "
            "code units, no white space between tokens, UTF-8 rather than \\u escapes and "
            "ECMAScript number forms; encode it with tracevault.schemas.canonical_json or any "
            "RFC 8785 library"
        )
    return value


def check_canonical(data: bytes, *, field: str = "payload") -> None:
    """Raise :class:`NonCanonicalJSONError` unless ``data`` is canonical JSON."""
    try:  # loads_canonical's orjson tests, inline: the sequencer checks two payloads per event
        value = orjson.loads(data)
        if orjson.dumps(value, option=_SORT_KEYS) == data and _jcs.plain(value):
            return
        if _written_as(value, data):
            return
    except _PARSE_ERRORS:
        pass
    loads_canonical(data, field=field)  # decides the rest with json.loads, or raises
