"""Verify + rebuild from the archive walks each sealed value once (``sealed_columns``): it
must give exactly the verdict and the error the codec gives, for every corruption of a value.

The codec path reads every value with fastavro (``sealed_reader(fast=False)``) and rebuilds
from the rows; the one-walk path is what ``load_from_archive`` + ``verify(rebuild=True)``
runs. Each byte of a sealed value (the envelope: run id, seq, hashes, raw's length, and the
fields after raw that only the codec's readability protects: sealed_at, partition, offset,
sequencer id) is overwritten with several values, the value is cut and extended, and both
paths must raise the same check, seq, object and message, or verify to the same report.
A walk that skipped a field would accept a value the codec refuses, and fail here.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tests.services.archiver.sealed_factory import write_log_run
from tracevault.archive import open_store
from tracevault.errors import TraceVaultError
from tracevault.replayer import LoadedRun, verify
from tracevault.replayer._records import SealedRows
from tracevault.replayer.load.archive import load_from_archive, sealed_reader
from tracevault.replayer.load.log_policy import LogPolicy
from tracevault.schemas import Codec, avro_long, decode_sealed
from tracevault.schemas.fast import sealed_columns
from tracevault.transparency import Ed25519Signer

RUN = "one-walk-run"
N = 5


@pytest.fixture(scope="module")
def archived(tmp_path_factory: pytest.TempPathFactory) -> tuple[LoadedRun, LogPolicy]:
    root: Path = tmp_path_factory.mktemp("one-walk")
    store = open_store(f"file://{root}")
    signer = Ed25519Signer.generate("one-walk.log")
    write_log_run(store, RUN, N, signer)
    run = load_from_archive(store, RUN)
    store.close()
    return run, LogPolicy((signer.verifier,))


def _with(run: LoadedRun, values: list[bytes], *, one_walk: bool) -> LoadedRun:
    seqs = list(range(len(values)))
    read = sealed_reader(RUN, seqs, run.objects, fast=one_walk)
    walk = sealed_columns if one_walk else None
    return dataclasses.replace(run, records=SealedRows(values=values, read=read, walk=walk))


def _outcome(run: LoadedRun, log: LogPolicy | None) -> object:
    try:
        report = verify(run, rebuild=True, require_finished=True, log=log)
    except TraceVaultError as exc:
        return type(exc).__name__, str(exc), getattr(exc, "seq", None), getattr(exc, "obj", None)
    return report


def _variants(value: bytes) -> list[bytes]:
    out = [value[:cut] for cut in range(len(value))] + [value + b"\x00", value + b"\x80"]
    for i in range(len(value)):
        for b in {0x00, 0x01, 0x7F, 0x80, 0xFF, value[i] ^ 0x01, value[i] ^ 0x40}:
            if b != value[i]:
                out.append(value[:i] + bytes([b]) + value[i + 1 :])
    return out


def test_the_one_walk_reads_the_archived_run_and_agrees_with_the_codec(archived) -> None:
    run, policy = archived
    values = list(run.records.values)
    assert sealed_columns(values) is not None  # the honest run takes the one walk
    for log in (policy, None):
        fast = _outcome(_with(run, values, one_walk=True), log)
        slow = _outcome(_with(run, values, one_walk=False), log)
        assert fast == slow
        assert not isinstance(fast, tuple) and fast.finished and fast.count == N


@pytest.mark.parametrize("at", [1, N - 1])  # a middle value and the RUN_FINISHED one
def test_every_corruption_of_a_value_gets_the_codecs_verdict(archived, at: int) -> None:
    run, policy = archived
    values = list(run.records.values)
    codec = Codec("SealedEvent")
    walked = refused = 0
    for bad in _variants(values[at]):
        corrupt = [*values[:at], bad, *values[at + 1 :]]
        fast = _outcome(_with(run, corrupt, one_walk=True), policy)
        slow = _outcome(_with(run, corrupt, one_walk=False), policy)
        assert fast == slow, f"value {bad.hex()}"
        try:
            codec.decode(bad)
        except TraceVaultError:
            refused += 1
            # the codec refuses it: so must the walk (it declines, and the codec names it)
            assert sealed_columns(corrupt) is None, f"the walk read a refused value {bad.hex()}"
            assert isinstance(fast, tuple) and f"seq {at} " in fast[1] and RUN in fast[1]
        else:
            walked += sealed_columns(corrupt) is not None
    assert refused > 100 and walked > 100  # both sides of the line were exercised


def _varints() -> list[bytes]:
    """Encodings at the edges of what an Avro int and long may hold, and past them."""
    edges = [0, 1, -1, 63, 64, 2**31 - 1, 2**31, -(2**31), -(2**31) - 1, 2**63 - 1, -(2**63)]
    out = [avro_long(x) for x in edges]
    out += [b"\x80" * k + b"\x00" for k in (1, 4, 5, 9, 10)]  # zero, in 2..11 bytes
    out += [b"\xff" * 9 + bytes([last]) for last in (0x00, 0x01, 0x02, 0x7F)]  # 10 bytes
    out += [b"\xff" * 4 + bytes([last]) for last in (0x0F, 0x10)]  # 5 bytes: int's edge
    return out


def test_every_width_of_the_fields_after_raw_gets_the_codecs_verdict(archived) -> None:
    """sealed_at (long), source_partition (int), source_offset (long): the walk validates
    them without building them, so each is given every width and edge value in turn."""
    run, policy = archived
    values = list(run.records.values)
    at = 2
    s = decode_sealed(values[at])
    sid = s.sequencer_id.encode()
    fields = [avro_long(s.sealed_at), avro_long(s.source_partition), avro_long(s.source_offset)]
    tail = b"".join(fields) + avro_long(len(sid)) + sid
    head = values[at][: -len(tail)]
    sids = [avro_long(len(sid)) + sid, b"\x00", b"\x04\xc3\x28", b"\x06abc", b"\x02"]
    for k in range(3):
        for enc in _varints():
            for sid_enc in sids[:1] if k else sids:
                parts = [*fields[:k], enc, *fields[k + 1 :]]
                corrupt = [*values[:at], head + b"".join(parts) + sid_enc, *values[at + 1 :]]
                fast = _outcome(_with(run, corrupt, one_walk=True), policy)
                slow = _outcome(_with(run, corrupt, one_walk=False), policy)
                assert fast == slow, f"field {k} as {enc.hex()}, sequencer id {sid_enc.hex()}"
