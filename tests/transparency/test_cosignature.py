"""C2SP tlog-cosignature (cosignature/v1): the signed message, keys, and check_run_log's quorum."""

from __future__ import annotations

import base64
import os
import struct

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from tracevault.errors import ConfigError, LogError
from tracevault.transparency import (
    Checkpoint,
    CosignatureSigner,
    Ed25519Signer,
    LeafProof,
    RunEvent,
    RunLogEvidence,
    add_cosignature,
    check_run_log,
    cosignature_time,
    inclusion_proof,
    leaf_hash,
    list_source,
    load_witness_signer,
    load_witness_verifiers,
    open_note,
    parse_witness_vkey,
    sign_note,
    split_note,
    tree_root,
    write_private_key,
)


def test_signature_is_timestamp_then_ed25519_over_the_spec_message() -> None:
    """The bytes the spec fixes, checked with the raw Ed25519 key, not through our verifier."""
    w = CosignatureSigner("witness.example/w1", bytes(range(32)), clock=lambda: 1679315147.9)
    body = b"example.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n"
    sig = w.sign(body)
    assert len(sig) == 72 and struct.unpack(">Q", sig[:8])[0] == 1679315147
    assert cosignature_time(sig) == 1679315147
    msg = b"cosignature/v1\ntime 1679315147\n" + body
    Ed25519PublicKey.from_public_bytes(w.verifier.public_key).verify(sig[8:], msg)
    assert w.verifier.verify(body, sig)
    assert not w.verifier.verify(body + b"x\n", sig)
    # a plain note signature by the same key is no cosignature: the prefix separates them
    plain = Ed25519Signer("witness.example/w1", bytes(range(32)))
    assert not w.verifier.verify(body, sig[:8] + plain.sign(body))


def test_key_id_uses_type_0x04_and_vkeys_round_trip() -> None:
    w = CosignatureSigner.generate("w.example")
    log = Ed25519Signer("w.example", base64.b64decode(w.skey.split("+", 4)[4])[1:])
    assert w.verifier.public_key == log.verifier.public_key
    assert w.key_id != log.key_id  # same key, other type, other id (c2sp.org/signed-note)
    assert base64.b64decode(w.verifier.vkey.split("+", 2)[2])[0] == 0x04
    assert parse_witness_vkey(w.verifier.vkey) == w.verifier
    assert CosignatureSigner.from_skey(w.skey).verifier == w.verifier
    with pytest.raises(ConfigError, match="log key"):
        parse_witness_vkey(log.verifier.vkey)
    with pytest.raises(ConfigError, match="it is a log key"):
        CosignatureSigner.from_skey(log.skey)
    name, _kid, blob = w.verifier.vkey.split("+", 2)
    with pytest.raises(ConfigError, match="has id"):
        parse_witness_vkey(f"{name}+00000000+{blob}")


def test_witness_key_file_and_vkey_file(tmp_path: os.PathLike[str]) -> None:
    w = CosignatureSigner.generate("w.example")
    path = os.path.join(tmp_path, "witness.key")
    write_private_key(path, w)
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert load_witness_signer(path).verifier == w.verifier
    vpath = os.path.join(tmp_path, "witnesses.txt")
    with open(vpath, "w") as f:
        f.write("# witnesses\n" + w.verifier.vkey + "\n")
    assert load_witness_verifiers([f"@{vpath}"]) == [w.verifier]


def test_add_cosignature_keeps_the_log_signature_and_replaces_its_own() -> None:
    log = Ed25519Signer.generate("log.example/0")
    w = CosignatureSigner.generate("w.example")
    note = sign_note(Checkpoint("log.example/0", 0, tree_root(0, list_source([]))).body(), [log])
    once = add_cosignature(note, w)
    twice = add_cosignature(once, w)
    _, sigs = split_note(twice)
    assert [s.name for s in sigs] == ["log.example/0", "w.example"]
    _, good = open_note(twice, [log.verifier, w.verifier])
    assert set(good) == {log.verifier, w.verifier}


def _evidence(log: Ed25519Signer, salt: int = 0) -> tuple[list[RunEvent], RunLogEvidence]:
    origin = "tv/p/0"
    hashes = [bytes([i + salt]) * 32 for i in range(3)]
    events = [RunEvent(i, hashes[i], finishes=i == 2) for i in range(3)]
    leaves = [leaf_hash("r1", i, hashes[i]) for i in range(3)]
    src = list_source(leaves)
    note = sign_note(Checkpoint(origin, 3, tree_root(3, src)).body(), [log])
    proofs = tuple(LeafProof(i, i, tuple(inclusion_proof(i, 3, src))) for i in range(3))
    return events, RunLogEvidence(origin, note, proofs)


def test_check_run_log_counts_only_trusted_witnesses() -> None:
    log = Ed25519Signer.generate("tv")
    w1, w2 = CosignatureSigner.generate("w1"), CosignatureSigner.generate("w2")
    events, ev = _evidence(log)
    keys = [log.verifier]
    with pytest.raises(LogError, match="0 trusted witness cosignature"):
        check_run_log("r1", events, ev, keys, witnesses=[w1.verifier], min_witnesses=1)
    cosigned = RunLogEvidence(ev.origin, add_cosignature(ev.checkpoint, w1), ev.leaves)
    check_run_log("r1", events, cosigned, keys, witnesses=[w1.verifier], min_witnesses=1)
    # an untrusted witness's cosignature does not count
    with pytest.raises(LogError, match="0 trusted witness"):
        check_run_log("r1", events, cosigned, keys, witnesses=[w2.verifier], min_witnesses=1)
    with pytest.raises(LogError, match="1 trusted witness cosignature"):
        check_run_log(
            "r1", events, cosigned, keys, witnesses=[w1.verifier, w2.verifier], min_witnesses=2
        )
    # a cosignature of another checkpoint, pasted under this one, is an altered note
    _, sigs = split_note(cosigned.checkpoint)
    other_events, other = _evidence(log, salt=7)
    pasted = other.checkpoint + sigs[1].line()
    with pytest.raises(LogError, match=r"w1 \(\w+\) does not verify"):
        check_run_log(
            "r1",
            other_events,
            RunLogEvidence(other.origin, pasted, other.leaves),
            keys,
            witnesses=[w1.verifier],
            min_witnesses=1,
        )
