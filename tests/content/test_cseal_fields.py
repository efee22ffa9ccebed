"""The sealer in C (``_cfields.c``'s ``Sealer``) is the Python sealer, byte for byte.

``RunCipher`` seals through one ``Sealer`` where the C is built; these tests hold it to the
Python path of the same salt and counter (``RunCipher.pinned``): every envelope the same bytes
(plain, tool-request and error forms; the tool rule's fallback on odd shapes), the same
refusals for the same bad arguments, the same refusal when the 2**64 counters are spent. Every
C envelope opens with ``RunCipher.open`` and with ``_cfields.open_pairs``; and one cipher's
nonces never repeat across any mix of its seals, from one thread or several (one counter).
``FUZZ_SCALE`` multiplies the examples (``.ci/native``'s fuzz step, under the sanitizers).
"""

from __future__ import annotations

import base64
import contextlib
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.native import examples, extension
from tracevault.content import RunCipher
from tracevault.content import _cipher as cipher_module
from tracevault.producer._content import ContentHook
from tracevault.schemas import ErrorInfo, EventKind, canonical_json

_cfields = extension("tracevault.content._cfields")

KEY = bytes(range(32))
FUZZ = settings(
    max_examples=examples(200),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
SEQ = st.one_of(st.integers(-(2**63), 2**63 - 1), st.sampled_from([0, 1, -1, 2**63 - 1, -(2**63)]))
FIELD = st.sampled_from(["request", "response", "error"])
# pieces of the tool rule: the key it looks for, the closing it needs, what breaks either
_PIECES = [b',"tool":', b'"', b"}", b'"}', b"a", b"\\", b"{", b',"tool"', b'tool":', b","]
ODD = st.lists(st.one_of(st.sampled_from(_PIECES), st.binary(max_size=3)), max_size=8).map(b"".join)
TOOL_REQUEST = st.one_of(
    st.builds(
        lambda args, tool: canonical_json({"args": args, "tool": tool}),
        st.one_of(
            st.none(),
            st.dictionaries(st.text(max_size=4), st.integers(-(2**53) + 1, 2**53 - 1), max_size=3),
        ),
        st.text(max_size=12),
    ),
    ODD,
)
PLAIN = st.one_of(st.binary(max_size=200), TOOL_REQUEST)
# one call on a cipher: a field sealed, a tool request sealed, or an event's two fields
OP = st.one_of(
    st.tuples(st.just("seal"), SEQ, FIELD, PLAIN),
    st.tuples(st.just("tool"), SEQ, TOOL_REQUEST),
    st.tuples(st.just("event"), SEQ, st.booleans(), PLAIN, PLAIN),
)


def _pair(salt: bytes, start: int, run_id: str = "run-s") -> tuple[RunCipher, RunCipher]:
    # the extension these tests import, whatever TRACEVAULT_NO_C says (tests/native.py)
    with mock.patch.object(cipher_module, "_cfields", _cfields):
        c = RunCipher.pinned(run_id, KEY, salt, start, native=True)
    py = RunCipher.pinned(run_id, KEY, salt, start, native=False)
    assert c._sealer is not None, "the C sealer is not built"
    assert py._sealer is None
    return c, py


def _apply(cipher: RunCipher, op: tuple[Any, ...]) -> list[tuple[int, str, bytes]]:
    """The envelopes one call gives, each with its seq and field."""
    if op[0] == "seal":
        _, seq, field, plain = op
        return [(seq, field, cipher.seal(seq, field, plain))]
    if op[0] == "tool":
        _, seq, req = op
        return [(seq, "request", cipher.seal_tool_request(seq, req))]
    _, seq, is_tool, req, resp = op
    a, b = cipher.event_sealer(seq, is_tool, req, resp)
    return [(seq, "request", a), (seq, "response", b)]


def _plaintexts(op: tuple[Any, ...]) -> list[bytes]:
    return [op[3]] if op[0] == "seal" else [op[2]] if op[0] == "tool" else [op[3], op[4]]


def _nonce(envelope: bytes) -> bytes:
    text = envelope[len(b'{"enc":"') : envelope.index(b'"', 8)]
    return base64.b64decode(text, validate=True)[:12]


def _plain(envelope: bytes) -> bool:
    """The plain form: ``{"enc":"<base64>","v":1}``, no other quote."""
    return envelope.endswith(b'","v":1}') and envelope.find(b'"', 8) == len(envelope) - 8


def _readable(envelope: bytes) -> bool:
    """Whether the envelope is one ``RunCipher.open`` reads: every plain one, and a tool form
    whose kept literal is one JSON string (a request of an odd shape, which the Recorder
    refuses before sealing, may keep bytes that are not; both sealers keep the same)."""
    if _plain(envelope):
        return True
    try:
        o = orjson.loads(envelope)
    except orjson.JSONDecodeError:
        return False
    return isinstance(o, dict) and set(o) == {"enc", "tool", "v"} and isinstance(o["tool"], str)


class _Ev:
    def __init__(self, seq: int, request: bytes, response: bytes) -> None:
        self.seq, self.request, self.response = seq, request, response


@FUZZ
@given(
    salt=st.binary(min_size=4, max_size=4),
    start=st.one_of(st.integers(0, 2**64 - 64), st.just(2**32 - 3)),
    run_id=st.text(min_size=1, max_size=20),
    ops=st.lists(OP, min_size=1, max_size=12),
    simd=st.booleans(),
)
def test_c_envelopes_are_the_python_envelopes_and_open_both_ways(
    salt: bytes, start: int, run_id: str, ops: list[tuple[Any, ...]], simd: bool
) -> None:
    with _base64(simd):
        _sealed_alike(salt, start, run_id, ops)


def _sealed_alike(salt: bytes, start: int, run_id: str, ops: list[tuple[Any, ...]]) -> None:
    c, py = _pair(salt, start, run_id)
    n = 0
    for op in ops:
        got, want = _apply(c, op), _apply(py, op)
        assert got == want
        for (seq, field, env), plain in zip(got, _plaintexts(op), strict=True):
            assert _nonce(env) == salt + (start + n).to_bytes(8, "big")
            n += 1
            if _readable(env):
                assert py.open(seq, field, env) == plain
                assert c.open(seq, field, env) == plain
        if op[0] == "event":
            [pair] = _cfields.open_pairs(KEY, c.aad_prefix, [_Ev(op[1], got[0][2], got[1][2])])
            if pair is not None:
                assert pair[:2] == (op[3], op[4])
            elif _plain(got[0][2]):  # the plain form: always opened in C
                pytest.fail("open_pairs declined a plain envelope the C sealed")


@FUZZ
@given(req=TOOL_REQUEST, seq=SEQ)
def test_the_tool_form_keeps_the_name_literal_or_falls_back_to_a_plain_seal(
    req: bytes, seq: int
) -> None:
    c, _ = _pair(b"salt", 0)
    env = c.seal_tool_request(seq, req)
    at = req.rfind(b',"tool":')
    if at >= 0 and req.endswith(b'"}'):
        assert env.endswith(b'","tool":' + req[at + 8 : -1] + b',"v":1}')
    else:
        assert _plain(env)
    # the event form seals the same request the same way only when it is a tool call
    c2, _ = _pair(b"salt", 0)
    assert c2.event_sealer(seq, True, req, b"{}")[0] == env
    c3, c4 = _pair(b"salt", 0)
    assert c3.event_sealer(seq, False, req, b"{}")[0] == c4.seal(seq, "request", req)


@contextlib.contextmanager
def _base64(simd: bool) -> Iterator[None]:
    """The sealer's base64 with AVX2 (where the CPU has it) or a character pair at a time."""
    if simd and not _cfields._base64_simd(True):
        pytest.fail("this CPU has no AVX2: the SIMD base64 is not tested here")
    _cfields._base64_simd(simd)
    try:
        yield
    finally:
        _cfields._base64_simd(True)


@pytest.mark.parametrize("simd", [True, False], ids=["avx2", "scalar"])
def test_base64_is_standard_and_padded_for_every_length(simd: bool) -> None:
    """Blob lengths 28 .. 627 (every residue mod 3 and mod 24, one SIMD step and many):
    the C's base64 is the stdlib's."""
    with _base64(simd):
        _every_length()


def _every_length() -> None:
    c, py = _pair(b"\xff\xfe\xfd\xfc", 2**64 - 601)
    for n in range(600):
        plain = os.urandom(n)
        env = c.seal(n, "response", plain)
        assert env == py.seal(n, "response", plain)
        text = env[8:-8]
        blob = base64.b64decode(text, validate=True)
        assert base64.b64encode(blob) == text and len(blob) == n + 28


def test_a_large_field_seals_the_same() -> None:
    """Past the C's stack buffer (4 KB): the heap path."""
    c, py = _pair(b"abcd", 7)
    for n in (4067, 4068, 4069, 4070, 70_000, 70_001, 70_002):
        plain = os.urandom(n)
        assert c.event_sealer(3, False, plain, plain) == py.event_sealer(3, False, plain, plain)


def _outcome(fn: Callable[[], object]) -> str:
    try:
        fn()
    except Exception as exc:
        return type(exc).__name__
    return "ok"


BAD_CALLS: list[tuple[str, tuple[Any, ...]]] = [
    ("seal", ("1", "request", b"x")),
    ("seal", (1.0, "request", b"x")),
    ("seal", (None, "request", b"x")),
    ("seal", (2**63, "request", b"x")),
    ("seal", (-(2**63) - 1, "request", b"x")),
    ("seal", (True, "request", b"x")),
    ("seal", (1, "Request", b"x")),
    ("seal", (1, "request\0", b"x")),
    ("seal", (1, 5, b"x")),
    ("seal", (1, b"request", b"x")),
    ("seal", (1, "error", "text")),
    ("seal", (1, "error", 5)),
    ("seal", (1, "error", bytearray(b"x"))),
    ("seal_tool_request", ("1", b'{"tool":"t"}')),
    ("seal_tool_request", (2**64, b'{"tool":"t"}')),
    ("seal_tool_request", (1, '{"args":1,"tool":"t"}')),
    ("seal_tool_request", (1, None)),
    ("seal_tool_request", (1, bytearray(b'{"args":1,"tool":"t"}'))),
    ("seal_tool_request", (1, memoryview(b'x{"args":1,"tool":"t"}')[1:])),
    ("seal", (1, "response", memoryview(b"xy")[1:])),
]


@pytest.mark.parametrize(("method", "args"), BAD_CALLS, ids=[repr(a) for _, a in BAD_CALLS])
def test_a_bad_argument_is_refused_as_python_refuses_it(method: str, args: tuple[Any, ...]) -> None:
    c, py = _pair(b"salt", 0)
    got = _outcome(lambda: getattr(c, method)(*args))
    want = _outcome(lambda: getattr(py, method)(*args))
    assert got == want
    if got == "ok":  # what both accept, both seal alike
        assert getattr(c, method)(*args) == getattr(py, method)(*args)


@pytest.mark.parametrize(
    "args",
    [("1", False, b"x", b"y"), (2**63, False, b"x", b"y"), (1, True, "x", b"y"), (1, 0, b"x", 5)],
)
def test_a_bad_event_is_refused_as_python_refuses_it(args: tuple[Any, ...]) -> None:
    c, py = _pair(b"salt", 0)
    assert _outcome(lambda: c.event_sealer(*args)) == _outcome(lambda: py.event_sealer(*args))
    assert _outcome(lambda: c.event_sealer(*args)) != "ok"


def test_a_bad_sealer_is_refused() -> None:
    for args, exc in [
        ((b"k" * 31, b"", b"salt"), ValueError),
        ((b"k" * 32, b"", b"sal"), ValueError),
        ((b"k" * 32, b"", b"salts"), ValueError),
        ((b"k" * 32, b"", b"salt", -1), OverflowError),
        ((b"k" * 32, b"", b"salt", 2**64), OverflowError),
        ((b"k" * 32, b"", b"salt", 1.0), TypeError),
        (("k" * 32, b"", b"salt"), TypeError),
    ]:
        with pytest.raises(exc):
            _cfields.Sealer(*args)
    for start in (-1, 2**64):
        for native in (True, False):
            with pytest.raises(OverflowError):
                RunCipher.pinned("r", KEY, b"salt", start, native=native)


@pytest.mark.parametrize("native", [True, False], ids=["c", "python"])
def test_the_last_counter_is_used_once_then_every_seal_is_refused(native: bool) -> None:
    last = 2**64 - 1
    cipher = RunCipher.pinned("r", KEY, b"salt", last, native=native)
    env = cipher.seal(1, "request", b"{}")
    assert _nonce(env) == b"salt" + last.to_bytes(8, "big")
    for call in (
        lambda: cipher.seal(1, "request", b"{}"),
        lambda: cipher.seal_tool_request(1, b'{"args":1,"tool":"t"}'),
        lambda: cipher.event_sealer(1, False, b"{}", b"{}"),
    ):
        with pytest.raises(OverflowError):
            call()
    # an event needs two: with one left it is refused, and the last one is gone with it
    cipher = RunCipher.pinned("r", KEY, b"salt", last, native=native)
    with pytest.raises(OverflowError):
        cipher.event_sealer(1, False, b"{}", b"{}")
    with pytest.raises(OverflowError):
        cipher.seal(1, "request", b"{}")
    cipher = RunCipher.pinned("r", KEY, b"salt", last - 1, native=native)
    a, b = cipher.event_sealer(1, False, b"{}", b"{}")
    assert [_nonce(a)[4:], _nonce(b)[4:]] == [(last - 1).to_bytes(8, "big"), b"\xff" * 8]
    with pytest.raises(OverflowError):
        cipher.seal(1, "error", b"x")


def _mixed(cipher: RunCipher, i: int) -> list[bytes]:
    """One of each kind of seal a run makes (the Recorder's event, its error, the others)."""
    req = canonical_json({"args": {"i": i}, "tool": "t"})
    return [
        *cipher.event_sealer(i, True, req, b'{"ok":1}'),
        cipher.seal(i, "error", b"boom"),
        *cipher.event_sealer(i, False, b"{}", b"null"),
        cipher.seal_tool_request(i, req),
        cipher.seal(i, "request", b"{}"),
    ]


def test_one_cipher_has_one_counter_across_every_kind_of_seal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(cipher_module, "_cfields", _cfields)
    cipher = RunCipher("run-n", KEY)  # the product's constructor: the C sealer where built
    assert cipher._sealer is not None
    envs = [e for i in range(200) for e in _mixed(cipher, i)]
    nonces = [_nonce(e) for e in envs]
    assert len(set(nonces)) == len(envs) == 1400
    assert len({n[:4] for n in nonces}) == 1
    assert [int.from_bytes(n[4:], "big") for n in nonces] == list(range(1400))
    with pytest.raises(RuntimeError, match="Sealer"):  # the Python counter is never drawn
        next(cipher._count)


def test_threads_sealing_one_cipher_never_share_a_nonce(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cipher_module, "_cfields", _cfields)
    cipher = RunCipher("run-t", KEY)
    out: list[list[bytes]] = [[] for _ in range(4)]
    go = threading.Barrier(4)

    def work(k: int) -> None:
        go.wait()
        for i in range(300):
            out[k] += _mixed(cipher, i)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    envs = [e for part in out for e in part]
    counters = sorted(int.from_bytes(_nonce(e)[4:], "big") for e in envs)
    assert counters == list(range(4 * 300 * 7))


def _fields(seq: int, kind: EventKind, error: ErrorInfo | None) -> tuple[Any, ...]:
    req = canonical_json({"args": {"q": seq}, "tool": "search"})
    return (seq, kind, 1, req, b'{"r":%d}' % seq, None, None, error, None, None, None, None)


def _hook(cipher: RunCipher) -> ContentHook:
    hook = ContentHook.__new__(ContentHook)  # no provider: the sealing alone
    hook.cipher = cipher
    return hook


def test_the_recorder_hook_seals_an_event_as_the_python_path_does() -> None:
    c, py = _pair(b"hook", 10)
    got: list[tuple[Any, ...]] = []
    want: list[tuple[Any, ...]] = []

    def into(out: list[tuple[Any, ...]]) -> Callable[[Any], bytes]:
        def encode(fields: Any) -> bytes:
            out.append(fields)
            return b""

        return encode

    enc_c, enc_py = _hook(c).wrap(into(got)), _hook(py).wrap(into(want))
    cases = [(EventKind.TOOL_CALL, None), (EventKind.MODEL_CALL, ErrorInfo("E", "bad ✓"))]
    for seq, (kind, err) in enumerate(cases * 3):
        enc_c(_fields(seq, kind, err))
        enc_py(_fields(seq, kind, err))
    assert got == want
    tool = got[0]
    assert tool[3].endswith(b'","tool":"search","v":1}')
    assert c.open(0, "request", tool[3]) == _fields(0, EventKind.TOOL_CALL, None)[3]
    assert c.open(0, "response", tool[4]) == b'{"r":0}'
    assert c.open(1, "error", got[1][7].message.encode()) == "bad ✓".encode()
    assert got[1][7].type == "E"


def test_without_the_c_the_cipher_seals_in_python(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cipher_module, "_cfields", None)
    cipher = RunCipher("run-p", KEY)
    assert cipher._sealer is None
    envs = _mixed(cipher, 1)
    assert [int.from_bytes(_nonce(e)[4:], "big") for e in envs] == list(range(7))


_PROBE = (
    "from tracevault.content import RunCipher\n"
    "c = RunCipher('r', bytes(32))\n"
    "print(c._sealer is not None, c.event_sealer == c._seal_event)\n"
)


@pytest.mark.parametrize(("no_c", "want"), [("1", "False True"), ("0", "True False")])
def test_tracevault_no_c_turns_the_c_sealer_off(no_c: str, want: str) -> None:
    """The switch that turns every C path off (tracevault/native.py) turns this one off too."""
    env = {**os.environ, "TRACEVAULT_NO_C": no_c}
    res = subprocess.run(
        [sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, timeout=60,
        check=True,
    )  # fmt: skip
    assert res.stdout.strip() == want
