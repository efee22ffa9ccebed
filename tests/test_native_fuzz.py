"""Generated and mutated arguments at every C entry point, against its Python reference.

The C pinning tests (tests/transparency/test_cmerkle.py, tests/services/archiver/test_ctake.py,
tests/services/sequencer/test_cseal.py) feed the walks generated and corrupted values; these
tests fuzz the arguments around them: tree states that are not compact trees, starts outside
the batch, batches of hostile messages, file modes and flags out of range. The oracle is the
Python twin where the arguments are valid (the same result), and a ``ValueError`` or
``TypeError`` with nothing changed where they are not. ``.ci/native`` runs them with
``FUZZ_SCALE`` raised, under the sanitizer build, where a read out of bounds aborts.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

from confluent_kafka import Message
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.faults.hostile import event_fields, join, sealed_fields, sealed_header, trace_header
from tests.faults.test_hostile_records import mutated
from tests.native import examples, extension
from tracevault.schemas import EventKind
from tracevault.schemas.fast import armed_walks, peek_event
from tracevault.services.archiver._logwriter import LeafRecord
from tracevault.services.archiver._state import Pending
from tracevault.services.sequencer._rules import MAX_RAW_BYTES, SealOut
from tracevault.transparency import leaf_prefix
from tracevault.transparency._merkle import CompactTree, list_source, tree_root

_cmerkle = extension("tracevault.transparency._cmerkle")
_ctake = extension("tracevault.services.archiver._ctake")
_cseal = extension("tracevault.services.sequencer._cseal")
_cput = extension("tracevault.archive._cput")

FUZZ = settings(
    max_examples=examples(100),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
_WALKS = armed_walks()
assert _WALKS is not None
KINDS = _WALKS[2]

hashes32 = st.binary(min_size=32, max_size=32)
almost32 = st.one_of(hashes32, st.binary(max_size=40), st.integers(), st.none())


# -- _cmerkle ------------------------------------------------------------------------------


def _python_extend(hashes: list[bytes], size: int, leaves: list[bytes]) -> tuple[int, list[bytes]]:
    tree = CompactTree(size, list(hashes))
    for h in leaves:
        tree.append(h)
    return tree.size, tree.hashes


@FUZZ
@given(
    n=st.integers(0, 600),
    leaves=st.lists(hashes32, max_size=40),
    dsize=st.sampled_from([0, 0, 0, 1, -1, 2**62, -(2**70), 2**64]),
    drop=st.integers(-1, 3),
    bad_leaf=st.one_of(st.none(), almost32),
)
def test_extend_is_the_python_tree_or_refuses_with_nothing_changed(
    n: int, leaves: list[bytes], dsize: int, drop: int, bad_leaf: Any
) -> None:
    tree = CompactTree()
    tree.extend([bytes([i % 251]) * 32 for i in range(n)])
    size, hashes = tree.size + dsize, list(tree.hashes)
    if drop >= 0 and hashes:
        del hashes[drop % len(hashes)]
    if bad_leaf is not None:
        leaves = [*leaves, bad_leaf]
    valid = (
        0 <= size <= 2**62
        and len(hashes) == size.bit_count()
        and all(isinstance(h, bytes) and len(h) == 32 for h in leaves)
    )
    before = list(hashes)
    try:
        got = _cmerkle.extend(hashes, size, leaves)
    except (ValueError, TypeError):
        assert not valid, "a valid tree was refused"
        assert hashes == before, "a refused extend changed the tree"
        return
    assert valid, "an inconsistent tree was extended"
    assert (got, hashes) == _python_extend(before, size, leaves)


@FUZZ
@given(st.lists(almost32, max_size=300))
def test_perfect_root_is_the_subtree_root_or_refuses(items: list[Any]) -> None:
    n = len(items)
    valid = 1 <= n <= 256 and not n & (n - 1) and all(
        isinstance(h, bytes) and len(h) == 32 for h in items
    )  # fmt: skip
    try:
        got = _cmerkle.perfect_root(items)
    except (ValueError, TypeError):
        assert not valid
        return
    assert valid and got == tree_root(n, list_source(items))


# -- the takes -----------------------------------------------------------------------------


@st.composite
def sealed_values(draw: st.DrawFn) -> bytes | None:
    """A sealed record of run ``r``: good, mutated, arbitrary or a tombstone."""
    seq = draw(st.integers(0, 3))
    raw = join(trace_header(), event_fields("r", seq))
    fields = sealed_fields("r", seq, raw)
    pick = draw(st.sampled_from(["good", "mutated", "raw", "bytes", "none"]))
    if pick == "good":
        return join(sealed_header(), fields)
    if pick == "mutated":
        return draw(mutated(fields, sealed_header()))
    if pick == "raw":
        forged = draw(mutated(event_fields("r", seq), trace_header()))
        return join(sealed_header(), sealed_fields("r", seq, forged))
    return draw(st.binary(max_size=200)) if pick == "bytes" else None


@FUZZ
@given(
    values=st.lists(sealed_values(), max_size=8),
    start=st.integers(-3, 11),
    offset=st.sampled_from([0, 7, 2**63 - 2, 2**63 - 1]),
)
def test_the_archivers_take_stays_in_its_batch(
    values: list[bytes | None], start: int, offset: int
) -> None:
    ctx = ({"r": leaf_prefix("r")}, 0, 2**62, LeafRecord, Pending, _WALKS[0], _WALKS[1],
           KINDS.index(EventKind.RUN_FINISHED), len(KINDS))  # fmt: skip
    msgs = [Message(topic="s", partition=0, offset=offset, key=b"r", value=v) for v in values]
    try:
        stop, partition, taken = _ctake.take(msgs, start, ctx)
    except ValueError:
        assert not 0 <= start <= len(msgs)
        return
    assert 0 <= start <= stop <= len(msgs)
    assert len(taken) == stop - start
    assert partition == (0 if taken else None)
    for p, v in zip(taken, values[start:stop], strict=True):
        assert p.rec.value is v and p.offset == offset
        assert _ctake.leaf_fields(v, ctx) is not None


@FUZZ
@given(values=st.lists(st.one_of(st.none(), st.binary(max_size=300)), max_size=6),
       good=st.lists(st.integers(0, 3), max_size=4), start=st.integers(-3, 11))  # fmt: skip
def test_the_sequencers_take_stays_in_its_batch(
    values: list[bytes | None], good: list[int], start: int
) -> None:
    values = values + [join(trace_header(), event_fields("r", s)) for s in good]
    gap, fin = KINDS.index(EventKind.GAP), KINDS.index(EventKind.RUN_FINISHED)
    sealed: list[SealOut] = []
    ctx = ({}, sealed, {}, 0, SealOut, _WALKS[1], len(KINDS), gap, fin, MAX_RAW_BYTES)
    msgs = [
        Message(topic="r", partition=0, offset=i, key=b"r", value=v) for i, v in enumerate(values)
    ]
    try:
        stop = _cseal.take(msgs, start, ctx)
    except ValueError:
        assert not 0 <= start <= len(msgs)
        return
    assert 0 <= start <= stop <= len(msgs)
    assert not sealed  # no run in the book: the C take seals nothing, it leaves it to Python


@FUZZ
@given(st.data())
def test_the_c_peek_is_peek_event_on_mutated_v2_values(data: st.DataObject) -> None:
    seq = data.draw(st.integers(0, 2**40))
    fields = event_fields(
        "r", seq, interleave=data.draw(st.sampled_from([None, (None, 1, 0), (3, 4, 5)]))
    )
    value = data.draw(mutated(fields, trace_header()))
    got = _cseal.peek(value, _WALKS[1], len(KINDS))
    want = peek_event(value)
    if got is not None:  # the C walk reads only what the Python walk reads, the same way
        assert want is not None
        assert got == (want.run_id, want.seq, KINDS.index(want.kind), want.request, want.response)


# -- _cput ---------------------------------------------------------------------------------


@FUZZ
@given(
    mode=st.sampled_from([0o444, 0o600, 0, 0o7777, -1, 0o10000, 2**31 - 1]),
    ns=st.sampled_from([0, 10**18, -1, -(2**63)]),
    flag=st.sampled_from([getattr(os, "O_TMPFILE", 0), os.O_DIRECTORY, 0, os.O_APPEND, -1]),
)
def test_a_put_refuses_what_is_not_a_mode_a_lock_time_or_o_tmpfile(
    mode: int, ns: int, flag: int
) -> None:
    valid = 0 <= mode <= 0o7777 and ns >= 0 and not flag & ~getattr(os, "O_TMPFILE", 0)
    with tempfile.TemporaryDirectory() as d:
        try:
            got = _cput.put(d, "x", b"data", mode, ns, flag)
        except ValueError:
            assert not valid
            return
        except PermissionError:  # mode 0 and the like, as the kernel says
            assert valid
            return
        assert valid and got in (1, -1, -2)
