"""The Recorder's event bytes in C (``_cwire.c``) are the Python encoder's, byte for byte.

Generated events of every shape (each optional field absent or present, ints at the int64
edges, non-ASCII and astral strings, empty and large payloads, attribute maps and the
duration shortcut, interleaves with and without a branch) are written by the C with a
fallback that fails the test, so the C itself must write them, and compared with
``EventEncoder.encode_fields_python`` and with fastavro (``encode_event``). What the C does not
handle exactly (a bool, a subclass, an int past int64, a lone surrogate, a list) it must hand
to the Python encoder: the same bytes or the same exception. ``link`` is ``chain.link``.
``FUZZ_SCALE`` times more examples in ``.ci/native``'s fuzz step, under the sanitizers.
"""

from __future__ import annotations

import functools
import hashlib
import sys
import threading
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.native import examples, extension
from tracevault import chain, native
from tracevault.producer import _attest, _wire
from tracevault.producer._attest import Attestor, link_python
from tracevault.producer._wire import EventEncoder
from tracevault.schemas import AgentInfo, ErrorInfo, EventKind, Interleave, TraceEvent, encode_event
from tracevault.transparency import Ed25519Signer

cwire = extension("tracevault.producer._cwire")

I64 = st.integers(-(2**63), 2**63 - 1)
KINDS = _wire._KIND_ORDER
TEXT = st.text(max_size=40) | st.text(st.characters(min_codepoint=0x10000), max_size=8)
LARGE = st.integers(6, 270).map(lambda n: bytes(range(256)) * n)  # 1.5 KB to 69 KB
PAYLOAD = st.binary(max_size=64) | LARGE
ATTRIBUTES = st.none() | I64 | st.integers(-2, 10**6) | st.dictionaries(TEXT, TEXT, max_size=6)
INTERLEAVE = st.none() | st.tuples(st.none() | I64, I64, I64)
FIELDS = st.tuples(
    I64, st.sampled_from(list(EventKind)), I64, PAYLOAD, PAYLOAD,
    st.none() | TEXT, st.none() | I64, st.none() | st.builds(ErrorInfo, TEXT, TEXT),
    st.none() | TEXT, st.none() | I64, ATTRIBUTES, INTERLEAVE,
)  # fmt: skip
AGENTS = st.builds(AgentInfo, TEXT, TEXT, TEXT, TEXT, TEXT)


def _declined(fields: object) -> bytes:
    raise AssertionError(f"the C handed a field it must write to Python: {fields!r}")


def _c_only(enc: EventEncoder, fields: Any) -> bytes:
    """The C's bytes, with no way to fall back: a decline fails the test."""
    out: bytes = cwire.encode(enc._prefix, enc._agent_bytes, (KINDS, ErrorInfo, _declined), fields)
    return out


def _fastavro(enc: EventEncoder, agent: AgentInfo, f: Any) -> bytes:
    extra = {"duration_us": str(f[10])} if isinstance(f[10], int) else dict(f[10] or {})
    il = None if f[11] is None else Interleave(*f[11])
    ev = TraceEvent(enc.run_id, f[0], f[1], f[2], agent, f[3], f[4], f[5], f[6], f[7], f[8],
                    f[9], extra, il)  # fmt: skip
    return encode_event(ev)


@settings(max_examples=examples(400), deadline=None)
@given(run_id=st.text(min_size=1, max_size=60), agent=AGENTS, fields=FIELDS)
def test_the_c_writes_every_event_as_python_and_fastavro_do(
    run_id: str, agent: AgentInfo, fields: Any
) -> None:
    enc = EventEncoder(run_id, agent)
    ours = _c_only(enc, fields)
    assert ours == enc.encode_fields_python(fields)
    assert ours == _fastavro(enc, agent, fields)
    assert enc.encode_fields(fields) == ours  # what the Recorder binds is that C
    assert isinstance(enc.encode_fields, functools.partial) is not native.disabled()


class _Str(str):
    pass


class _Dict(dict[str, str]):
    pass


_BASE = (7, EventKind.TOOL_CALL, 1_795_950_873_272_582, b"{}", b"null",
         None, None, None, None, None, None, None)  # fmt: skip


def _with(**changes: object) -> tuple[object, ...]:
    names = ["seq", "kind", "at", "request", "response", "model", "seed", "error", "key",
             "parent", "extra", "il"]  # fmt: skip
    return tuple(changes.get(n, v) for n, v in zip(names, _BASE, strict=True))


