"""The archiver's C path (``_ctake.c``) takes exactly what the Python path takes, or leaves it.

The C walk never decides what is malformed: it either builds the same leaf record the Python
path builds (``Intake._take_one``, ``leaf_fields``) or stops and hands the message to it.
These tests pin it to the Python path over generated, non-canonical and corrupted values, and
over whole consumed batches of real ``confluent_kafka.Message`` objects mixing every case the
archiver meets (checkpoints, tombstones, injected records, new runs, errors).

A build that lost its C path fails here, loudly (tests/native.py).
"""

from __future__ import annotations

import hashlib
import random
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, Message
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.native import examples, extension
from tests.schemas import fast_values as fv
from tests.services.archiver.sealed_factory import T0_MICROS, raw_event
from tracevault.archive import open_store
from tracevault.chain import genesis, link
from tracevault.config import Settings
from tracevault.errors import SchemaError
from tracevault.schemas import EventKind, SealedEvent, encode_sealed
from tracevault.schemas.fast import armed_walks
from tracevault.services.archiver import Archiver
from tracevault.services.archiver._sealed import leaf_fields
from tracevault.transparency import (
    CHECKPOINT_KEY,
    RECORD_HEADER,
    RECORD_HEADER_CHECKPOINT,
    CheckpointRecord,
    CompactTree,
    Ed25519Signer,
    leaf_hash,
    log_origin,
)

_ctake = extension("tracevault.services.archiver._ctake")

