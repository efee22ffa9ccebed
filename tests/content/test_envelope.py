"""The encrypted field's envelope: canonical JSON the sequencer's C fast path accepts as is,
and opened only at its own run, seq and field."""

from __future__ import annotations

import binascii
import os

import pybase64
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.native import extension
from tracevault.content import RunCipher, is_envelope, open_event
from tracevault.errors import ContentKeyError, NonCanonicalJSONError
from tracevault.schemas import (
    AgentInfo,
    EventKind,
    TraceEvent,
    canonical_json,
    check_canonical,
)

_cseal = extension("tracevault.services.sequencer._cseal")
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None)
@given(value=JSON, tool=st.text(min_size=1, max_size=20), seq=st.integers(0, 2**40))
def test_envelopes_are_on_the_fast_path_and_open_where_they_were_made(
    value: object, tool: str, seq: int
) -> None:
    cipher = RunCipher("run-e", os.urandom(32))
    plain = canonical_json(value)
    request = canonical_json({"args": value, "tool": tool})
    for field, env, want in (
        ("response", cipher.seal(seq, "response", plain), plain),
        ("request", cipher.seal_tool_request(seq, request), request),
    ):
        check_canonical(env, field=field)  # what the sequencer's Python rules check
        assert is_envelope(env)
        if tool.isascii() and tool.isprintable() and '"' not in tool and "\\" not in tool:
            assert _cseal.canonical(env), env  # the C subset: no fallback to Python
        assert cipher.open(seq, field, env) == want
        with pytest.raises(ContentKeyError, match=rf"seq {seq + 1}: \$\.{field}"):
            cipher.open(seq + 1, field, env)
        other = "error" if field == "request" else "request"
        with pytest.raises(ContentKeyError, match=rf"\$\.{other}"):
            cipher.open(seq, other, env)
        with pytest.raises(ContentKeyError):
            RunCipher("run-f", b"\x00" * 32).open(seq, field, env)


def test_a_tool_request_keeps_only_its_name_in_clear() -> None:
    cipher = RunCipher("run-t", os.urandom(32))
    req = canonical_json({"args": {"q": 'x,"tool":"fake"', "tool": "inner"}, "tool": "search"})
    env = cipher.seal_tool_request(3, req)
    assert env.endswith(b'"tool":"search","v":1}') and b"inner" not in env and b"fake" not in env


def test_a_plaintext_field_in_an_encrypted_run_is_refused() -> None:
    cipher = RunCipher("run-p", os.urandom(32))
    with pytest.raises(ContentKeyError, match=r"seq 1: \$\.request is not an encrypted field"):
        cipher.open(1, "request", b'{"input":"in clear"}')


def test_a_non_canonical_plaintext_inside_an_envelope_is_refused_when_opened() -> None:
    # The sequencer sees only the envelope; a producer that encrypted non-canonical JSON is
    # caught where the plaintext is first seen.
    cipher = RunCipher("run-n", os.urandom(32))
    ev = TraceEvent(
        "run-n", 1, EventKind.TOOL_CALL, 1, AgentInfo("a", "1", "h", "p", "0"),
        cipher.seal(1, "request", b'{"b":1, "a":2}'), cipher.seal(1, "response", b"null"),
    )  # fmt: skip
    with pytest.raises(NonCanonicalJSONError, match=r"run run-n seq 1: \$\.request"):
        open_event(ev, cipher)


@settings(max_examples=400, deadline=None)
@given(data=st.binary(max_size=3000), cut=st.integers(0, 4100), junk=st.binary(max_size=3))
def test_pybase64_writes_binasciis_base64_and_reads_no_more_than_its_strict_mode(
    data: bytes, cut: int, junk: bytes
) -> None:
    """The envelopes' base64 is pybase64's (SIMD): the same text as binascii's, and a decoder
    that accepts only what binascii's strict mode accepts, with the same bytes."""
    text = pybase64.b64encode(data)
    assert text == binascii.b2a_base64(data, newline=False)
    assert pybase64.b64decode(text, validate=True) == data
    mutated = text[:cut] + junk + text[cut:]
    try:
        got = pybase64.b64decode(mutated, validate=True)
    except binascii.Error:
        return
    assert got == binascii.a2b_base64(mutated, strict_mode=True)
