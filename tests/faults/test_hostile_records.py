"""No record can raise out of the sequencer's rules or the archiver's per-record handling.

Property tests (hypothesis): arbitrary bytes, and valid TraceEvent / SealedEvent values with
one field re-encoded or broken (non-minimal varints, maps in negative-count blocks, bad union
and enum indexes, negative lengths, bad UTF-8, hostile JSON, truncations, trailing bytes,
flipped bytes), go through ``RunBook.apply`` and ``Archiver.take`` (real
``confluent_kafka.Message`` objects, a real ``file://`` store; no broker is needed at this
layer). Nothing raises, and every record is accounted for exactly once: sealed, held, in the
DLQ with a reason, or dropped as a counted duplicate (sequencer); archived, skipped as already
archived, or quarantined with a reason (archiver). No refusal may be ``internal``: that reason
is the safety net for bugs, and these inputs are all foreseeable.

Bounded for a loaded 2-core machine: 40 examples each (about 10 s in all), no per-example
deadline; ``HOSTILE_EXAMPLES=600`` searches deeper (it found the two bugs fixed with it: JSON
nested past the recursion limit stopped the sequencer, and a sealed record whose
``sequencer_id`` was not UTF-8 was archived into a segment that no longer read back).

The values are TraceEvent v2, as producers write them, so they reach the paths production
runs: ``peek_event`` and the other armed walks, the sequencer's C take (``_cseal.c``, through
``SequencerStep.apply_all``, pinned to the rules applied one record at a time) and the
archiver's (``_ctake.c``, through ``Archiver.take``). Each test counts what reached those
paths and fails if none did (values of another version would only ever reach fastavro).
"""

from __future__ import annotations

import os
import tempfile
from collections import Counter
from types import ModuleType
from typing import Any

from confluent_kafka import Message
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import NOW_US
from tests.faults.hostile import (
    Field,
    blob,
    event_fields,
    join,
    kind_symbols,
    sealed_fields,
    sealed_header,
    text,
    trace_header,
    varint,
)
from tracevault.archive._filestore import FileStore
from tracevault.archive.layout import run_prefix
from tracevault.chain import link
from tracevault.config import Settings
from tracevault.errors import ChainError, LogError, SchemaError
from tracevault.kafka import partition_for
from tracevault.replayer.load.archive import load_from_archive
from tracevault.schemas import Codec, decode_event
from tracevault.schemas.fast import armed_walks, peek_event
from tracevault.schemas.fast import sealed_fields as walk_sealed
from tracevault.services.archiver import Archiver, _intake
from tracevault.services.archiver._quarantine import Quarantined, unarchivable
from tracevault.services.archiver._sealed import parse_sealed
from tracevault.services.sequencer import BatchOutput, DlqReason, RunBook, _step
from tracevault.services.sequencer._loop import Sequencer
from tracevault.transparency import (
    CHECKPOINT_KEY,
    RECORD_HEADER,
    RECORD_HEADER_CHECKPOINT,
    CheckpointRecord,
    CompactTree,
    Ed25519Signer,
    RunEvent,
    check_run_log,
    leaf_hash,
    log_origin,
)

