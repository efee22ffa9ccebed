"""Gathering a run's log evidence from checkpoint records, and the C2SP tlog-proof format."""

from __future__ import annotations

import hashlib

import pytest

from tracevault.errors import ConfigError, LogError
from tracevault.transparency import (
    CheckpointRecord,
    CompactTree,
    CosignatureSigner,
    Ed25519Signer,
    FoundCheckpoint,
    RunEvent,
    RunLeaf,
    TlogProof,
    check_run_log,
    compact_source,
    fast_inclusion_proof,
    hash_leaf,
    inclusion_proof,
    leaf_hash,
    list_source,
    load_witness_verifiers,
    run_log_evidence,
)

ORIGIN = "tv.test/p/0"


def _leaves(n: int, tag: bytes = b"x") -> list[bytes]:
    return [hash_leaf(tag + b"%d" % i) for i in range(n)]


def test_the_bottom_up_proof_is_the_rfc_proof() -> None:
    for size in range(1, 70):
        src = list_source(_leaves(size))
        for i in range(size):
            assert fast_inclusion_proof(i, size, src) == inclusion_proof(i, size, src), (i, size)


def test_a_compact_tree_and_the_leaves_after_it_prove_those_leaves() -> None:
    leaves = _leaves(45)
    full = list_source(leaves)
    for start in (0, 1, 6, 13, 32, 40):
        tree = CompactTree()
        tree.extend(leaves[:start])
        src = compact_source(tree, leaves[start:])
        for i in range(start, 45):
            assert fast_inclusion_proof(i, 45, src) == inclusion_proof(i, 45, full)
    tree = CompactTree()
    tree.extend(leaves[:13])
    with pytest.raises(LogError, match="inside the compact tree"):
        compact_source(tree, leaves[13:])(1, 2)  # leaves 4..5: inside the subtree 0..7


def _records(
    key: Ed25519Signer, batches: list[list[bytes]], start: CompactTree | None = None
) -> list[FoundCheckpoint]:
    tree = start or CompactTree()
    out = []
    for n, batch in enumerate(batches):
        rec, tree = CheckpointRecord.build(tree, batch, ORIGIN, key)
        out.append(FoundCheckpoint(rec, f"sealed[0]@{100 * n}"))
    return out


def _run(n: int) -> tuple[list[RunEvent], list[RunLeaf]]:
    events = [
        RunEvent(s, hashlib.sha256(b"e%d" % s).digest(), finishes=s == n - 1) for s in range(n)
    ]
    leaves = [RunLeaf(e.seq, leaf_hash("run-1", e.seq, e.chain_hash), f"r{e.seq}") for e in events]
    return events, leaves


def test_a_run_across_three_transactions_is_proven_against_the_last_checkpoint() -> None:
    key = Ed25519Signer.generate("tv.test")
    events, run = _run(7)
    prior = CompactTree()
    prior.extend(_leaves(11, b"before"))
    other = _leaves(9, b"other")
    batches = [
        [other[0], run[0].leaf, run[1].leaf, other[1]],
        [run[2].leaf, other[2], run[3].leaf, run[4].leaf],
        [other[3], run[5].leaf, run[6].leaf, other[4], other[5]],
    ]
    found = _records(key, batches, prior)
    ev = run_log_evidence(ORIGIN, "run-1", run, found, [key.verifier])
    assert [p.index for p in ev.leaves] == [12, 13, 15, 17, 18, 20, 21]
    assert len(ev.others) == 1 and ev.checkpoint_obj == "sealed[0]@200"
    cp = check_run_log("run-1", events, ev, [key.verifier])
    assert cp.size == 11 + 13


def test_a_record_no_checkpoint_lists_is_named() -> None:
    key = Ed25519Signer.generate("tv.test")
    _, run = _run(4)
    forged = RunLeaf(3, leaf_hash("run-1", 3, b"\x07" * 32), "sealed[0]@9")
    found = _records(key, [[run[0].leaf, run[1].leaf, run[2].leaf], [run[3].leaf]])
    with pytest.raises(LogError, match=r"L2 inclusion: run run-1 seq 3 in sealed\[0\]@9") as e:
        run_log_evidence(ORIGIN, "run-1", [*run[:3], forged, run[3]], found, [key.verifier])
    assert (e.value.seq, e.value.obj) == (3, "sealed[0]@9")


