"""C2SP signed notes, checkpoints and the checkpoint record, as an attacker would try them."""

from __future__ import annotations

import os

import pytest

from tracevault.errors import ConfigError, LogError
from tracevault.transparency import (
    Checkpoint,
    CheckpointRecord,
    CompactTree,
    Ed25519Signer,
    hash_leaf,
    load_signer,
    load_verifiers,
    open_note,
    parse_vkey,
    sign_note,
    write_private_key,
)


def test_signed_note_round_trip_and_tamper() -> None:
    s = Ed25519Signer.generate("log.example/a")
    note = sign_note("hello\n", [s])
    assert note.startswith("hello\n\n\u2014 log.example/a ")
    text, good = open_note(note, [s.verifier])
    assert text == "hello\n" and good == [s.verifier]
    with pytest.raises(LogError, match="does not verify"):
        open_note(note.replace("hello", "hellO"), [s.verifier])
    other = Ed25519Signer.generate("log.example/a")
    with pytest.raises(LogError, match="unknown key"):
        open_note(note, [other.verifier])


def test_vkey_and_skey_round_trip_and_id_is_checked() -> None:
    s = Ed25519Signer.generate("tv")
    v = parse_vkey(s.verifier.vkey)
    assert v == s.verifier
    assert Ed25519Signer.from_skey(s.skey).verifier == s.verifier
    name, _kid, blob = s.verifier.vkey.split("+", 2)
    with pytest.raises(ConfigError, match="has id"):
        parse_vkey(f"{name}+00000000+{blob}")


def test_key_file_must_be_owner_only(tmp_path: os.PathLike[str]) -> None:
    s = Ed25519Signer.generate("tv")
    path = os.path.join(tmp_path, "log.key")
    write_private_key(path, s)
    assert load_signer(path).verifier == s.verifier
    with pytest.raises(ConfigError, match="never overwritten"):
        write_private_key(path, s)
    os.chmod(path, 0o644)
    with pytest.raises(ConfigError, match="chmod 600"):
        load_signer(path)
    vpath = os.path.join(tmp_path, "keys.txt")
    with open(vpath, "w") as f:
        f.write("# trusted\n" + s.verifier.vkey + "\n")
    assert load_verifiers([f"@{vpath}"]) == [s.verifier]


def test_checkpoint_record_verifies_and_catches_a_swapped_leaf() -> None:
    s = Ed25519Signer.generate("tv")
    tree = CompactTree()
    tree.extend([hash_leaf(bytes([i])) for i in range(5)])
    leaves = [hash_leaf(bytes([i])) for i in range(5, 12)]
    rec, after = CheckpointRecord.build(tree, leaves, "tv/agent-traces/0", s)
    back = CheckpointRecord.decode(rec.encode())
    assert back == rec
    ok = back.verify([s.verifier], origin="tv/agent-traces/0")
    assert ok.checkpoint == Checkpoint("tv/agent-traces/0", 12, after.root())
    with pytest.raises(LogError, match="expected"):
        back.verify([s.verifier], origin="tv/agent-traces/1")
    forged = CheckpointRecord(back.note, back.start, back.prefix, (hash_leaf(b"x"), *leaves[1:]))
    with pytest.raises(LogError, match="signed root"):
        forged.verify([s.verifier])
    with pytest.raises(LogError, match="ends inside"):
        CheckpointRecord.decode(rec.encode()[:-1])