PARTS = 3
RUNS = ["r0", "r1", "ü-run"]
BOUNDED = settings(
    max_examples=int(os.environ.get("HOSTILE_EXAMPLES", "40")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    derandomize=False,
)

# -- mutations -------------------------------------------------------------------------------

_VARINT_KINDS = {"long", "enum", "union", "bytes"}


def _repad(f: Field, pad: int) -> Field:
    """``f`` with its leading varint re-encoded non-minimally (same value: still valid Avro)."""
    data = f.data
    i = 0
    while data[i] & 0x80:
        i += 1
    z = 0
    for k, b in enumerate(data[: i + 1]):
        z |= (b & 0x7F) << (7 * k)
    n = (z >> 1) ^ -(z & 1)
    return Field(f.name, f.kind, varint(n, pad=pad) + data[i + 1 :])


_HOSTILE_JSON = [
    b"[" * 1500 + b"]" * 1500,  # deeper than json's recursion limit
    b"[" * 1500,
    b'{"b":1, "a":2}',
    b'{"a":NaN}',
    b"1e999",
    b"\xff\xfe",
    b'"\\ud800"',
    b"",
    b'{"a":1}\x00',
    b"9" * 5000,  # past int's string conversion limit
]
_HOSTILE_TEXT = [b"", b"\xff", b"\xed\xa0\x80", b"a\x00b", "é".encode() * 300, b"."]


@st.composite
def mutated(draw: st.DrawFn, fields: list[Field], header: bytes) -> bytes:
    """``fields`` as a value with one hostile change, chosen by hypothesis."""
    what = draw(
        st.sampled_from(
            [
                "none", "pad", "union", "enum", "neg_len", "neg_block", "text", "json",
                "long", "truncate", "trailing", "flip", "insert", "delete", "header",
            ]
        )
    )  # fmt: skip
    fs = list(fields)
    names = [f.name for f in fs]
    if what == "pad":
        i = draw(st.sampled_from([i for i, f in enumerate(fs) if f.kind in _VARINT_KINDS]))
        fs[i] = _repad(fs[i], draw(st.integers(1, 4)))
    elif what == "union":
        unions = [i for i, f in enumerate(fs) if f.kind == "union"]
        if unions:
            i = draw(st.sampled_from(unions))
            idx = draw(st.sampled_from([-1, 2, 3, 63, 2**31, -(2**40)]))
            fs[i] = Field(fs[i].name, "union", varint(idx) + fs[i].data[1:])
    elif what == "enum" and "kind" in names:
        i = names.index("kind")
        idx = draw(st.sampled_from([-1, len(kind_symbols()), 1000, 2**62]))
        fs[i] = Field("kind", "enum", varint(idx, pad=draw(st.integers(0, 2))))
    elif what == "neg_len":
        lens = [i for i, f in enumerate(fs) if f.kind == "bytes"]
        i = draw(st.sampled_from(lens))
        # one-byte negatives too: a fast path that reads ``x >> 1`` takes them for lengths
        n = draw(st.one_of(st.integers(-64, -1), st.integers(-(2**62), -1)))
        fs[i] = Field(fs[i].name, "bytes", varint(n) + fs[i].data[1:])
    elif what == "neg_block" and "attributes" in names:
        i = names.index("attributes")
        pairs = draw(st.lists(st.tuples(st.text(max_size=4), st.text(max_size=4)), max_size=3))
        body = b"".join(text(k) + text(v) for k, v in pairs)
        size = draw(st.sampled_from([len(body), len(body) + 1, 0, -5]))
        count = -len(pairs) if pairs else draw(st.sampled_from([-1, -(2**40)]))
        fs[i] = Field("attributes", "map", varint(count) + varint(size) + body + b"\x00")
    elif what == "text":
        strs = [i for i, f in enumerate(fs) if f.kind == "bytes" and f.name != "raw"]
        i = draw(st.sampled_from(strs))
        fs[i] = Field(fs[i].name, "bytes", blob(draw(st.sampled_from(_HOSTILE_TEXT))))
    elif what == "json" and "request" in names:
        i = names.index(draw(st.sampled_from(["request", "response"])))
        fs[i] = Field(fs[i].name, "bytes", blob(draw(st.sampled_from(_HOSTILE_JSON))))
    elif what == "long":
        longs = [i for i, f in enumerate(fs) if f.kind == "long"]
        i = draw(st.sampled_from(longs))
        n = draw(st.sampled_from([-1, -(2**63), 2**63 - 1, 2**62, 10**15, -(10**15)]))
        fs[i] = Field(fs[i].name, "long", varint(n))
    if "request" in names and draw(st.booleans()):
        # a second change: non-canonical JSON behind whatever sent the peek to the codec
        # (issue 10, item 1 is "pad" on a union index plus this)
        i = names.index("request")
        fs[i] = Field("request", "bytes", blob(b'{"b":1, "a":2}'))
    value = join(header, fs)
    if what == "truncate":
        value = value[: draw(st.integers(0, len(value) - 1))]
    elif what == "trailing":
        value += draw(st.binary(min_size=1, max_size=8))
    elif what == "flip":
        i = draw(st.integers(0, len(value) - 1))
        value = value[:i] + bytes([value[i] ^ draw(st.integers(1, 255))]) + value[i + 1 :]
    elif what == "insert":
        i = draw(st.integers(0, len(value)))
        value = value[:i] + draw(st.binary(min_size=1, max_size=4)) + value[i:]
    elif what == "delete":
        i = draw(st.integers(0, len(value) - 1))
        value = value[:i] + value[i + draw(st.integers(1, 4)) :]
    elif what == "header":
        value = draw(st.binary(max_size=10)) + value[10:]
    return value


@st.composite
def raw_records(draw: st.DrawFn) -> list[tuple[bytes | None, bytes | None, int]]:
    """(key, value, partition) of a stream of raw records: good, mutated and arbitrary.
    Half the streams open with a run's first two events, so what follows meets a run the
    book holds: the case the C take seals itself (and declines on whatever is hostile)."""
    out: list[tuple[bytes | None, bytes | None, int]] = []
    next_seq = dict.fromkeys(RUNS, 0)
    if draw(st.booleans()):
        run = draw(st.sampled_from(RUNS))
        for seq, kind in enumerate(["RUN_STARTED", "TOOL_CALL"]):
            value = join(trace_header(), event_fields(run, seq, kind=kind))
            out.append((run.encode(), value, partition_for(run.encode(), PARTS)))
        next_seq[run] = 2
    for _ in range(draw(st.integers(1, 14))):
        run = draw(st.sampled_from(RUNS))
        key: bytes | None = run.encode()
        part = partition_for(key, PARTS)
        pick = draw(st.sampled_from(["good", "good", "mutated", "mutated", "bytes", "none"]))
        seq = next_seq[run] + draw(st.sampled_from([0, 0, 0, 1, 2, -1]))
        kind = "RUN_STARTED" if seq == 0 else draw(st.sampled_from(["TOOL_CALL", "RUN_FINISHED"]))
        fields = event_fields(run, max(seq, 0), kind=kind)
        value: bytes | None
        if pick == "good":
            value = join(trace_header(), fields)
            next_seq[run] = max(next_seq[run], seq + 1)
        elif pick == "mutated":
            value = draw(mutated(fields, trace_header()))
        elif pick == "bytes":
            value = draw(st.binary(max_size=300))
        else:
            value = None
        if draw(st.integers(0, 9)) == 0:
            key = draw(st.sampled_from([None, b"", b"other", b"\xff"]))
        if draw(st.integers(0, 9)) == 0:
            part = (part + 1) % PARTS
        out.append((key, value, part))
    return out


# -- the sequencer's rules -------------------------------------------------------------------


def _book() -> RunBook:
    return RunBook(
        raw_topic="p.raw",
        partitions=PARTS,
        sequencer_id="prop",
        gap_timeout_us=1_000,
        max_gap=5,
        history=lambda run_id, partition, first, last: {},
    )


class _Counted:
    """An extension whose ``take`` counts the messages it took itself (not left to Python)."""

    def __init__(self, module: ModuleType, counts: Counter[str], name: str) -> None:
        self._module, self._counts, self._name = module, counts, name

    def take(self, msgs: list[Message], start: int, ctx: tuple[object, ...]) -> Any:
        got = self._module.take(msgs, start, ctx)
        # the sequencer's returns where it stopped; the archiver's (stop, partition, records)
        stop: int = got[0] if isinstance(got, tuple) else got
        self._counts[self._name] += stop - start
        return got

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._module, attr)