def test_a_checkpoint_by_an_unknown_key_or_a_missing_one_is_named() -> None:
    key, stranger = Ed25519Signer.generate("tv.test"), Ed25519Signer.generate("tv.test")
    _, run = _run(4)
    found = _records(key, [[run[0].leaf], [run[1].leaf], [run[2].leaf, run[3].leaf]])
    with pytest.raises(LogError, match=r"L1 signature: checkpoint record sealed\[0\]@0"):
        run_log_evidence(ORIGIN, "run-1", run, found, [stranger.verifier])
    with pytest.raises(LogError, match=r"L4 consistency: checkpoint record sealed\[0\]@200"):
        run_log_evidence(ORIGIN, "run-1", run, [found[0], found[2]], [key.verifier])
    with pytest.raises(LogError, match="L1 signature: no checkpoint record"):
        run_log_evidence(ORIGIN, "run-1", run, [], [key.verifier])


def test_tlog_proof_text_round_trips_and_bad_text_is_named() -> None:
    note = "o\n1\nAAAA\n\n\u2014 k abc=\n"
    p = TlogProof(5, (b"\x01" * 32, b"\x02" * 32), note, extra=b"hi")
    text = p.encode()
    assert text.startswith("c2sp.org/tlog-proof@v1\nextra aGk=\nindex 5\n")
    assert TlogProof.parse(text) == p
    assert TlogProof.parse(TlogProof(0, (), note).encode()) == TlogProof(0, (), note)
    for bad, why in [
        (text.replace("index 5", "index 05"), "leading zeroes"),
        (text.replace("@v1", "@v2"), "not a c2sp"),
        (text.replace("index 5\n", ""), "no index"),
    ]:
        with pytest.raises(LogError, match=why):
            TlogProof.parse(bad, "log/x.tlog-proof")


def test_witness_keys_load_inline_and_from_a_file(tmp_path) -> None:
    a, b = CosignatureSigner.generate("w1.example"), CosignatureSigner.generate("w2.example")
    f = tmp_path / "witnesses"
    f.write_text(f"# our witnesses\n{b.verifier.vkey}\n")
    got = load_witness_verifiers([a.verifier.vkey, f"@{f}"])
    assert [(v.name, v.key_id) for v in got] == [(a.name, a.key_id), (b.name, b.key_id)]
    with pytest.raises(ConfigError):
        load_witness_verifiers(["not-a-key"])
    with pytest.raises(ConfigError, match="log key"):  # a log may not witness itself
        load_witness_verifiers([Ed25519Signer.generate("w3.example").verifier.vkey])


def test_l2_over_ranges_names_each_altered_seq() -> None:
    """Ranges of consecutive leaves are proven by subtree; any one altered event is still
    named by its own seq, wherever it sits in a range."""
    key = Ed25519Signer.generate("tv.test")
    events, run = _run(23)
    other = _leaves(6, b"other")
    listed = [
        other[0],
        *[r.leaf for r in run[:17]],
        other[1],
        other[2],
        *[r.leaf for r in run[17:]],
    ]
    found = _records(key, [listed[:9], listed[9:20], [*listed[20:], *other[3:]]])
    ev = run_log_evidence(ORIGIN, "run-1", run, found, [key.verifier])
    check_run_log("run-1", events, ev, [key.verifier])
    for seq in range(23):
        bad = list(events)
        bad[seq] = RunEvent(seq, b"\x09" * 32, finishes=bad[seq].finishes)
        with pytest.raises(LogError, match=f"L2 inclusion: run run-1 seq {seq} in r{seq} "):
            check_run_log("run-1", bad, ev, [key.verifier])


def test_the_bulk_leaf_hasher_is_leaf_hash_and_names_what_does_not_fit() -> None:
    from tracevault.transparency import leaf_hasher

    leaf = leaf_hasher("run-é")
    assert leaf(7, b"\x01" * 32) == leaf_hash("run-é", 7, b"\x01" * 32)
    for seq, h, why in [(-1, b"\x01" * 32, "seq -1"), (1 << 64, b"\x01" * 32, "seq 1844"),
                        (1, b"\x01", "not 32 bytes")]:  # fmt: skip
        with pytest.raises(LogError, match=why):
            leaf(seq, h)
