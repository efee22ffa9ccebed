"""The ordered log checks L1-L4 against evidence an attacker altered, one way at a time."""

from __future__ import annotations

import dataclasses
import hashlib

import pytest

from tracevault.errors import LogError
from tracevault.transparency import (
    Checkpoint,
    Ed25519Signer,
    LeafProof,
    RunEvent,
    RunLogEvidence,
    check_run_log,
    consistency_proof,
    hash_leaf,
    inclusion_proof,
    leaf_hash,
    list_source,
    sign_note,
    tree_root,
)

ORIGIN = "tv.test/agent-traces/0"


def _world(n_other: int = 5) -> tuple[Ed25519Signer, list[RunEvent], list[bytes]]:
    key = Ed25519Signer.generate("tv.test")
    events = [RunEvent(s, hashlib.sha256(b"e%d" % s).digest(), finishes=s == 3) for s in range(4)]
    leaves = [hash_leaf(b"other%d" % i) for i in range(n_other)]
    leaves += [leaf_hash("run-1", e.seq, e.chain_hash) for e in events]
    return key, events, leaves


def _evidence(key: Ed25519Signer, leaves: list[bytes], first: int, n: int) -> RunLogEvidence:
    src = list_source(leaves)
    size = len(leaves)
    note = sign_note(Checkpoint(ORIGIN, size, tree_root(size, src)).body(), [key])
    proofs = tuple(
        LeafProof(s, first + s, tuple(inclusion_proof(first + s, size, src))) for s in range(n)
    )
    return RunLogEvidence(ORIGIN, note, proofs)


def test_a_run_in_the_log_passes_and_each_alteration_is_named() -> None:
    key, events, leaves = _world()
    ev = _evidence(key, leaves, 5, 4)
    assert check_run_log("run-1", events, ev, [key.verifier]).size == 9
    stranger = Ed25519Signer.generate("tv.test")
    with pytest.raises(LogError, match="L1 signature"):
        check_run_log("run-1", events, ev, [stranger.verifier])
    changed = [*events[:2], events[2]._replace(chain_hash=b"\x01" * 32), events[3]]
    with pytest.raises(LogError, match="L2 inclusion: run run-1 seq 2") as e:
        check_run_log("run-1", changed, ev, [key.verifier])
    assert e.value.seq == 2
    with pytest.raises(LogError, match="L3 end"):
        check_run_log("run-1", events[:3], ev, [key.verifier])
    assert check_run_log("run-1", events[:3], ev, [key.verifier], require_finished=False)
    with pytest.raises(LogError, match="witness"):
        check_run_log("run-1", events, ev, [key.verifier], min_witnesses=1)


def test_a_forked_older_checkpoint_is_caught() -> None:
    key, events, leaves = _world()
    ev = _evidence(key, leaves, 5, 4)
    src = list_source(leaves)
    old_root = tree_root(6, src)
    good = sign_note(Checkpoint(ORIGIN, 6, old_root).body(), [key])
    proof = tuple(consistency_proof(6, 9, src))
    ok = dataclasses.replace(ev, others=((good, proof),))
    check_run_log("run-1", events, ok, [key.verifier])
    fork = sign_note(Checkpoint(ORIGIN, 6, hashlib.sha256(b"x").digest()).body(), [key])
    with pytest.raises(LogError, match="L4 consistency"):
        check_run_log(
            "run-1", events, dataclasses.replace(ev, others=((fork, proof),)), [key.verifier]
        )