def _sequencer(book: RunBook) -> Sequencer:
    s = Sequencer(Settings(topic_prefix="p", partitions=PARTS), signer=_SIGNER, instance_id="p")
    assert s.step.native is not None, "the sequencer's C path is not built or not armed"
    s.step.book = book
    return s


def _outcome(book: RunBook, out: BatchOutput) -> tuple[object, ...]:
    """Everything the rules decided, comparable between two books."""
    return (
        [(s.run.run_id, s.seq, s.hash, s.source_partition, s.source_offset) for s in out.sealed],
        [(d.source_offset, d.reason) for d in out.dlq],
        out.duplicates,
        sorted((r.run_id, r.next_seq, r.last_hash, sorted(r.held)) for r in book.runs.values()),
    )


def test_no_raw_record_raises_and_every_one_is_accounted_for() -> None:
    """On the path production runs (the C take, the rules where it declines), pinned to the
    rules alone; the C take and the fast peek must both have been reached."""
    counts: Counter[str] = Counter()

    @BOUNDED
    @given(raw_records())
    def check(records: list[tuple[bytes | None, bytes | None, int]]) -> None:
        msgs = [
            Message(topic="p.raw", partition=part, offset=i, key=key, value=value)
            for i, (key, value, part) in enumerate(records)
        ]
        counts["peeked"] += sum(v is not None and peek_event(v) is not None for _, v, _ in records)
        book, out = _book(), BatchOutput()
        real = _step._cseal
        assert real is not None
        _step._cseal = _Counted(real, counts, "c_sealed")  # type: ignore[assignment]
        try:
            _sequencer(book).step.apply_all(msgs, out, NOW_US)
        finally:
            _step._cseal = real
        alone, alone_out = _book(), BatchOutput()
        for offset, (key, value, part) in enumerate(records):
            alone.apply(alone_out, key, value, part, offset, now_us=NOW_US)
        assert _outcome(book, out) == _outcome(alone, alone_out), "the C path decided otherwise"
        _check_accounting(book, out, records)

    check()
    assert counts["peeked"] > 0, "no generated value reached peek_event"
    assert counts["c_sealed"] > 0, "no generated value was sealed by the C path"


