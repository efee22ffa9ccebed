"""Hostile calls of every C entry point, each in a forked child: what each one did.

``python -m tests.native_calls`` prints one JSON object, case name -> outcome: the name of the
exception the call raised, ``ok <repr>`` for a value, or ``crashed <signal>`` where the child
died (a segfault, or a sanitizer's abort). tests/test_native_inputs.py runs it and says what
each case must give: a clean Python exception or the right value, never a crash. One process
imports the extensions once; a fork per case keeps one crash from hiding the next.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import sys
import tempfile
from collections.abc import Callable
from typing import Any, ClassVar

from tests.native import extension

cseal = extension("tracevault.services.sequencer._cseal")
ctake = extension("tracevault.services.archiver._ctake")
ccolumns = extension("tracevault.index._ccolumns")
cmerkle = extension("tracevault.transparency._cmerkle")
cput = extension("tracevault.archive._cput")
csign = extension("tracevault.transparency._csign")
cfields = extension("tracevault.content._cfields")
cjcs = extension("tracevault.schemas._cjcs")

H = hashlib.sha256(b"leaf").digest()
I64_MAX = 2**63 - 1
TMPFILE = getattr(os, "O_TMPFILE", 0)
CASES: dict[str, Callable[[], object]] = {}


def case(fn: Callable[[], object]) -> Callable[[], object]:
    CASES[fn.__name__] = fn
    return fn


# -- _cmerkle ------------------------------------------------------------------------------


@case
def merkle_extend_empty_list_size_1() -> object:
    return cmerkle.extend([], 1, [H])  # segfaulted: a merge with one hash in the list


@case
def merkle_extend_size_3_one_hash() -> object:
    return cmerkle.extend([H], 3, [H])


@case
def merkle_extend_negative_size() -> object:
    return cmerkle.extend([], -1, [H])


@case
def merkle_extend_size_past_64_bits() -> object:
    return cmerkle.extend([H], 2**64 + 1, [])


@case
def merkle_extend_size_that_overflows() -> object:
    return cmerkle.extend([H] * 63, 2**63 - 1, [H])


@case
def merkle_extend_not_a_list() -> object:
    return cmerkle.extend((H,), 1, [H])


@case
def merkle_extend_consistent() -> object:
    hashes = [H, H]
    return cmerkle.extend(hashes, 3, [H]), len(hashes)


@case
def merkle_perfect_root_of_three() -> object:
    return cmerkle.perfect_root([H] * 3)


@case
def merkle_perfect_root_of_an_int() -> object:
    return cmerkle.perfect_root(5)


@case
def merkle_hash_children_short() -> object:
    return cmerkle.hash_children(b"x", H)


# -- the takes: start, the list, the context ---------------------------------------------


class Msg:
    """A consumed message; ``hook`` runs inside one of its methods (Python code the C walk
    calls while it holds pointers into the batch)."""

    def __init__(self, value: bytes, *, part: int = 0, offset: int = 0, key: bytes = b"r") -> None:
        self._value, self._part, self._offset, self._key = value, part, offset, key
        self.hook: Callable[[], None] | None = None

    def _run(self) -> None:
        if self.hook is not None:
            self.hook()

    def error(self) -> None:
        return None

    def partition(self) -> int:
        return self._part

    def offset(self) -> int:
        return self._offset

    def value(self) -> bytes:
        return self._value

    def headers(self) -> None:
        return None

    def key(self) -> bytes:
        self._run()
        return self._key


def _sealed_value(raw: bytes, *, seq: int = 1) -> bytes:
    from tests.faults.hostile import join, sealed_fields, sealed_header

    return join(sealed_header(), sealed_fields("r", seq, raw))


def _take_ctx() -> tuple[object, ...]:
    from tests.faults.hostile import sealed_header, trace_header
    from tracevault.schemas import EventKind
    from tracevault.schemas.fast import armed_walks
    from tracevault.services.archiver._logwriter import LeafRecord
    from tracevault.services.archiver._state import Pending
    from tracevault.transparency import leaf_prefix

    walks = armed_walks()
    assert walks is not None
    kinds, fin = walks[2], walks[2].index(EventKind.RUN_FINISHED)
    prefixes = {"r": leaf_prefix("r")}
    return (prefixes, 0, 2**62, LeafRecord, Pending, sealed_header(), trace_header(), fin,
            len(kinds))  # fmt: skip


def _good_raw() -> bytes:
    from tests.faults.hostile import event_value

    return event_value("r", 1)


@case
def ctake_start_negative() -> object:
    return ctake.take([Msg(b"")], -1, _take_ctx())  # segfaulted: msgs[-1] read past


@case
def ctake_start_past_the_end() -> object:
    return ctake.take([Msg(b"")], 5, _take_ctx())


@case
def ctake_bad_context() -> object:
    return ctake.take([], 0, ())


@case
def ctake_not_a_message() -> object:
    return ctake.take([object()], 0, _take_ctx())


def _taken(out: object) -> object:
    """take's (end, partition, records) as (end, partition, how many records)."""
    end, part, records = out  # type: ignore[misc]
    return end, part, len(records)


