"""The sequencer's C path (``_cseal.c``) does exactly what the Python rules do, or leaves it.

``take`` never decides that something is wrong: it seals the common raw event exactly as
``RunBook._apply`` then ``_seal`` would, or stops and hands the message to the rules. These
tests pin each piece to its Python original: the chain link to ``chain.link`` (OpenSSL's
SHA-256), the walk to ``peek_event`` over generated, non-canonical and corrupted values,
the JSON subset to ``check_canonical`` (C True must mean canonical, and ordinary canonical
payloads must be True so the fast path is used), ``take`` to the rules over whole batches of
real ``confluent_kafka.Message`` objects mixing every case the rules meet, and ``values`` to
``sealed_v1``/``encode_sealed`` and ``leaf_hash``.

A build that lost its C path fails here, loudly (tests/native.py).
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import random
from typing import Any

import pytest
from confluent_kafka import KafkaError, Message
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import NOW_US
from tests.faults.hostile import event_value
from tests.native import examples, extension
from tests.schemas import fast_values as fv
from tests.services.sequencer.support import AGENT
from tracevault.chain import genesis, link
from tracevault.config import Settings
from tracevault.errors import NonCanonicalJSONError, PayloadError
from tracevault.heads import GapRange, Head, HeldEvent
from tracevault.kafka import partition_for
from tracevault.schemas import (
    EventKind,
    SealedEvent,
    TraceEvent,
    avro_long,
    canonical_json,
    check_canonical,
    encode_event,
    encode_sealed,
)
from tracevault.schemas.fast import armed_walks, peek_event
from tracevault.services.sequencer import BatchOutput, DlqReason, RunBook, _encode, _step
from tracevault.services.sequencer._loop import Sequencer
from tracevault.services.sequencer._records import avro_str, sealed_v1, sealed_v1_header
from tracevault.services.sequencer._rules import MAX_RAW_BYTES, SealOut, _Run
from tracevault.transparency import Ed25519Signer, leaf_hash

_cseal = extension("tracevault.services.sequencer._cseal")

SETTINGS = settings(
    max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)

_WALKS = armed_walks()
assert _WALKS is not None, "the fast walks are off: the C path would never run"
TRACE, KINDS = _WALKS[1], _WALKS[2]


# -- link ------------------------------------------------------------------------------------


@given(prev=st.binary(min_size=32, max_size=32), raw=st.binary(max_size=2000))
@SETTINGS
def test_link_is_chain_link(prev: bytes, raw: bytes) -> None:
    assert _cseal.link(prev, raw) == link(prev, raw)


def test_link_at_every_padding_boundary_and_the_leaf_hash_of_values() -> None:
    """Raw lengths 0..300 (with the 52-byte domain and previous hash in front: every way the
    padding can fall over 1 to 6 blocks), and a log leaf hash made by ``values``."""
    rng = random.Random(7)
    for n in range(301):
        p, d = rng.randbytes(32), rng.randbytes(n)
        assert _cseal.link(p, d) == link(p, d), n
    run = _Run(Head.new("r" * 40, 0))
    h = rng.randbytes(32)
    rec = SealOut(run, 5, bytes(32), h, b"x", 0, 1)
    _, leaves = _cseal.values(
        [rec], b"\x00", b"\x00", lambda r: (b"", b""), lambda r: b"\x00" + bytes(60)
    )
    want = hashlib.sha256(b"\x00" + bytes(60) + (5).to_bytes(8, "big") + h).digest()
    assert leaves == {0: [want]}


def test_link_refuses_a_previous_hash_that_is_not_32_bytes() -> None:
    with pytest.raises(ValueError, match="32 bytes"):
        _cseal.link(bytes(31), b"x")


# -- peek --------------------------------------------------------------------------------------


def _python_peek(value: bytes) -> tuple[str, int, int, bytes, bytes] | None:
    p = peek_event(value)
    return None if p is None else (p.run_id, p.seq, KINDS.index(p.kind), p.request, p.response)


def _c_peek(value: bytes) -> tuple[str, int, int, bytes, bytes] | None:
    return _cseal.peek(value, TRACE, len(KINDS))


@SETTINGS
@given(event=fv.events)
def test_peek_reads_canonical_values_as_peek_event(event: dict[str, Any]) -> None:
    value = fv.canonical("TraceEvent", event)
    want = _python_peek(value)
    assert want is not None
    assert _c_peek(value) == want


@SETTINGS
@given(event=fv.events, seed=st.integers(0, 2**32), pad=st.booleans())
def test_peek_reads_non_canonical_encodings_as_peek_event(
    event: dict[str, Any], seed: int, pad: bool
) -> None:
    """Maps in (negative-count) blocks, and non-minimal varints: valid Avro either way. The
    walks read blocks of every kind; a padded varint where a one-byte one is read inline (a
    union branch, the kind) makes both decline."""
    value = TRACE + fv.Writer(random.Random(seed), pad=0.3 if pad else 0.0).event(event)
    want = _python_peek(value)
    assert pad or want is not None
    assert _c_peek(value) == want


@SETTINGS
@given(event=fv.events, seed=st.integers(0, 2**32), cut=st.integers(1, 400))
def test_peek_reads_corrupted_values_as_peek_event(
    event: dict[str, Any], seed: int, cut: int
) -> None:
    rng = random.Random(seed)
    value = bytearray(fv.canonical("TraceEvent", event))
    for _ in range(rng.randrange(1, 4)):
        i = rng.randrange(0, len(value))
        r = rng.random()
        if r < 0.4:
            value[i] ^= 1 << rng.randrange(8)
        elif r < 0.6:
            del value[len(value) - min(cut, len(value) - 1) :]
        elif r < 0.8:
            value[i:i] = bytes([rng.choice([0, 1, 2, 0x7F, 0x80, 0xFF])])
        else:  # past the end: a whole value, then more
            value += bytes([rng.choice([0, 2, 0x80])]) * rng.randrange(1, 3)
    assert _c_peek(bytes(value)) == _python_peek(bytes(value))


_MARK = "@@mark@@"
_NOT_UTF8 = [b"\xff" * 8, b"ab\xc3cdefg", b"\xed\xa0\x80xxxxx", b"\xc0\xafxxxxxx",
             b"\xf4\x90\x80\x80xxxx", b"xxxxxxx\xe2"]  # fmt: skip
_STRING_FIELDS = ["run_id", "agent_id", "sdk_version", "model", "error.type", "error.message",
                  "idempotency_key", "attribute key", "attribute value"]  # fmt: skip


@SETTINGS
@given(
    event=fv.events,
    where=st.sampled_from(_STRING_FIELDS),
    bad=st.sampled_from(_NOT_UTF8),
    seed=st.integers(0, 2**32),
)
def test_peek_declines_a_string_field_that_is_not_utf8_as_peek_event(
    event: dict[str, Any], where: str, bad: bytes, seed: int
) -> None:
    """Every string field is UTF-8-checked (the run id is the Kafka key; a bad one would fail
    the decode in ``take``): a field holding invalid bytes is declined by both walks."""
    ev = {**event, "agent": dict(event["agent"]), "attributes": dict(event["attributes"])}
    if where in ("agent_id", "sdk_version"):
        ev["agent"][where] = _MARK
    elif where.startswith("error."):
        ev["error"] = {"type": "t", "message": "m", where[6:]: _MARK}
    elif where == "attribute key":
        ev["attributes"][_MARK] = "v"
    elif where == "attribute value":
        ev["attributes"]["k"] = _MARK
    else:
        ev[where] = _MARK
    value = TRACE + fv.Writer(random.Random(seed), pad=0.0).event(ev)
    assert value.count(_MARK.encode()) == 1
    value = value.replace(_MARK.encode(), bad)
    assert _python_peek(value) is None
    assert _c_peek(value) is None


def test_peek_reads_attributes_in_every_kind_of_block() -> None:
    """Deterministic, beside the generated cases: blocks of one, of several, negative counts
    followed by their byte sizes."""
    ev = {**_event_dict("r", 3), "attributes": {"a": "b", "cc": "dd", "é": "f"}}
    for seed in range(20):
        value = TRACE + fv.Writer(random.Random(seed), pad=0.0, split=1.0).event(ev)
        want = _python_peek(value)
        assert want is not None and _c_peek(value) == want, seed


def test_peek_declines_bytes_after_a_whole_value() -> None:
    value = fv.canonical("TraceEvent", _event_dict("r", 3))
    assert _c_peek(value) is not None
    for tail in (b"\x00", b"\x02", b"\x00" * 5):
        assert _c_peek(value + tail) is None and _python_peek(value + tail) is None


@SETTINGS
@given(tail=st.binary(max_size=200))
def test_peek_reads_arbitrary_bytes_after_the_header_as_peek_event(tail: bytes) -> None:
    value = TRACE + tail
    assert _c_peek(value) == _python_peek(value)


def test_peek_declines_other_headers_and_kinds_past_nkinds() -> None:
    value = fv.canonical("TraceEvent", {**_event_dict("r", 3), "kind": "GAP"})
    want = _python_peek(value)
    assert want is not None and _c_peek(value) == want
    assert _cseal.peek(value, TRACE, KINDS.index(EventKind.GAP)) is None
    v1 = event_value("r", 0, version=1)  # TraceEvent v1: another header
    assert _c_peek(v1) is None and _python_peek(v1) is None
    assert _c_peek(TRACE) is None and _c_peek(b"") is None
    with pytest.raises(ValueError, match="10 bytes"):
        _cseal.peek(value, TRACE[:9], len(KINDS))


def _event_dict(run_id: str, seq: int) -> dict[str, Any]:
    agent = dict.fromkeys(("agent_id", "agent_version", "host", "harness", "sdk_version"), "a")
    return {
        "run_id": run_id, "seq": seq, "kind": "TOOL_CALL", "at": NOW_US, "agent": agent,
        "model": None, "seed": None, "request": b"{}", "response": b"null", "error": None,
        "idempotency_key": None, "parent_seq": None, "attributes": {}, "interleave": None,
    }  # fmt: skip


# -- canonical ---------------------------------------------------------------------------------

_ODD_TEXT = [
    "", "a", "é", "\u00e9t\u00e9", "😀", "a😀", "\x7f", '"', "\\", "/", "\n", "\t", "\b", "\f",
    "\r", "\x00", "\x01", "\x1f", "\u2028", "\ud7ff", "\ue000", "\uffff", "\U0010ffff", "z",
    "Z", "aa", "ab", "a\x7f",
]  # fmt: skip
_keys = st.one_of(st.text(max_size=6), st.sampled_from(_ODD_TEXT))
_strings = st.one_of(
    st.text(max_size=20),
    st.sampled_from(_ODD_TEXT),
    st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x7F), max_size=12),
)
_INT_EDGES = [0, -1, 1, 10**15 - 1, -(10**15 - 1), 10**15, -(10**15), 2**53, 2**53 + 1,
              -(2**53), -(2**53) - 1, 2**63, 10**20]  # fmt: skip
_ints = st.one_of(
    st.sampled_from(_INT_EDGES),
    st.integers(-(2**53) - 5, 2**53 + 5),
    st.integers(-(10**22), 10**22),
    st.integers(-1000, 1000),
)
_scalars = st.one_of(
    st.none(), st.booleans(), _ints, st.floats(allow_nan=False, allow_infinity=False), _strings
)
json_values = st.recursive(
    _scalars,
    lambda c: st.lists(c, max_size=4) | st.dictionaries(_keys, c, max_size=5),
    max_leaves=25,
)


def _in_subset(v: Any, depth: int = 0) -> bool:
    """Whether ``canonical_json(v)`` is in the C subset (``_cseal.c``'s header comment): no
    float, integers of at most 15 digits, strings whose only escapes are the short ones, keys
    with no escape and nothing past U+FFFF, at most 64 containers deep."""
    if v is None or isinstance(v, bool):
        return True
    if isinstance(v, int):
        return abs(v) < 10**15
    if isinstance(v, str):
        return all(ch >= " " or ch in "\b\t\n\f\r" for ch in v)
    if isinstance(v, list):
        return depth < 64 and all(_in_subset(x, depth + 1) for x in v)
    if isinstance(v, dict):
        return depth < 64 and all(
            all(" " <= ch <= "\uffff" and ch not in '"\\' for ch in k) and _in_subset(x, depth + 1)
            for k, x in v.items()
        )
    return False  # floats


def _assert_c_true_is_canonical(data: bytes) -> bool:
    """The invariant: C True means check_canonical accepts. Returns C's answer."""
    ok = _cseal.canonical(data)
    if ok:
        check_canonical(data)  # raises NonCanonicalJSONError if C was wrong
    return ok


def _encodings(v: Any) -> list[bytes]:
    out = []
    with contextlib.suppress(PayloadError):  # not every value has an RFC 8785 form
        out.append(canonical_json(v))
    for kw in (
        {"sort_keys": True, "separators": (",", ":"), "ensure_ascii": False},  # legacy form
        {"sort_keys": True, "separators": (",", ":"), "ensure_ascii": True},
        {"sort_keys": False, "separators": (",", ":"), "ensure_ascii": False},
        {"sort_keys": True},  # white space after , and :
        {"sort_keys": True, "indent": 1, "ensure_ascii": False},
    ):
        out.append(json.dumps(v, **kw).encode("utf-8"))  # type: ignore[arg-type]
    return out


@SETTINGS
@given(v=json_values)
def test_canonical_true_only_where_check_canonical_accepts(v: Any) -> None:
    for data in _encodings(v):
        _assert_c_true_is_canonical(data)
    if _in_subset(v):  # and the fast path is really used for what it covers
        assert _cseal.canonical(canonical_json(v)), canonical_json(v)


_JUNK = [b" ", b",", b":", b'"', b"\\", b"0", b"-", b".", b"e", b"{", b"}", b"[", b"]",
         b"\x7f", b"\xff", b"\xed\xa0\x80", b"\xc3", b"\\u00e9", b"\\/", b"1", b"n",
         b"\x00", b"\x01", b"\n", b"\x1f", b"\t"]  # fmt: skip


@SETTINGS
@given(v=json_values, rng=st.randoms(use_true_random=False))
def test_canonical_true_only_where_check_canonical_accepts_mutated_bytes(
    v: Any, rng: random.Random
) -> None:
    for base in _encodings(v)[:2]:
        data = bytearray(base)
        for _ in range(rng.randrange(1, 4)):
            i = rng.randrange(0, len(data) + 1)
            r = rng.random()
            if r < 0.3 and data:
                data[min(i, len(data) - 1)] ^= 1 << rng.randrange(8)
            elif r < 0.6:
                data[i:i] = rng.choice(_JUNK)
            elif r < 0.8:
                del data[i : i + rng.randrange(1, 4)]
            else:
                j = rng.randrange(0, len(data) + 1)
                data[i:i] = data[min(i, j) : max(i, j)]  # a repeated piece (duplicate keys)
        _assert_c_true_is_canonical(bytes(data))


@SETTINGS
@given(v=st.dictionaries(_keys, _scalars, min_size=1, max_size=5), pick=st.integers(0, 4))
def test_canonical_never_takes_a_repeated_key(v: dict[str, Any], pick: int) -> None:
    """An object whose members are canonical and in order, one of them twice in a row."""
    try:
        members = [
            canonical_json(k) + b":" + canonical_json(v[k])
            for k in sorted(v, key=lambda k: k.encode("utf-16-be"))
        ]
    except PayloadError:
        return
    i = pick % len(members)
    data = b"{" + b",".join(members[: i + 1] + members[i:]) + b"}"
    assert _cseal.canonical(data) is False
    with pytest.raises(NonCanonicalJSONError):
        check_canonical(data)


@SETTINGS
@given(data=st.text(alphabet='{}[],:"\\0123456789-.eEtrufalsnbu/ \x7f\x01\n\x1fé😀', max_size=30))
def test_canonical_true_only_where_check_canonical_accepts_json_like_text(data: str) -> None:
    _assert_c_true_is_canonical(data.encode("utf-8"))


@pytest.mark.parametrize(
    "value",
    [
        {"tool": "search", "args": {"q": "x", "k": 5}},
        [[1, [2, [3, []]]], {}, [], None, True, False],
        {"text": 'line 1\nline "2"\t\\ end\b\f\r'},
        {"name": "café ✓ Ω", "aé": "naïve", "z": -999_999_999_999_999},
        {"a": "😀 past U+FFFF is fine in a value", "b": ["😀"]},
        "a string with 😀 and \x7f in it",
        {"a": 1, "aa": 2, "ab": 3, "b": 4, "é": 5, "\uffff": 6},
        0,
        -5,
        None,
    ],
)
def test_canonical_takes_ordinary_payloads(value: Any) -> None:
    data = canonical_json(value)
    assert _cseal.canonical(data) is True, data
    check_canonical(data)


@pytest.mark.parametrize(
    "data",
    [
        b'{"a":1,"a":1}',  # duplicate keys
        b'{"b":1,"a":2}',  # unsorted keys
        b"-0",
        b"[-0]",
        b"01",
        b"[-01]",
        b"1234567890123456",  # 16 digits: left to Python (a double may not hold it)
        b"1.5",
        b"1e3",
        b"[1E3]",
        b'"\\u00e9"',
        b'"\\/"',
        b'{"a": 1}',
        b" 1",
        b"1 ",
        b"[1, 2]",
        b"{}x",
        b"[]]",
        b"",
        b"[1,]",
        b'{"a":1,}',
        b"[,1]",
        b"tru",
        b"nul",
        b"truex",
        b'"\xff"',  # invalid UTF-8
        b'"\xc3"',  # truncated sequence
        b'"\xc0\xaf"',  # overlong
        b'"\xed\xa0\x80"',  # a surrogate, UTF-8 encoded
        b'"\xf4\x90\x80\x80"',  # past U+10FFFF
        b'{"\xf0\x9f\x98\x80":1}',  # an astral key: byte order is not UTF-16 order
        b'{"\\n":1}',  # an escape in a key
        b'"a\x01"',  # a raw control character
        b'"\x1f"',
        b'"open',
        b"\xef\xbb\xbf1",  # a byte order mark
        b"[" * 65 + b"]" * 65,  # 65 containers deep
        b'{"a":' * 65 + b"1" + b"}" * 65,
        b"+1",
        b"NaN",
    ],
)
def test_canonical_leaves_these_to_python(data: bytes) -> None:
    assert _cseal.canonical(data) is False


@pytest.mark.parametrize(
    "data",
    [
        b"[" * 64 + b"]" * 64,
        b'{"a":' * 64 + b"1" + b"}" * 64,
        b"999999999999999",
        b"-999999999999999",
        b'"\xf0\x9f\x98\x80"',
        b'{"a":1,"ab":2,"b":3}',
        b'{"":0}',
    ],
)
def test_canonical_takes_these(data: bytes) -> None:
    assert _cseal.canonical(data) is True
    check_canonical(data)


def test_check_canonical_agrees_with_the_explicit_refusals_that_are_non_canonical() -> None:
    """Not vacuous: the byte strings C refuses above are mostly refused by Python too."""
    for data in (b'{"a":1,"a":1}', b'{"b":1,"a":2}', b"-0", b"01", b'{"a": 1}', b"{}x", b""):
        with pytest.raises(NonCanonicalJSONError):
            check_canonical(data)


# -- take: whole batches of real messages ------------------------------------------------------

PARTS = 3
RAW_TOPIC = "cseal.raw"
SIGNER = Ed25519Signer.generate("test-cseal")
NOW = NOW_US + 1_000_000


def _ev(
    run_id: str,
    seq: int,
    *,
    kind: EventKind = EventKind.TOOL_CALL,
    request: bytes | None = None,
    response: bytes = b"null",
) -> bytes:
    if request is None:
        request = canonical_json({"tool": "search", "args": {"q": f"{run_id}/{seq}", "k": 5}})
    return encode_event(
        TraceEvent(run_id, seq, kind, NOW_US + seq, AGENT, request=request, response=response)
    )


def _chain(run_id: str, n: int) -> tuple[list[bytes], list[bytes]]:
    raws = [_ev(run_id, s, kind=EventKind.RUN_STARTED if s == 0 else EventKind.TOOL_CALL)
            for s in range(n)]  # fmt: skip
    hashes, prev = [], genesis(run_id)
    for raw in raws:
        prev = link(prev, raw)
        hashes.append(prev)
    return raws, hashes


A_RAWS, A_HASHES = _chain("run-a", 3)  # sealed before this batch: restored from its head
B_RAWS, B_HASHES = _chain("run-b", 2)
# a run opened before the run-id grammar (non-ASCII): restored, it goes on, by C too
E_RAWS, E_HASHES = _chain("run-é", 1)


def _heads() -> list[Head]:
    pa, pb = partition_for("run-a", PARTS), partition_for("run-b", PARTS)
    pe = partition_for("run-é", PARTS)
    held = HeldEvent(3, _ev("run-b", 3), pb, 90, NOW_US)
    return [
        Head("run-a", 3, A_HASHES[-1], False, pa, 10, 12, updated_at=NOW_US - 5),
        Head("run-b", 2, B_HASHES[-1], False, pb, 20, 21, held=(held,), updated_at=NOW_US - 7),
        Head("run-é", 1, E_HASHES[-1], False, pe, 30, 30, updated_at=NOW_US - 9),
    ]


def _history(run_id: str, partition: int, first: int, last: int) -> dict[int, bytes]:
    hashes = {"run-a": A_HASHES, "run-b": B_HASHES, "run-é": E_HASHES}[run_id]
    return dict(enumerate(hashes))


def _book() -> RunBook:
    book = RunBook(
        raw_topic=RAW_TOPIC,
        partitions=PARTS,
        sequencer_id="cseal",
        gap_timeout_us=10**12,
        max_gap=100,
        history=_history,
    )
    book.restore(_heads())
    return book


def _sequencer(*, native: bool) -> Sequencer:
    s = Sequencer(
        Settings(topic_prefix="cseal", partitions=PARTS), signer=SIGNER, instance_id="cseal-1"
    )
    s.step.book = _book()
    if native:
        assert s.step.native is not None, "the sequencer does not use its C path"
    else:
        s.step.native = None
    return s


def _batch() -> tuple[list[Message], set[int]]:
    """A consumed batch over all partitions mixing every case the rules meet, and the offsets
    of the messages that are the common case (the ones ``take`` must seal itself)."""
    msgs: list[Message] = []
    common: set[int] = set()

    def msg(run: str, value: bytes | None, *, key: bytes | None = b"<run>",
            part: int | None = None, ok: bool = False, **kw: Any) -> None:  # fmt: skip
        if ok:
            common.add(len(msgs))
        msgs.append(
            Message(
                topic=RAW_TOPIC,
                partition=partition_for(run, PARTS) if part is None else part,
                offset=len(msgs),
                key=run.encode() if key == b"<run>" else key,
                value=value,
                **kw,
            )
        )

    fin = EventKind.RUN_FINISHED
    msg("run-a", _ev("run-a", 3), ok=True)  # restored run, its next seq
    msg("run-a", _ev("run-a", 4), ok=True)
    msg("run-c", _ev("run-c", 0, kind=EventKind.RUN_STARTED))  # a new run: the rules
    msg("run-c", _ev("run-c", 1), ok=True)  # ... then C
    msg("..", _ev("..", 0, kind=EventKind.RUN_STARTED))  # outside the run-id grammar: DLQ
    msg("run-c", _ev("run-c", 2), ok=True)
    msg("..", _ev("..", 1))  # ... every record of it: C only continues runs in the book
    msg("run-é", _ev("run-é", 1, response='{"ok":"naïve \\"q\\"\\n"}'.encode()), ok=True)
    msg("run-a", _ev("run-a", 4))  # a duplicate (sealed in this batch)
    msg("run-a", _ev("run-a", 1, request=b'{"changed":1}'))  # a conflict (reads history)
    msg("run-a", A_RAWS[0])  # an old duplicate (history already read)
    msg("run-c", _ev("run-c", 4))  # out of order: held
    msg("run-c", _ev("run-c", 5))  # held too
    msg("run-c", _ev("run-c", 3))  # the missing seq: the rules seal it and drain 4, 5
    msg("run-c", _ev("run-c", 6), ok=True)  # nothing held any more: C again
    msg("run-b", _ev("run-b", 2))  # restored with seq 3 held: the rules seal 2 and drain 3
    msg("run-b", _ev("run-b", 4), ok=True)
    msg("run-c", _ev("run-c", 7, kind=fin, request=b"{}"))  # RUN_FINISHED: the rules
    msg("run-c", _ev("run-c", 8))  # after finish
    msg("run-a", _ev("run-a", 5, kind=EventKind.GAP))  # a GAP from a producer
    msg("run-a", _ev("run-a", 5), key=b"run-b")  # key is not the run id
    msg("run-a", _ev("run-a", 5), key=None)  # no key
    msg("run-a", _ev("run-a", 5), part=(partition_for("run-a", PARTS) + 1) % PARTS)
    msg("run-a", _ev("run-a", 5, request=b'{"b":1,"a":2}'))  # JSON, not canonical
    msg("run-a", _ev("run-a", 5, response=b'{"a": 1}'))
    msg("run-a", None)  # a tombstone
    msg("run-a", _ev("run-a", 5)[:-3])  # truncated
    msg("run-a", None, error=KafkaError(KafkaError._PARTITION_EOF))  # an error, not a record
    msg("run-a", _ev("run-a", -1))  # a negative seq
    big = _ev("run-a", 5, request=canonical_json("x" * MAX_RAW_BYTES))
    assert len(big) > MAX_RAW_BYTES
    msg("run-a", big)  # too large to seal
    msg("run-a", _ev("run-a", 5, request=b'{"x":1.5}'))  # canonical, outside the C subset
    msg("run-a", _ev("run-a", 6, request=b"1234567890123456"))  # 16 digits: the rules too
    msg("run-a", event_value("run-a", 7, version=1))  # TraceEvent v1: the rules read older schemas
    msg("run-a", _ev("run-a", 8), ok=True)  # and C takes the run back
    msg("run-a", _ev("run-a", 10))  # held
    msg("run-a", _ev("run-a", 9))  # fills it
    msg("run-é", _ev("run-é", 2), ok=True)
    msg("run-a", _ev("run-a", 11), ok=True)
    msg("run-d", _ev("run-d", 1))  # a new run that starts past seq 0: held
    msg("run-é", _ev("run-é", 3, kind=fin, response=b'{"output":"done"}'))
    return msgs, common


def _runs(book: RunBook) -> dict[str, dict[str, Any]]:
    """Every field of every run (copies of the mutable ones)."""
    return {
        rid: {name: copy.copy(getattr(run, name)) for name in _Run.__slots__}
        for rid, run in book.runs.items()
    }


def _out(book: RunBook, out: BatchOutput) -> tuple[Any, ...]:
    for rec in out.sealed:  # every record names its own book's run, and is a SealOut
        assert type(rec) is SealOut
        assert rec.run is book.runs[rec.run.run_id]
    for rid, run in out.touched.items():
        assert run is book.runs[rid]
    return (
        [(rec.run.run_id, *rec[1:]) for rec in out.sealed],
        list(out.dlq),
        list(out.touched),
        list(out.finished),
        out.duplicates,
        out.gap_markers,
        list(out.expired),
        out.closed_idle,
    )


def _apply(s: Sequencer, msgs: list[Message], split: int) -> list[tuple[Any, ...]]:
    book = s.step.book
    assert book is not None
    outs = []
    for n, i in enumerate(range(0, len(msgs), split)):
        out = BatchOutput()
        consumed = s.step.apply_all(msgs[i : i + split], out, NOW + n)
        outs.append((consumed, _out(book, out)))
    return outs


@pytest.mark.parametrize("split", [1, 3, 7, 1000])
def test_a_batch_leaves_the_same_book_and_output_by_either_path(split: int) -> None:
    msgs, _common = _batch()
    native, python = _sequencer(native=True), _sequencer(native=False)
    got, want = _apply(native, msgs, split), _apply(python, msgs, split)
    assert got == want
    assert native.step.book is not None and python.step.book is not None
    assert _runs(native.step.book) == _runs(python.step.book)
    assert native.step.book._waiting == python.step.book._waiting
    # what the batch holds was really exercised
    dlq = [d for _consumed, out in want for d in out[1]]
    reasons = sorted(d.reason.value for d in dlq)
    assert reasons == sorted(
        [DlqReason.CONFLICT] + [DlqReason.AFTER_FINISH] + [DlqReason.UNDECODABLE] * 2
        + [DlqReason.INVALID] * 10
    )  # fmt: skip
    assert sum(out[4] for _consumed, out in want) == 2  # the two duplicates
    assert sum(consumed for consumed, _out in want) == len(msgs) - 1  # all but the error
    book = python.step.book
    assert (book.runs["run-a"].next_seq, book.runs["run-b"].next_seq) == (12, 5)
    assert book.runs["run-c"].finished and book.runs["run-é"].finished
    assert book.runs["run-d"].held.keys() == {1}


def test_only_what_is_not_the_common_case_reaches_the_rules(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Not vacuous: the C path seals the common case itself (a build whose ``take`` declines
    everything fails here), and hands everything else to ``RunBook.apply``."""
    msgs, common = _batch()
    s = _sequencer(native=True)
    book = s.step.book
    assert book is not None
    seen: list[int] = []
    apply = book.apply

    def counted(  # noqa: PLR0917 - RunBook.apply's signature
        out: BatchOutput, key: Any, value: Any, part: int, offset: int, now: int
    ) -> None:
        seen.append(offset)
        apply(out, key, value, part, offset, now)

    monkeypatch.setattr(book, "apply", counted)
    out = BatchOutput()
    s.step.apply_all(msgs, out, NOW)
    rest = {m.offset() for m in msgs if m.error() is None} - common
    assert sorted(seen) == sorted(rest)
    assert len(common) == 10
    sealed_by_c = {rec.source_offset for rec in out.sealed} & common
    assert sealed_by_c == common


def test_take_stops_at_the_first_message_it_leaves() -> None:
    msgs, _ = _batch()
    s = _sequencer(native=True)
    book = s.step.book
    assert book is not None and s.step.native is not None
    out = BatchOutput()
    ctx = (book.runs, out.sealed, out.touched, NOW, *s.step.native)
    assert _cseal.take(msgs, 0, ctx) == 2  # run-a 3 and 4, then run-c's first event
    assert [(r.run.run_id, r.seq) for r in out.sealed] == [("run-a", 3), ("run-a", 4)]
    assert out.sealed[1].prev_hash == out.sealed[0].hash == link(A_HASHES[-1], msgs[0].value())
    assert book.runs["run-a"].seen_us == NOW and list(out.touched) == ["run-a"]
    assert _cseal.take(msgs, 2, ctx) == 2  # declines without changing anything
    assert len(out.sealed) == 2
    assert _cseal.take(msgs, len(msgs), ctx) == len(msgs)


# -- values: the batch's sealed values and leaf hashes ----------------------------------------


def _reference(
    out: BatchOutput, sealed_at: int, sid: str
) -> tuple[list[bytes], dict[int, list[bytes]]]:
    """What the codec and the log define, independent of either fast encoder."""
    values = [
        encode_sealed(SealedEvent(rec.run.run_id, *rec[1:5], sealed_at, *rec[5:], sid))
        for rec in out.sealed
    ]
    leaves: dict[int, list[bytes]] = {}
    for rec in out.sealed:
        leaves.setdefault(rec.run.partition, []).append(
            leaf_hash(rec.run.run_id, rec.seq, rec.hash)
        )
    return values, leaves


def _applied_both() -> tuple[Sequencer, Sequencer, BatchOutput, BatchOutput]:
    """The mixed batch through the C path and through the Python rules, on like sequencers."""
    msgs, _ = _batch()
    native, python = _sequencer(native=True), _sequencer(native=False)
    c_out, py_out = BatchOutput(), BatchOutput()
    native.step.apply_all(msgs, c_out, NOW)
    python.step.apply_all(msgs, py_out, NOW)
    return native, python, c_out, py_out


def test_encode_gives_the_same_bytes_with_and_without_c(monkeypatch: pytest.MonkeyPatch) -> None:
    native, python, c_out, py_out = _applied_both()
    assert all(r.run.enc is None and r.run.leaf is None for r in c_out.sealed)
    sealed_at = NOW_US + 77
    calls = []
    values = _cseal.values
    monkeypatch.setattr(_cseal, "values", lambda *a: (calls.append(1), values(*a))[1])
    got = native.step._encode(c_out, sealed_at)
    assert calls, "the C encoder was not used"
    monkeypatch.setattr(_step, "_cseal", None)
    want = python.step._encode(py_out, sealed_at)
    assert got == want == _reference(py_out, sealed_at, "cseal-1")
    assert len(got[0]) == len(c_out.sealed) > 20 and len(got[1]) == PARTS
    # the fill callables ran, and their results are cached on each run as Python caches them
    for c_rec, py_rec in zip(c_out.sealed, py_out.sealed, strict=True):
        assert c_rec.run.enc == py_rec.run.enc is not None
        assert c_rec.run.leaf == py_rec.run.leaf is not None
    monkeypatch.setattr(_step, "_cseal", _cseal)
    assert native.step._encode(c_out, sealed_at) == want  # again, from the caches


def _records(run_ids: list[str], rng: random.Random) -> BatchOutput:
    out = BatchOutput()
    runs = {rid: _Run(Head.new(rid, i % 2)) for i, rid in enumerate(run_ids)}
    for i in range(12):
        rid = run_ids[i % len(run_ids)]
        raw = rng.randbytes(70_000 if i == 3 else rng.randrange(0, 300))  # one over 64 KiB
        seq = [0, 1, 127, 128, 2**40, 2**63 - 1][i % 6]
        src_off = -1 if i == 5 else rng.randrange(0, 2**62)  # -1: a GAP marker's
        out.sealed.append(SealOut(runs[rid], seq, rng.randbytes(32), rng.randbytes(32), raw,
                                  rng.randrange(-(2**31), 2**31), src_off))  # fmt: skip
    return out


@SETTINGS
@given(
    run_ids=st.lists(fv.texts, min_size=1, max_size=4, unique=True),
    seed=st.integers(0, 2**32),
    sealed_at=fv.micros,
    sid=fv.texts,
)
def test_values_is_sealed_v1_and_leaf_hash(
    run_ids: list[str], seed: int, sealed_at: int, sid: str
) -> None:
    out = _records(run_ids, random.Random(seed))
    header = sealed_v1_header()
    assert header is not None
    at, sid_enc = avro_long(sealed_at), avro_str(sid)
    filled: list[str] = []

    def run_enc(run: Any) -> tuple[bytes, bytes]:
        filled.append(run.run_id)
        run.enc = (header + avro_str(run.run_id), b"")
        return run.enc  # type: ignore[no-any-return]

    def run_leaf(run: Any) -> bytes:
        return _encode.run_leaf(run)

    values, leaves = _cseal.values(out.sealed, at, sid_enc, run_enc, run_leaf)
    assert sorted(filled) == sorted(set(filled)) == sorted({r.run.run_id for r in out.sealed})
    want = [
        sealed_v1(rec.run.enc[0], *rec[1:5], at, *rec[5:], sid_enc)  # type: ignore[index]
        for rec in out.sealed
    ]
    assert values == want
    assert (values, leaves) == _reference(out, sealed_at, sid)


def test_a_record_values_does_not_take_falls_back_to_python(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    s = _sequencer(native=True)
    out = _records(["run-x", "run-y"], random.Random(3))
    bad = out.sealed[4]
    out.sealed[4] = bad._replace(hash=bad.hash[:31])
    with pytest.raises(ValueError, match="32 bytes"):
        _cseal.values(out.sealed, b"\x00", b"\x00", lambda r: (b"", b""), lambda r: b"")
    got = s.step._encode(out, NOW_US)
    monkeypatch.setattr(_step, "_cseal", None)
    assert got == s.step._encode(out, NOW_US)
    assert got[0][4].count(bad.hash[:31]) == 1  # written as given, as Python writes it


# -- heads -----------------------------------------------------------------------------------


def test_heads_gives_the_same_bytes_as_python_and_leaves_other_shapes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After a whole mixed batch (plain runs, one with an event held, finished runs), the C
    heads equal Python's ``plain_head_value`` for every plain run and the codec's
    ``encode_head``, and both sides leave every other shape (None) to the codec."""
    from tracevault.heads._record import encode_head

    native, python, c_out, py_out = _applied_both()
    c_runs, py_runs = list(c_out.touched.values()), list(py_out.touched.values())
    # restored runs: plain ones across varint widths, and one whose last hash is not 32
    # bytes (it takes the codec)
    for runs in (c_runs, py_runs):
        for i, seq in enumerate((1, 64, 8192, 2**40)):
            runs.append(_Run(Head(f"plain-{i}", seq, bytes([i]) * 32, False, i % 2, 0, 1)))
        runs.append(_Run(Head("odd", 4, b"\x01" * 31, False, 0, 1, 2, updated_at=NOW_US - 3)))
        gap = GapRange(1, 2)
        runs.append(_Run(Head("gapped", 5, b"\x02" * 32, False, 1, 1, 9, gaps=(gap,))))
    for runs in (c_runs, py_runs):
        for run in runs:
            run.first_offset, run.last_offset = 7, 2**40 + len(run.run_id)
    suffix = avro_long(NOW_US) + avro_str("cseal-1")
    calls = []
    heads = _cseal.heads
    monkeypatch.setattr(_cseal, "heads", lambda *a: (calls.append(1), heads(*a))[1])
    got = native.step._heads(c_runs, suffix)
    assert calls, "the C heads were not used"
    monkeypatch.setattr(_step, "_cseal", None)
    want = python.step._heads(py_runs, suffix)
    assert got == want
    plain = [r for r, v in zip(c_runs, got, strict=True) if v is not None]
    other = [r for r, v in zip(c_runs, got, strict=True) if v is None]
    assert len(plain) >= 6, "too few plain heads: the test does not reach the C writer"
    assert {r.run_id for r in other} >= {"odd", "gapped"}
    for r in other:
        assert r.finished or r.gaps or r.held or len(r.last_hash) != 32
    for r, v in zip(c_runs, got, strict=True):
        if v is not None:  # the plain layout is the codec's own for that head
            assert v == encode_head(r.to_head(NOW_US, "cseal-1"))
    for c_run, py_run in zip(c_runs, py_runs, strict=True):
        assert c_run.enc == py_run.enc  # the fill ran and cached as Python caches