def _check_accounting(
    book: RunBook, out: BatchOutput, records: list[tuple[bytes | None, bytes | None, int]]
) -> None:
    """Every record sealed, held, in the DLQ or a counted duplicate, once; what was sealed
    decodes, is canonical and links into one chain per run."""
    book.sweep(
        out, now_us=NOW_US + 10**12
    )  # every gap times out: held events are sealed behind GAPs
    held = [
        (h.source_partition, h.source_offset) for r in book.runs.values() for h in r.held.values()
    ]
    sealed = [(s.source_partition, s.source_offset) for s in out.sealed if s.source_offset >= 0]
    dlq = [(d.source_partition, d.source_offset) for d in out.dlq]
    places = sealed + dlq + held
    assert len(places) == len(set(places)), "a record is accounted for twice"
    assert len(places) + out.duplicates == len(records), "a record went missing"
    for d in out.dlq:
        assert d.reason is not DlqReason.INTERNAL, f"unforeseen failure: {d.detail}"
        assert d.detail and d.source_topic == "p.raw"
        assert d.value == records[d.source_offset][1], "the DLQ keeps the exact bytes"
    last: dict[str, bytes] = {}
    reference = Codec("TraceEvent")  # fastavro: what the fast paths must never exceed
    for s in out.sealed:
        reference.decode(s.raw)
        ev = decode_event(s.raw)
        assert (ev.run_id, ev.seq) == (s.run.run_id, s.seq)
        assert s.prev_hash == last.get(ev.run_id, s.run.hashes[-1])
        assert s.hash == link(s.prev_hash, s.raw)
        last[ev.run_id] = s.hash