@case
def ctake_takes_a_good_record() -> object:
    return _taken(ctake.take([Msg(_sealed_value(_good_raw()))], 0, _take_ctx()))


@case
def ctake_run_id_length_past_int64() -> object:
    """A sealed record whose raw event claims a run id of INT64_MAX bytes: the kind walk
    declines it (the signed ``p + n`` this once was is undefined behaviour)."""
    from tests.faults.hostile import trace_header, varint

    raw = trace_header() + varint(I64_MAX) + b"\x00" * 40
    return ctake.leaf_fields(_sealed_value(raw), _take_ctx())


@case
def ctake_offset_at_int64_max() -> object:
    """offset + 1 does not fit: left to Python (which has big ints)."""
    msg = Msg(_sealed_value(_good_raw()), offset=I64_MAX)
    return _taken(ctake.take([msg], 0, _take_ctx()))


@case
def ctake_batch_dropped_while_walked() -> object:
    """The message's key() clears the batch the walk holds."""
    msgs = [Msg(_sealed_value(_good_raw()))]
    msgs[0].hook = msgs.clear
    return _taken(ctake.take(msgs, 0, _take_ctx()))


def _seal_ctx() -> tuple[object, ...]:
    from tracevault.schemas import EventKind
    from tracevault.schemas.fast import armed_walks
    from tracevault.services.sequencer._rules import MAX_RAW_BYTES, SealOut

    walks = armed_walks()
    assert walks is not None
    kinds = walks[2]
    gap, fin = kinds.index(EventKind.GAP), kinds.index(EventKind.RUN_FINISHED)
    return ({}, [], {}, 0, SealOut, walks[1], len(kinds), gap, fin, MAX_RAW_BYTES)


@case
def cseal_start_negative() -> object:
    return cseal.take([Msg(b"")], -1, _seal_ctx())  # segfaulted: msgs[-1] read past


@case
def cseal_start_past_the_end() -> object:
    return cseal.take([], 1, _seal_ctx())


@case
def cseal_bad_context() -> object:
    return cseal.take([Msg(b"")], 0, ({},))


# -- _cseal's encoders -------------------------------------------------------------------


class Run:
    enc = None
    leaf = None
    partition = 0
    finished = False
    gaps: ClassVar[list[object]] = []
    held: ClassVar[dict[object, object]] = {}
    last_hash = H
    next_seq = 1
    first_offset = 0
    last_offset = 0


def _seal_out(run: object) -> tuple[object, ...]:
    return (run, 1, H, H, b"raw", 0, 5)


@case
def cseal_values_not_sealouts() -> object:
    return cseal.values([object()], b"", b"", lambda r: (b"", b""), lambda r: b"")