SETTINGS = settings(
    max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def _ctx() -> tuple[object, ...]:
    walks = armed_walks()
    assert walks is not None
    sealed, trace, kinds = walks
    from tracevault.services.archiver._logwriter import LeafRecord
    from tracevault.services.archiver._state import Pending

    return ({}, 0, 2**62, LeafRecord, Pending, sealed, trace,
            kinds.index(EventKind.RUN_FINISHED), len(kinds))  # fmt: skip


CTX = _ctx()


def _python(value: bytes) -> tuple[str, int, bytes, bool, int] | None:
    try:
        return leaf_fields(value)
    except SchemaError:
        return None


@given(data=st.binary(max_size=300))
@settings(max_examples=examples(300), deadline=None)
def test_its_sha256_is_sha256(data: bytes) -> None:
    assert _ctake.sha256(data) == hashlib.sha256(data).digest()


def test_sha256_at_every_padding_boundary() -> None:
    for n in range(0, 200):
        data = bytes(range(256))[: n % 256] * (1 + n // 256)
        assert _ctake.sha256(data) == hashlib.sha256(data).digest(), n


def _with_event(rec: dict[str, Any], event: dict[str, Any]) -> dict[str, Any]:
    return {**rec, "raw": fv.canonical("TraceEvent", event)}


@SETTINGS
@given(rec=fv.sealed, event=fv.events)
def test_canonical_values_are_walked_as_python_walks_them(
    rec: dict[str, Any], event: dict[str, Any]
) -> None:
    value = fv.canonical("SealedEvent", _with_event(rec, event))
    want = _python(value)
    assert want is not None
    assert _ctake.leaf_fields(value, CTX) == want


@SETTINGS
@given(rec=fv.sealed, event=fv.events, rng=st.randoms(use_true_random=False))
def test_non_canonical_values_are_walked_as_python_or_declined(
    rec: dict[str, Any], event: dict[str, Any], rng: random.Random
) -> None:
    value = fv.MAGIC + fv.version("SealedEvent").fingerprint
    value += fv.Writer(rng).sealed(_with_event(rec, event))
    got = _ctake.leaf_fields(value, CTX)
    assert got is None or got == _python(value)


@SETTINGS
@given(
    rec=fv.sealed,
    event=fv.events,
    rng=st.randoms(use_true_random=False),
    cut=st.integers(1, 400),
)
def test_corrupted_values_are_walked_as_python_or_declined(
    rec: dict[str, Any], event: dict[str, Any], rng: random.Random, cut: int
) -> None:
    value = bytearray(fv.canonical("SealedEvent", _with_event(rec, event)))
    for _ in range(rng.randrange(1, 4)):
        i = rng.randrange(0, len(value))
        if rng.random() < 0.6:
            value[i] ^= 1 << rng.randrange(8)
        else:
            del value[len(value) - min(cut, len(value) - 1) :]
    got = _ctake.leaf_fields(bytes(value), CTX)
    assert got is None or got == _python(bytes(value))


def test_a_raw_that_is_not_an_event_is_left_to_python() -> None:
    rec = {
        "run_id": "r", "seq": 1, "prev_hash": bytes(32), "hash": bytes(32), "raw": b"junk",
        "sealed_at": T0_MICROS, "source_partition": 0, "source_offset": 1,
        "sequencer_id": "s",
    }  # fmt: skip
    assert _ctake.leaf_fields(fv.canonical("SealedEvent", rec), CTX) is None


# -- whole batches: the C path and the Python path leave the same state ---------------------

SIGNER = Ed25519Signer.generate("test-ctake")


def _archiver(tmp: Path, *, native: bool) -> Archiver:
    url = f"file://{tmp}"
    s = Settings(topic_prefix="ctake", archive_url=url, log_vkeys=SIGNER.verifier.vkey)
    a = Archiver(s, store=open_store(url, s), verifiers=[SIGNER.verifier])
    if not native:
        a.intake.ctx = None
    else:
        assert a.intake.ctx is not None, "the archiver does not use its C path"
    return a


def _run(run_id: str, n: int, sealed_at: int = T0_MICROS) -> list[SealedEvent]:
    out, prev = [], genesis(run_id)
    for seq in range(n):
        kind = EventKind.RUN_FINISHED if seq == n - 1 else EventKind.TOOL_CALL
        raw = raw_event(run_id, seq, kind)
        h = link(prev, raw)
        out.append(SealedEvent(run_id, seq, prev, h, raw, sealed_at + seq, 0, seq, "s"))
        prev = h
    return out


def _batch() -> list[Message]:
    """One partition's consumed batch: two runs interleaved, then a checkpoint listing them
    (and not an injected record), then a tombstone, a broken value, an event sealed outside
    the archivable window, a Kafka error, a second checkpoint."""
    tree, origin = CompactTree(), log_origin(Settings().log_origin, "ctake", 0)
    msgs: list[Message] = []

    def msg(value: bytes | None, key: bytes | None = b"k", **kw: Any) -> None:
        msgs.append(Message(topic="ctake.sealed", partition=0, offset=len(msgs), key=key,
                            value=value, **kw))  # fmt: skip

    def checkpoint(events: list[SealedEvent]) -> None:
        nonlocal tree
        rec, tree = CheckpointRecord.build(
            tree, [leaf_hash(e.run_id, e.seq, e.hash) for e in events], origin, SIGNER
        )
        msg(rec.encode(), CHECKPOINT_KEY, headers=[(RECORD_HEADER, RECORD_HEADER_CHECKPOINT)])

    a, b = _run("run-a", 6), _run("run-é", 5)
    first = [e for pair in zip(a, b, strict=False) for e in pair] + a[len(b) :]
    for e in first:
        msg(encode_sealed(e), e.run_id.encode())
    forged = _run("run-a", 8)[7]  # chain-valid shape, not in the signed log
    msg(encode_sealed(forged), b"run-a")
    checkpoint(first)
    msg(None)
    msg(encode_sealed(a[0])[:-3])
    late = _run("run-late", 2, sealed_at=-(2**62))
    msg(encode_sealed(late[0]))
    msg(None, error=KafkaError(KafkaError._PARTITION_EOF))
    c = _run("run-c", 3)
    for e in c:
        msg(encode_sealed(e), b"run-c")
    checkpoint(c)
    return msgs


def _state(a: Archiver) -> dict[str, Any]:
    return {
        "consumed": dict(a.intake.consumed),
        "stats": (
            a.stats.checkpoints_verified,
            a.stats.events_quarantined,
            dict(a.stats.quarantined),
        ),
        "parts": {
            p: (part.log.size, part.log.root, list(part.pending), dict(part.log.runs))
            for p, part in a.parts.items()
        },
    }


@pytest.mark.parametrize("split", [1, 3, 1000])
def test_a_batch_leaves_the_same_state_by_either_path(tmp_path: Path, split: int) -> None:
    msgs = _batch()
    native, python = (
        _archiver(tmp_path / "c", native=True),
        _archiver(tmp_path / "py", native=False),
    )
    for i in range(0, len(msgs), split):
        native.take(msgs[i : i + split])
        python.take(msgs[i : i + split])
    got, want = _state(native), _state(python)
    assert got == want
    # what the batch holds was really exercised: leaves logged, each kind of refusal made
    size, _root, pending, runs = got["parts"][0]
    assert size == 11 + 3 and not pending
    assert sorted(runs) == ["run-a", "run-c", "run-é"]
    assert got["stats"][2] == {"not-in-log": 1, "undecodable": 2, "invalid": 1}


def test_the_c_path_takes_the_common_case_itself(tmp_path: Path) -> None:
    """Not vacuous: after a run's first event (admitted in Python) the C path takes the rest
    without returning, and stops exactly at a checkpoint record."""
    a = _archiver(tmp_path, native=True)
    msgs = _batch()
    a.take(msgs[:1])  # run-a admitted, then its record taken by the C path
    a.take(msgs[1:2])  # run-é admitted
    before = {p: list(part.pending) for p, part in a.parts.items()}
    stop, partition, taken = _ctake.take(msgs, 2, a.intake.ctx)
    assert stop == 12  # the checkpoint record after 11 events and the forged one
    assert partition == 0 and len(before[0]) + len(taken) == 12
    assert [p.offset for p in taken] == list(range(2, 12))
    # it returns values and writes nothing of the archiver's: its lists and dicts as before
    assert {p: list(part.pending) for p, part in a.parts.items()} == before
    assert a.intake.consumed[0] == 2
    a.take(msgs[2:12])  # the archiver appends what the C path returns, and counts it read
    assert len(a.parts[0].pending) == 12
    assert a.intake.consumed[0] == 12


def test_only_what_is_not_the_common_case_reaches_the_python_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a run's first record is admitted and then taken in C, not walked in Python
    a = _archiver(tmp_path, native=True)
    seen: list[int] = []
    take_one = a.intake._take_one
    monkeypatch.setattr(a.intake, "_take_one", lambda m: (seen.append(m.offset()), take_one(m))[1])
    msgs = _batch()
    a.take(msgs)
    odd = [m.offset() for m in msgs if m.headers() or m.error() or m.value() is None]
    odd += [14, 15]  # the truncated value and the one sealed outside the window
    assert sorted(seen) == sorted(odd)