@BOUNDED
@given(st.binary(max_size=400))
def test_arbitrary_bytes_never_raise_from_the_peek_or_the_rules(value: bytes) -> None:
    reference = Codec("TraceEvent")
    for v in (value, trace_header() + value):
        peeked = peek_event(v)
        if peeked is not None:  # what the peek reads, fastavro reads the same
            ev = reference.decode(v)
            assert (ev["run_id"], ev["seq"], ev["kind"], ev["request"], ev["response"]) == (
                peeked.run_id, peeked.seq, peeked.kind.value, peeked.request, peeked.response
            )  # fmt: skip
    book = _book()
    out = BatchOutput()
    book.apply(out, b"r0", trace_header() + value, partition_for(b"r0", PARTS), 0, NOW_US)
    book.apply(out, b"r0", value, partition_for(b"r0", PARTS), 1, NOW_US)
    held = sum(len(r.held) for r in book.runs.values())
    assert len(out.sealed) + len(out.dlq) + held + out.duplicates == 2
    assert all(d.reason is not DlqReason.INTERNAL for d in out.dlq), out.dlq


# -- the archiver ----------------------------------------------------------------------------


@st.composite
def sealed_records(draw: st.DrawFn) -> list[tuple[bytes, bytes | None]]:
    """(key, value) of sealed records: valid chains of two runs, mutated, arbitrary, gaps."""
    out: list[tuple[bytes, bytes | None]] = []
    chains = {run: (0, None) for run in RUNS[:2]}
    for _ in range(draw(st.integers(1, 12))):
        run = draw(st.sampled_from(RUNS[:2]))
        seq, prev = chains[run]
        later = st.sampled_from(["TOOL_CALL"] * 5 + ["RUN_FINISHED"])
        kind = "RUN_STARTED" if seq == 0 else draw(later)
        raw = join(trace_header(), event_fields(run, seq, kind=kind))
        fields = sealed_fields(run, seq, raw, prev_hash=prev)
        picks = ["good", "good", "good", "mutated", "forged", "bytes", "none", "skip"]
        pick = draw(st.sampled_from(picks))
        value: bytes | None
        if pick == "forged":
            # A forger computes the hash: the chain holds, but the raw event or a field the
            # hash does not cover is hostile. Archived or quarantined, it must never break
            # the archive (every archived segment is read back below).
            forged_raw = draw(mutated(event_fields(run, seq, kind=kind), trace_header()))
            fields = sealed_fields(run, seq, forged_raw, prev_hash=prev)
            i, name = draw(st.sampled_from(list(enumerate(f.name for f in fields))))
            hostile = {
                "sealed_at": [varint(2**62), varint(-(2**62)), varint(0, pad=3)],
                "source_partition": [varint(2**31), varint(-(2**31) - 1), b"\x7f"],
                "source_offset": [varint(-(2**63)), varint(5, pad=4)],
                "sequencer_id": [b"\x02\xff", b"\x01", blob("é".encode() * 3, pad=2)],
                "raw": [blob(forged_raw, pad=2)],
                "run_id": [blob(run.encode(), pad=1)],
            }.get(name)
            if hostile:
                fields[i] = Field(name, fields[i].kind, draw(st.sampled_from(hostile)))
            value = join(sealed_header(), fields)
        elif pick == "good":
            value = join(sealed_header(), fields)
            chains[run] = (seq + 1, link(fields[2].data, raw))
        elif pick == "mutated":
            value = draw(mutated(fields, sealed_header()))
        elif pick == "bytes":
            value = draw(st.binary(max_size=200))
        elif pick == "skip":  # this seq never arrives: what follows is a hole
            chains[run] = (seq + 1, link(fields[2].data, raw))
            continue
        else:
            value = None
        out.append((run.encode(), value))
    return out


_SIGNER = Ed25519Signer.generate("hostile-log")