@case
def cseal_values_batch_cleared_by_an_encoder() -> object:
    sealed: list[object] = [_seal_out(Run()), _seal_out(Run())]

    def enc(run: object) -> tuple[bytes, bytes]:
        sealed.clear()
        return (b"P", b"Q")

    vals, leaves = cseal.values(sealed, b"A", b"S", enc, lambda r: b"L")
    return len(vals), {k: len(v) for k, v in leaves.items()}


@case
def cseal_values_seq_past_int64() -> object:
    rec = (Run(), 2**64, H, H, b"raw", 0, 5)
    return cseal.values([rec], b"", b"", lambda r: (b"", b""), lambda r: b"")


@case
def cseal_heads_runs_cleared_by_an_encoder() -> object:
    runs: list[object] = [Run(), Run()]

    def enc(run: object) -> tuple[bytes, bytes]:
        runs.clear()
        return (b"P", b"Q")

    return len(cseal.heads(runs, b"S", enc))


@case
def cseal_peek_short_header() -> object:
    return cseal.peek(b"", b"short", 10)


@case
def cseal_link_short_hash() -> object:
    return cseal.link(bytes(31), b"x")


@case
def cseal_canonical_of_an_int() -> object:
    return cseal.canonical(5)


# -- _cput ---------------------------------------------------------------------------------


def _dir() -> str:
    return tempfile.mkdtemp(prefix="native-calls-")


@case
def cput_put_negative_mode() -> object:
    return cput.put(_dir(), "x", b"data", -1, 0, TMPFILE)


@case
def cput_put_mode_past_07777() -> object:
    return cput.put(_dir(), "x", b"data", 0o17777, 0, TMPFILE)


@case
def cput_put_lock_before_the_epoch() -> object:
    return cput.put(_dir(), "x", b"data", 0o444, -1, TMPFILE)


@case
def cput_put_other_open_flags() -> object:
    return cput.put(_dir(), "x", b"data", 0o444, 0, TMPFILE | os.O_APPEND)


@case
def cput_put_ok() -> object:
    return cput.put(_dir(), "x", b"data", 0o444, 0, TMPFILE)


@case
def cput_put_batch_not_a_tuple() -> object:
    return cput.put_batch(["x"], 0o444, 0, TMPFILE, 4)


@case
def cput_put_batch_short_tuple() -> object:
    return cput.put_batch([(_dir(),)], 0o444, 0, TMPFILE, 4)


@case
def cput_put_batch_negative_mode() -> object:
    return cput.put_batch([(_dir(), "x", b"d")], -5, 0, TMPFILE, 4)


@case
def cput_put_batch_ok() -> object:
    d = _dir()
    return cput.put_batch([(d, "a", b"1"), (d, "b", b"2"), (d, "a", b"1")], 0o444, 0, TMPFILE, 2)


# -- _csign: a 32-byte seed, a key that key() made -----------------------------------------


@case
def csign_key_short_seed() -> object:
    return csign.key(b"\x01" * 31)


@case
def csign_key_of_an_int() -> object:
    return csign.key(32)


@case
def csign_sign_not_a_key() -> object:
    return csign.sign(b"\x01" * 32, b"message")


@case
def csign_sign_another_capsule() -> object:
    import datetime

    return csign.sign(datetime.datetime_CAPI, b"message")  # type: ignore[attr-defined]


@case
def csign_sign_a_memoryview() -> object:
    return len(csign.sign(csign.key(bytearray(32)), memoryview(b"message")[1:]))


@case
def csign_sign_empty_message() -> object:
    return len(csign.sign(csign.key(b"\x07" * 32), b""))


# -- _cfields: a 32-byte key, a bounded AAD prefix, a list of events --------------------------


class _Ev:
    def __init__(self, seq: object, request: object, response: object) -> None:
        self.seq, self.request, self.response = seq, request, response


_ENV = b'{"enc":"' + b"A" * 40 + b'","v":1}'


@case
def cfields_short_key() -> object:
    return cfields.open_pairs(b"k" * 31, b"", [])


