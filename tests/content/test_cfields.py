"""The content opener in C (``tracevault/content/_cfields.c``) is the Python opener, or declines.

For each event ``open_pairs`` gives the plaintexts ``RunCipher.open_pair`` gives and whether
both are in the canonical subset, or None, and then the Python opener decides: it must never
open what Python refuses (a moved, altered or foreign ciphertext; a malformed envelope), never
give other bytes, and never call canonical what ``check_canonical`` refuses. Generated runs
and envelopes mutated byte by byte (``FUZZ_SCALE`` times more in ``.ci/native``'s fuzz step,
under the sanitizers), and whole runs opened both ways by ``opened_with``.
"""

from __future__ import annotations

import dataclasses
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.native import examples, extension
from tests.services.sequencer.test_canonical import _accepted
from tracevault.content import RunCipher, opened_with
from tracevault.content import _events as events_module
from tracevault.errors import ContentKeyError, NonCanonicalJSONError
from tracevault.schemas import (
    AgentInfo,
    ErrorInfo,
    EventKind,
    TraceEvent,
    canonical_json,
)

_cfields = extension("tracevault.content._cfields")

AGENT = AgentInfo("a", "1", "h", "python", "0")
_SCALAR = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**53) + 1, 2**53 - 1),
    st.text(max_size=8),
    st.floats(allow_nan=False, allow_infinity=False),
)
JSON = st.recursive(
    _SCALAR,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4)
    ),
    max_leaves=10,
)
# plaintexts: canonical JSON mostly, some bytes that are not (opened, then refused by Python)
PLAIN = st.one_of(JSON.map(canonical_json), st.binary(max_size=40))


def _python(cipher: RunCipher, seq: int, req: bytes, resp: bytes) -> tuple[bytes, bytes] | None:
    try:
        return cipher.open(seq, "request", req), cipher.open(seq, "response", resp)
    except ContentKeyError:
        return None


def _event(seq: int, req: bytes, resp: bytes, kind: EventKind = EventKind.MODEL_CALL) -> TraceEvent:
    return TraceEvent("run-c", seq, kind, 1, AGENT, req, resp)


def _agrees(cipher: RunCipher, key: bytes, ev: TraceEvent) -> None:
    [got] = _cfields.open_pairs(key, cipher.aad_prefix, [ev])
    want = _python(cipher, ev.seq, ev.request, ev.response)
    if got is None:
        return  # declined: the Python opener decides
    assert want is not None, "the C opened what Python refuses"
    assert got[:2] == want
    if got[2]:
        assert _accepted(want[0]) and _accepted(want[1])


@settings(max_examples=examples(300), deadline=None)
@given(
    req=PLAIN,
    resp=PLAIN,
    seq=st.integers(-(2**63), 2**63 - 1),
    tool=st.one_of(st.none(), st.text(max_size=10)),
)
def test_the_c_opens_what_runcipher_sealed_as_python_does(
    req: bytes, resp: bytes, seq: int, tool: str | None
) -> None:
    key = os.urandom(32)
    cipher = RunCipher("run-c", key)
    if tool is not None:
        req = canonical_json({"args": None, "tool": tool})
        sealed_req = cipher.seal_tool_request(seq, req)
    else:
        sealed_req = cipher.seal(seq, "request", req)
    ev = _event(seq, sealed_req, cipher.seal(seq, "response", resp))
    [got] = _cfields.open_pairs(key, cipher.aad_prefix, [ev])
    simple_name = tool is None or (
        tool.isascii() and tool.isprintable() and "\\" not in tool and '"' not in tool
    )
    if simple_name:  # every shape RunCipher writes with a plain tool name is opened in C
        assert got is not None
    if got is not None:
        assert got[:2] == (req, resp)
        if got[2]:
            assert _accepted(req) and _accepted(resp)
    # another seq, another run's key, the fields swapped: nothing opens
    assert _cfields.open_pairs(
        key, cipher.aad_prefix, [_event(seq ^ 1, ev.request, ev.response)]
    ) == [None]
    assert _cfields.open_pairs(os.urandom(32), cipher.aad_prefix, [ev]) == [None]
    assert _cfields.open_pairs(key, cipher.aad_prefix, [_event(seq, ev.response, ev.request)]) == [
        None
    ]
    assert _cfields.open_pairs(key, b"tracevault/v1/content\0run-d\0", [ev]) == [None]