def _archive(store: FileStore, records: list[tuple[bytes, bytes | None]]) -> Archiver:
    """Feed the records to the archiver, then a checkpoint record that lists every record
    that parses (the sequencer's log holds whatever it wrote; hostile or not, what is in
    the log is archived and must read back, what is not is quarantined)."""
    settings = Settings(archive_url=f"file://{store.root}")
    archiver = Archiver(settings, store=store, verifiers=[_SIGNER.verifier])
    msgs = [
        Message(topic=archiver.topic, partition=0, offset=i, key=k, value=v)
        for i, (k, v) in enumerate(records)
    ]
    leaves = []
    for _, v in records:
        try:
            ev = parse_sealed(v or b"")
            if unarchivable(ev.run_id, ev.sealed_at) is None:  # the sequencer never seals those
                leaves.append(leaf_hash(ev.run_id, ev.seq, ev.hash))
        except (SchemaError, LogError):
            continue
    origin = log_origin(settings.log_origin, settings.topic_prefix, 0)
    rec, _ = CheckpointRecord.build(CompactTree(), leaves, origin, _SIGNER)
    msgs.append(
        Message(
            topic=archiver.topic,
            partition=0,
            offset=len(records),
            key=CHECKPOINT_KEY,
            value=rec.encode(),
            headers=[(RECORD_HEADER, RECORD_HEADER_CHECKPOINT)],
        )
    )
    archiver.take(msgs)
    for part in archiver.parts.values():
        archiver.flusher.flush(part)
        archiver.flusher.wait(part)
    return archiver


def test_no_sealed_record_stops_the_archiver_and_every_one_is_accounted_for() -> None:
    """Through the archiver's C take and its Python path; the C take and the armed Python
    walk must both have been reached."""
    counts: Counter[str] = Counter()

    @BOUNDED
    @given(sealed_records())
    def check(records: list[tuple[bytes, bytes | None]]) -> None:
        counts["walked"] += sum(v is not None and walk_sealed(v) is not None for _, v in records)
        real = _intake._ctake
        assert real is not None and armed_walks() is not None, "the C take cannot run"
        _intake._ctake = _Counted(real, counts, "c_taken")  # type: ignore[assignment]
        try:
            _check_archived(records)
        finally:
            _intake._ctake = real

    check()
    assert counts["walked"] > 0, "no generated value reached the armed sealed walk"
    assert counts["c_taken"] > 0, "no generated value was taken by the C path"