@case
def cfields_prefix_too_long() -> object:
    return cfields.open_pairs(b"k" * 32, b"p" * 5000, [])


@case
def cfields_not_a_list() -> object:
    return cfields.open_pairs(b"k" * 32, b"", (_Ev(1, _ENV, _ENV),))


@case
def cfields_event_without_seq() -> object:
    return cfields.open_pairs(b"k" * 32, b"", [object()])


@case
def cfields_seq_past_int64_and_not_bytes() -> object:
    return cfields.open_pairs(
        b"k" * 32, b"", [_Ev(2**70, _ENV, _ENV), _Ev(1, "s", _ENV), _Ev(1, _ENV, _ENV)]
    )


@case
def cfields_envelope_too_short_for_a_tag() -> object:
    return cfields.open_pairs(b"k" * 32, b"", [_Ev(1, b'{"enc":"AAAA","v":1}', _ENV)])


@case
def cfields_tool_shape_cut_short() -> object:
    return cfields.open_pairs(
        b"k" * 32,
        b"",
        [_Ev(1, b'{"enc":"AAAA","tool":"', _ENV), _Ev(1, b'{"enc":"AAAA","tool":","v":1}', _ENV)],
    )


@case
def cfields_list_cleared_while_read() -> object:
    events: list[object] = []

    class Clearing:
        seq, response = 1, _ENV

        @property
        def request(self) -> bytes:
            events.clear()
            return _ENV

    events += [Clearing(), _Ev(1, _ENV, _ENV), _Ev(2, _ENV, _ENV)]
    return cfields.open_pairs(b"k" * 32, b"", events)


# -- _cjcs: any object; nesting, cycles and size bounded by MAX_DEPTH, not the C stack --------


def _jcs_scan(value: object) -> object:
    from tracevault.schemas import _jcs

    cjcs.init(_jcs.Unencodable, _jcs._scan, _jcs.MAX_DEPTH)
    return cjcs.scan(value)


def _nested(depth: int, leaf: object) -> object:
    value = leaf
    for i in range(depth):
        value = [value] if i % 3 == 0 else ({"k": value} if i % 3 == 1 else (value,))
    return value


@case
def cjcs_nested_a_million_deep() -> object:
    return _jcs_scan(_nested(10**6, 0))


@case
def cjcs_nested_at_max_depth() -> object:
    from tracevault.schemas._jcs import MAX_DEPTH

    return _jcs_scan(_nested(MAX_DEPTH, 1.5)), _one(lambda: _jcs_scan(_nested(MAX_DEPTH + 1, 1.5)))


@case
def cjcs_cyclic_list() -> object:
    cyclic: list[object] = [1, 2.0]
    cyclic.append(cyclic)
    return _jcs_scan(cyclic)


@case
def cjcs_cyclic_dict_through_a_tuple() -> object:
    cyclic: dict[str, object] = {}
    cyclic["a"] = ({"b": cyclic},)
    return _jcs_scan(cyclic)


@case
def cjcs_huge_list() -> object:
    return _jcs_scan([0, "s", None, True, 0.5] * 2_000_000)


@case
def cjcs_huge_dict() -> object:
    return _jcs_scan({str(i): [i, 1.0] for i in range(500_000)})


@case
def cjcs_deep_subclass_left_to_python() -> object:
    import enum

    return _jcs_scan(_nested(150, enum.IntEnum("E", "A").A))


@case
def cjcs_python_walk_raises() -> object:
    def broken(value: object, depth: int) -> int:
        raise KeyError(depth)

    cjcs.init(ValueError, broken, 10)
    return cjcs.scan([{"x": 2**60}])


@case
def cjcs_python_walk_returns_a_str() -> object:
    cjcs.init(ValueError, lambda value, depth: "two", 10)
    return cjcs.scan(object())


@case
def cjcs_init_not_an_exception() -> object:
    return cjcs.init(int, print, 10)


@case
def cjcs_init_depth_negative() -> object:
    return cjcs.init(ValueError, print, -1)