#: Fields the C must not write itself: each goes to the Python encoder, which gives bytes
#: or raises, and the C path must give the same.
DECLINED = {
    "seq a bool": _with(seq=True),
    "seq past int64": _with(seq=2**63),
    "seq below int64": _with(seq=-(2**63) - 1),
    "seed past int64": _with(seed=2**70),
    "seq a str": _with(seq="7"),
    "kind a plain str": _with(kind="TOOL_CALL"),
    "kind unknown": _with(kind="NOPE"),
    "request a bytearray": _with(request=bytearray(b"{}")),
    "response a memoryview": _with(response=memoryview(b"null")),
    "request a str": _with(request="{}"),
    "model a str subclass": _with(model=_Str("gpt")),
    "model an int": _with(model=5),
    "model a lone surrogate": _with(model="a\ud800b"),
    "key a lone surrogate": _with(key="\udfff"),
    "error another type": _with(error=Interleave(None, 1, 2)),
    "error message an int": _with(error=ErrorInfo("E", 5)),  # type: ignore[arg-type]
    "error type a lone surrogate": _with(error=ErrorInfo("\ud800", "m")),
    "duration a bool": _with(extra=True),
    "duration past int64": _with(extra=2**64),
    "duration huge": _with(extra=10**5000),
    "attributes a dict subclass": _with(extra=_Dict(a="b")),
    "attributes an int value": _with(extra={"a": 1}),
    "attributes a surrogate key": _with(extra={"\ud800": "v"}),
    "attributes a str subclass value": _with(extra={"k": _Str("v")}),
    "attributes a list": _with(extra=[("a", "b")]),
    "interleave a list": _with(il=[None, 1, 2]),
    "interleave too short": _with(il=(None, 1)),
    "interleave past int64": _with(il=(2**63, 1, 2)),
    "interleave a bool": _with(il=(None, False, 2)),
    "fields a list": list(_BASE),
    "fields eleven": _BASE[:11],
    "fields thirteen": (*_BASE, None),
}


def _outcome(fn: Any, fields: object) -> object:
    try:
        return fn(fields)
    except Exception as exc:
        return type(exc)


@pytest.mark.parametrize("name", list(DECLINED))
def test_what_the_c_declines_python_decides(name: str) -> None:
    enc = EventEncoder("run-1", AgentInfo("a", "1", "h", "x", "0"))
    calls: list[object] = []

    def python(fields: Any) -> bytes:
        calls.append(fields)
        return enc.encode_fields_python(fields)

    fields = DECLINED[name]
    ours = _outcome(functools.partial(cwire.encode, enc._prefix, enc._agent_bytes,
                                      (KINDS, ErrorInfo, python)), fields)  # fmt: skip
    assert calls == [fields]
    assert ours == _outcome(enc.encode_fields_python, fields)


@settings(max_examples=examples(300), deadline=None)
@given(prev=st.binary(min_size=32, max_size=32), raw=PAYLOAD)
def test_link_is_the_chain_link(prev: bytes, raw: bytes) -> None:
    want = chain.link(prev, raw)
    assert cwire.link(prev, raw) == want
    assert link_python(prev, raw) == want


def test_link_keeps_the_gil_while_it_hashes() -> None:
    """A thread spinning beside it never runs during a 16 MiB link; it does during hashlib's,
    which gives the GIL up (the release the C exists to avoid, docs/identity.md)."""
    big, prev = b"x" * (16 << 20), hashlib.sha256(b"p").digest()
    count, stop, spinning = [0], threading.Event(), threading.Event()

    def spin() -> None:
        spinning.set()
        while not stop.is_set():
            count[0] += 1

    def ran_during(fn: Any) -> int:
        before = count[0]
        fn()
        return count[0] - before

    old = sys.getswitchinterval()
    sys.setswitchinterval(1.0)  # this thread keeps the GIL for a second unless it gives it up
    spinner = threading.Thread(target=spin)
    spinner.start()
    try:
        assert spinning.wait(30)
        in_c = ran_during(lambda: cwire.link(prev, big))
        in_hashlib = ran_during(lambda: hashlib.sha256(big).digest())
    finally:
        stop.set()
        spinner.join(30)
        sys.setswitchinterval(old)
    assert in_c == 0
    assert in_hashlib > 0  # the probe does see a thread that gives the GIL up


def test_the_attestor_links_with_the_c_as_with_python(monkeypatch: pytest.MonkeyPatch) -> None:
    # the product's attestor links in C where it is built, unless TRACEVAULT_NO_C says not
    assert _attest._link is (link_python if native.disabled() else cwire.link)
    enc = EventEncoder("run-a", AgentInfo("a", "1", "h", "x", "0"))
    signer = Ed25519Signer("agent", hashlib.sha256(b"agent").digest())
    events = [_with(seq=i, request=b"x" * (i * 700)) for i in range(8)]

    def run() -> tuple[list[bytes], bytes]:
        att = Attestor("run-a", enc.encode_fields, signer, every=3, interval_s=1e9)
        return [att.encode_fields(f) for f in events], att._prev  # type: ignore[arg-type]

    c_run = run()
    monkeypatch.setattr(_attest, "_link", link_python)
    assert run() == c_run
    prev = chain.genesis("run-a")
    for raw in c_run[0]:
        prev = chain.link(prev, raw)
    assert c_run[1] == prev


def test_the_duration_shortcut_is_the_ints_decimal_string() -> None:
    enc = EventEncoder("run-d", AgentInfo("a", "1", "h", "x", "0"))
    edges = [2**63 - 1, -(2**63), 2**31, -(2**31), 10**18, -(10**18)]
    for n in [*range(-1000, 1001), *edges]:
        fields = _with(extra=n)
        assert _c_only(enc, fields) == enc.encode_fields_python(fields), n