def _check_archived(records: list[tuple[bytes, bytes | None]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = FileStore(tmp)
        archiver = _archive(store, records)
        st_ = archiver.stats
        assert st_.events_archived + st_.events_skipped + st_.events_quarantined == len(records)
        quarantined = [Quarantined.from_json(store.get(i.key)) for i in store.list("quarantine/")]
        assert len(quarantined) == st_.events_quarantined
        for q in quarantined:
            assert q.reason != "internal", f"unforeseen failure: {q.detail}"
            assert q.detail and q.value == records[q.offset][1], "the exact bytes are kept"
        for run in RUNS[:2]:
            if store.list(run_prefix(run)):  # what was archived reads back, in the log
                try:
                    loaded = load_from_archive(store, run)
                except ChainError as exc:  # e.g. the log lists two records for one seq
                    assert exc.obj, "a failure names the object"
                    continue
                assert loaded.log_evidence is not None
                check_run_log(
                    run,
                    [RunEvent(int(r["seq"]), bytes(r["hash"])) for r in loaded.records.rows],
                    loaded.log_evidence,
                    [_SIGNER.verifier],
                    require_finished=False,
                )


@BOUNDED
@given(st.binary(max_size=300).flatmap(lambda b: st.sampled_from([b, sealed_header() + b])))
def test_the_sealed_parser_reads_or_says_schema_error(value: bytes) -> None:
    try:
        parse_sealed(value)
    except SchemaError as exc:
        assert str(exc)


#: Found by the property above: leaves 2..3 listed but unread, then leaf 4 taken by a record
#: read earlier that is quarantined (its sealed_at is out of range). The unread hole ran on
#: over leaf 4 as well, so the log grew one leaf past its checkpoint and the flush stopped
#: the archiver with "flush at size 6 without the checkpoint of that size (a bug)".
UNREAD_THEN_QUARANTINED: list[tuple[bytes, bytes | None]] = [
    (
        b"r0",
        bytes.fromhex(
            "c30156e7e7d30b5c62aa04723000deb837aa040c2440e56aade28bc5140159106b9c68d7cb74833b"
            "9c8590dbb51ac75d83b3f118e113299540fedd9bccd138f03393958bae14e08d9a38e2988e8478c3"
            "01507a36026c006d8d0472300000facecfd8eae5b0060261023102680c70797465737406302e3100"
            "000e7b2271223a317d086e756c6c00000000008080f281838985060000107365712d74657374"
        ),
    ),
    (
        b"r0",
        bytes.fromhex(
            "c30156e7e7d30b5c62aa04723002c75d83b3f118e113299540fedd9bccd138f03393958bae14e08d"
            "9a38e2988e846b1a802b20c59b6c92152161cb2ed3141b302ca662317fdc5299ef1ce04e8be178c3"
            "01507a36026c006d8d0472300204fccecfd8eae5b0060261023102680c70797465737406302e3100"
            "000e7b2271223a317d086e756c6c00000000008080f281838985060000107365712d74657374"
        ),
    ),
    (
        b"r1",
        bytes.fromhex(
            "c30156e7e7d30b5c62aa047231009ac85c113754217df114a74af340ff9b71472419332e3fd504d4"
            "66b06b541fb7e584f651c0dafb5bcb2fe4a6b993f2fce06fef50d46bca0e7e092c14b87ac85178c3"
            "01507a36026c006d8d0472310000facecfd8eae5b0060261023102680c70797465737406302e3100"
            "000e7b2271223a317d086e756c6c0000000000ffffffffffffffffff010000107365712d74657374"
        ),
    ),
    (
        b"r0",
        bytes.fromhex(
            "c30156e7e7d30b5c62aa047230046b1a802b20c59b6c92152161cb2ed3141b302ca662317fdc5299"
            "ef1ce04e8be14e2fe27b790266771fc748f5a838a46333070b9cc9335d508d9d5bd3c15012f378c3"
            "01507a36026c006d8d0472300404fececfd8eae5b0060261023102680c70797465737406302e3100"
            "000e7b2271223a317d086e756c6c00000000008080f281838985060000107365712d74657374"
        ),
    ),
    (
        b"r0",
        bytes.fromhex(
            "c30156e7e7d30b5c62aa047230064e2fe27b790266771fc748f5a838a46333070b9cc9335d508d9d"
            "5bd3c15012f3a880b8d5b1cc0105fae8bbe5012d84ba9d2c2e1df841d8251b10c3cfc7a259bc78c3"
            "01507a36026c006d8d047230060480cfcfd8eae5b0060261023102680c70797465737406302e3100"
            "000e7b2271223a317d086e756c6c00000000008080f281838985060000107365712d74657374"
        ),
    ),
    (
        b"r1",
        bytes.fromhex(
            "c30156e7e7d30b5c62aa047231009ac85c113754217df114a74af340ff9b71472419332e3fd504d4"
            "66b06b541fb7e584f651c0dafb5bcb2fe4a6b993f2fce06fef50d46bca0e7e092c14b87ac85178c3"
            "01507a36026c006d8d0472310000facecfd8eae5b0060261023102680c70797465737406302e3100"
            "000e7b2271223a317d086e756c6c00000000008080f281838985060000107365712d74657374"
        ),
    ),
]


def test_unread_leaves_before_a_quarantined_one_end_where_it_starts() -> None:
    _check_archived(UNREAD_THEN_QUARANTINED)