@case
def cjcs_scan_of_odd_objects() -> object:
    class Weird:
        def __eq__(self, other: object) -> bool:
            raise RuntimeError("compared")

        __hash__ = object.__hash__

    odd = ({Weird(): 1}, [Weird()], {"a": {1, 2}}, {(1,): 2}, {None: 1}, b"x", {"a": print})
    return [_one(lambda v=v: _jcs_scan(v)) for v in odd]  # type: ignore[misc]


# -- _cwire: bytes, a (kinds, ErrorInfo, fallback) layout, a 12-tuple; a 32-byte prev -------

cwire = extension("tracevault.producer._cwire")


def _wire_encoder() -> Any:
    from tracevault.producer._wire import _KIND_ORDER, EventEncoder
    from tracevault.schemas import AgentInfo, ErrorInfo

    enc = EventEncoder("run-1", AgentInfo("a", "1", "h", "x", "0"))
    return enc, (_KIND_ORDER, ErrorInfo, enc.encode_fields_python)


def _wire_fields(**changes: object) -> tuple[object, ...]:
    from tracevault.schemas import EventKind

    base: dict[str, object] = dict(seq=1, kind=EventKind.MODEL_CALL, at=5, request=b"{}",
                                   response=b"{}", model=None, seed=None, error=None, key=None,
                                   parent=None, extra=None, il=None)  # fmt: skip
    return tuple({**base, **changes}.values())


def _cwire_encode(fields: object) -> object:
    enc, layout = _wire_encoder()
    return cwire.encode(enc._prefix, enc._agent_bytes, layout, fields)


@case
def cwire_encode_prefix_a_str() -> object:
    enc, layout = _wire_encoder()
    return cwire.encode("prefix", enc._agent_bytes, layout, _wire_fields())


@case
def cwire_encode_three_arguments() -> object:
    enc, layout = _wire_encoder()
    return cwire.encode(enc._prefix, enc._agent_bytes, layout)


@case
def cwire_encode_nine_kinds() -> object:
    enc, layout = _wire_encoder()
    return cwire.encode(enc._prefix, enc._agent_bytes, (layout[0][:9], *layout[1:]), _wire_fields())


@case
def cwire_encode_fallback_not_callable() -> object:
    enc, layout = _wire_encoder()
    return cwire.encode(enc._prefix, enc._agent_bytes, (*layout[:2], None), _wire_fields())


@case
def cwire_encode_eleven_fields() -> object:
    return _cwire_encode(_wire_fields()[:11])


@case
def cwire_encode_not_a_tuple() -> object:
    return _cwire_encode(None)


@case
def cwire_encode_seq_a_str() -> object:
    return _cwire_encode(_wire_fields(seq="1"))


@case
def cwire_encode_seq_past_int64_as_python() -> object:
    enc, _ = _wire_encoder()
    fields = _wire_fields(seq=2**64, seed=-(2**63) - 1, parent=I64_MAX + 1)
    return _cwire_encode(fields) == enc.encode_fields_python(fields)


@case
def cwire_encode_int64_edges() -> object:
    enc, _ = _wire_encoder()
    fields = _wire_fields(seq=I64_MAX, at=-(2**63), seed=-1, extra=-(2**63), il=(I64_MAX, 0, -1))
    return _cwire_encode(fields) == enc.encode_fields_python(fields)


@case
def cwire_encode_duration_with_5000_digits() -> object:
    return _cwire_encode(_wire_fields(extra=10**5000))  # str() refuses it, as in Python


@case
def cwire_encode_lone_surrogate_attribute() -> object:
    return _cwire_encode(_wire_fields(extra={"k": "\ud800"}))


@case
def cwire_encode_error_with_an_int_message() -> object:
    from tracevault.schemas import ErrorInfo

    return _cwire_encode(_wire_fields(error=ErrorInfo("E", 5)))  # type: ignore[arg-type]