@settings(max_examples=examples(400), deadline=None)
@given(
    data=st.data(),
    which=st.sampled_from(["request", "response"]),
    tool=st.booleans(),
)
def test_a_mutated_envelope_is_declined_or_opened_as_python_opens_it(
    data: st.DataObject, which: str, tool: bool
) -> None:
    key = os.urandom(32)
    cipher = RunCipher("run-c", key)
    seq = data.draw(st.integers(0, 2**40))
    req = canonical_json({"args": {"q": "x"}, "tool": "search"})
    sealed_req = cipher.seal_tool_request(seq, req) if tool else cipher.seal(seq, "request", req)
    ev = _event(seq, sealed_req, cipher.seal(seq, "response", b'{"ok":true}'))
    env = bytearray(getattr(ev, which))
    for _ in range(data.draw(st.integers(1, 3))):
        op = data.draw(st.sampled_from(["flip", "insert", "delete", "truncate"]))
        at = data.draw(st.integers(0, max(0, len(env) - 1)))
        if op == "flip" and env:
            env[at] ^= 1 << data.draw(st.integers(0, 7))
        elif op == "insert":
            env[at:at] = data.draw(st.binary(min_size=1, max_size=4))
        elif op == "delete" and env:
            del env[at]
        else:
            del env[at:]
    _agrees(cipher, key, dataclasses.replace(ev, **{which: bytes(env)}))


def _run(cipher: RunCipher) -> list[TraceEvent]:
    """A run with every case the opener meets: tool and model calls, an error, a GAP, a
    plaintext that is not canonical, and a field of another shape (orjson-written spacing)."""
    seal = cipher.seal
    out = [
        _event(
            0,
            seal(0, "request", b'{"input":1}'),
            seal(0, "response", b"null"),
            EventKind.RUN_STARTED,
        )
    ]
    for seq in range(1, 40):
        req = canonical_json({"args": {"i": seq}, "tool": "t"})
        out.append(
            _event(
                seq,
                cipher.seal_tool_request(seq, req),
                seal(seq, "response", b'{"n":%d}' % seq),
                EventKind.TOOL_CALL,
            )
        )
    err = ErrorInfo("ValueError", seal(40, "error", b"boom").decode())
    out.append(
        dataclasses.replace(
            _event(40, seal(40, "request", b"{}"), seal(40, "response", b"null")), error=err
        )
    )
    out.append(_event(41, b"null", b"null", EventKind.GAP))
    out.append(_event(42, seal(42, "request", b'{"a":1.5}'), seal(42, "response", b'{"b":1e-7}')))
    out.append(_event(43, seal(43, "request", b"{}"), seal(43, "response", b'{"enc":1}')))
    return out  # fmt: skip


def test_a_whole_run_opens_the_same_with_and_without_the_c(monkeypatch: pytest.MonkeyPatch) -> None:
    key = os.urandom(32)
    cipher = RunCipher("run-c", key)
    run = _run(cipher)
    run[43] = dataclasses.replace(
        run[43], response=run[43].response.replace(b'","v":1}', b'", "v": 1}')
    )
    with_c = opened_with(run[:43], key)
    monkeypatch.setattr(events_module, "_cfields", None)
    without = opened_with(run[:43], key)
    assert with_c == without
    assert type(with_c[5]) is TraceEvent and with_c[5].request == b'{"args":{"i":5},"tool":"t"}'
    assert with_c[40].error == ErrorInfo("ValueError", "boom")
    assert with_c[41] is run[41]
    assert with_c[42].request == b'{"a":1.5}'  # floats: canonical, decided by check_canonical
    monkeypatch.setattr(events_module, "_cfields", _cfields)
    # an envelope of another spacing: declined by the C, parsed by Python, the same answer
    assert opened_with(run, key)[43].response == b'{"enc":1}'


@pytest.mark.parametrize("c", [True, False], ids=["c", "python"])
def test_both_openers_name_what_does_not_open_or_is_not_accepted(
    c: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = os.urandom(32)
    cipher = RunCipher("run-c", key)
    if not c:
        monkeypatch.setattr(events_module, "_cfields", None)
    run = _run(cipher)[:40]
    moved = run[:]
    moved[7] = dataclasses.replace(run[7], response=run[8].response)
    with pytest.raises(ContentKeyError, match=r"run run-c seq 7: \$\.response does not decrypt"):
        opened_with(moved, key)
    spaced = run[:]
    spaced[9] = dataclasses.replace(run[9], response=cipher.seal(9, "response", b'{"n": 9}'))
    with pytest.raises(NonCanonicalJSONError, match=r"run run-c seq 9: \$\.response"):
        opened_with(spaced, key)