@case
def cwire_encode_16_mib_payload_and_10k_attributes() -> object:
    big = b"x" * (16 << 20)
    attrs = {f"k{i}": "v" * (i % 50) for i in range(10_000)}
    return len(_cwire_encode(_wire_fields(request=big, response=big, extra=attrs))) > 32 << 20


@case
def cwire_encode_fallback_that_calls_encode_again() -> object:
    enc, layout = _wire_encoder()

    def again(fields: object) -> object:
        return cwire.encode(enc._prefix, enc._agent_bytes, (*layout[:2], again), fields)

    return again(_wire_fields(seq=True))  # declined each time: Python's recursion limit


@case
def cwire_link_short_prev() -> object:
    return cwire.link(H[:31], b"raw")


@case
def cwire_link_long_prev() -> object:
    return cwire.link(H + b"\x00", b"raw")


@case
def cwire_link_raw_a_str() -> object:
    return cwire.link(H, "raw")


@case
def cwire_link_empty_raw() -> object:
    return len(cwire.link(H, b""))


# -- _cfields.Sealer: key 32 bytes, salt 4, start within 64 bits; seq int64, FIELDS only ---


def _sealer(start: int = 0) -> Any:
    return cfields.Sealer(b"k" * 32, b"tracevault/v1/content\0r\0", b"salt", start)


def _counter(envelope: bytes) -> int:
    import base64

    return int.from_bytes(base64.b64decode(envelope[8 : envelope.index(b'"', 8)])[4:12], "big")


@case
def csealer_short_key() -> object:
    return cfields.Sealer(b"k" * 31, b"", b"salt")


@case
def csealer_long_salt() -> object:
    return cfields.Sealer(b"k" * 32, b"", b"salt!")


@case
def csealer_start_negative() -> object:
    return cfields.Sealer(b"k" * 32, b"", b"salt", -1)


@case
def csealer_start_past_64_bits() -> object:
    return cfields.Sealer(b"k" * 32, b"", b"salt", 2**64)


@case
def csealer_key_of_a_str() -> object:
    return cfields.Sealer("k" * 32, b"", b"salt")


@case
def csealer_not_a_base() -> object:
    class Sub(cfields.Sealer):  # type: ignore[misc,name-defined]
        pass

    return Sub


@case
def csealer_init_again_keeps_the_counter() -> object:
    s = _sealer()
    s.seal(1, "request", b"{}")
    with contextlib.suppress(TypeError):  # object's __init__: it has nothing to reset
        s.__init__(b"k" * 32, b"", b"salt")
    return _counter(s.seal(1, "request", b"{}"))


@case
def csealer_seal_seq_past_int64() -> object:
    return _sealer().seal(2**63, "request", b"{}")


@case
def csealer_seal_seq_of_a_float() -> object:
    return _sealer().seal(1.0, "request", b"{}")


@case
def csealer_seal_unknown_field() -> object:
    return _sealer().seal(1, "payload", b"{}")


@case
def csealer_seal_field_not_a_str() -> object:
    return _sealer().seal(1, None, b"{}")


@case
def csealer_seal_plaintext_of_a_str() -> object:
    return _sealer().seal(1, "error", "boom")


@case
def csealer_seal_empty_plaintext() -> object:
    return len(_sealer().seal(-(2**63), "response", b""))


@case
def csealer_seal_the_last_counter_then_refuses() -> object:
    s = _sealer(2**64 - 1)
    first = _counter(s.seal(1, "request", b"{}")) == 2**64 - 1
    try:
        s.seal(1, "request", b"{}")
    except OverflowError:
        return first, "refused"
    return first, "sealed again"


@case
def csealer_event_with_one_counter_left() -> object:
    return _sealer(2**64 - 1).seal_event(1, False, b"{}", b"{}")


@case
def csealer_tool_shortest_shape() -> object:
    return _sealer().seal_tool_request(1, b',"tool":"}').endswith(b'","tool":","v":1}')


@case
def csealer_tool_empty_request() -> object:
    return _sealer().seal_tool_request(1, b"").endswith(b'","v":1}')


@case
def csealer_tool_key_without_closing() -> object:
    env = _sealer().seal_tool_request(1, b',"tool":')
    return env.endswith(b'","v":1}') and b"tool" not in env


@case
def csealer_event_bool_that_raises() -> object:
    class Bad:
        def __bool__(self) -> bool:
            raise ZeroDivisionError

    return _sealer().seal_event(1, Bad(), b"{}", b"{}")


@case
def csealer_event_bool_that_seals_on_the_same_sealer() -> object:
    s = _sealer()
    inner: list[bytes] = []

    class Sealing:
        def __bool__(self) -> bool:
            inner.append(s.seal(1, "error", b"x"))
            return True

    a, b = s.seal_event(1, Sealing(), b'{"args":1,"tool":"t"}', b"{}")
    return sorted(_counter(e) for e in [*inner, a, b])


@case
def csealer_event_response_not_bytes() -> object:
    return _sealer().seal_event(1, False, b"{}", 5)


@case
def csealer_copy_would_clone_the_counter() -> object:
    import copy

    return copy.deepcopy(_sealer())


@case
def csealer_seal_a_large_field() -> object:
    return len(_sealer().seal(1, "response", b"x" * 100_000))


_HDR = b"\x00" * 10  # a 10-byte Avro header that no value starts with


@case
def ccolumns_short_header() -> object:
    return ccolumns.columns([], [], b"short", _HDR, 3, 1)


@case
def ccolumns_no_kinds() -> object:
    return ccolumns.columns([], [], _HDR, _HDR, 0, 1)


@case
def ccolumns_values_not_a_list() -> object:
    return ccolumns.columns((b"x",), [1], _HDR, _HDR, 3, 1)


@case
def ccolumns_counts_past_the_values() -> object:
    return ccolumns.columns([b"x"], [2], _HDR, _HDR, 3, 1)


@case
def ccolumns_negative_count() -> object:
    return ccolumns.columns([b"x"], [-1], _HDR, _HDR, 3, 1)


@case
def ccolumns_count_whose_index_clears_the_values() -> object:
    """A count whose __index__ empties the list C walks: refused before it runs."""
    values = [b"x"]

    class Sly:
        def __index__(self) -> int:
            values.clear()
            return 1

    return ccolumns.columns(values, [Sly()], _HDR, _HDR, 3, 1)


@case
def ccolumns_value_cut_short() -> object:
    """A value that is not a whole sealed record: declined (None), the Python path reads it."""
    return ccolumns.columns([_HDR + b"\x02"], [1], _HDR, _HDR, 3, 1)


@case
def ccolumns_value_not_bytes() -> object:
    return ccolumns.columns([bytearray(_HDR)], [1], _HDR, _HDR, 3, 1)


# -- the runner ----------------------------------------------------------------------------


def _one(fn: Callable[[], object]) -> str:
    try:
        return f"ok {fn()!r}"
    except Exception as exc:
        return type(exc).__name__


def run(names: list[str]) -> dict[str, str]:
    """Each case in a forked child: its outcome, or how the child died."""
    out: dict[str, str] = {}
    for name in names:
        r, w = os.pipe()
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:  # the child: one call, its outcome down the pipe
            os.close(r)
            os.write(w, _one(CASES[name]).encode())
            os._exit(0)
        os.close(w)
        with os.fdopen(r, "rb") as f:
            said = f.read().decode()
        _, status = os.waitpid(pid, 0)
        if os.WIFSIGNALED(status):
            out[name] = f"crashed {signal.Signals(os.WTERMSIG(status)).name}"
        elif os.WEXITSTATUS(status) != 0 or not said:
            out[name] = f"crashed exit {os.WEXITSTATUS(status)}"
        else:
            out[name] = said
    return out


if __name__ == "__main__":
    print(json.dumps(run(sys.argv[1:] or list(CASES))))
