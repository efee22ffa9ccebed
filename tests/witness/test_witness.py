"""The witness's decisions on checkpoint records, against a real file store (no Kafka here).

Each case builds the checkpoint records a sequencer (or a key holder showing a split view)
would write, hands them to the follower's ``handle``, and reads back what the witness stored.
"""

from __future__ import annotations

import base64
import json
import logging
from datetime import timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

from tracevault.archive import ObjectStore, open_store
from tracevault.cli import tracevault
from tracevault.config import Settings
from tracevault.errors import ConfigError, LogError
from tracevault.services.witness import CheckpointRecords
from tracevault.transparency import (
    Checkpoint,
    CheckpointRecord,
    CompactTree,
    CosignatureSigner,
    Ed25519Signer,
    leaf_hash,
    open_note,
    sign_note,
    with_cosignatures,
)
from tracevault.witness import cosigned_checkpoint, cosigned_sizes
from tracevault.witness._core import (
    Cosigned,
    Refused,
    Witness,
    checkpoint_key,
    origin_prefix,
)
from tracevault.witness._known import prefix_root

SETTINGS = Settings(topic_prefix="wt", log_origin="tv.test")
ORIGIN = "tv.test/wt/0"


def _leaves(tag: str, lo: int, hi: int) -> list[bytes]:
    return [leaf_hash(f"{tag}-run", i, bytes([i % 256]) * 32) for i in range(lo, hi)]


class Log:
    """A partition log as the sequencer keeps it: the compact tree, one record per batch."""

    def __init__(self, signer: Ed25519Signer, tag: str = "g") -> None:
        self.signer, self.tag, self.tree = signer, tag, CompactTree()

    def batch(self, n: int) -> bytes:
        leaves = _leaves(self.tag, self.tree.size, self.tree.size + n)
        rec, self.tree = CheckpointRecord.build(self.tree, leaves, ORIGIN, self.signer)
        return rec.encode()


@pytest.fixture
def env(tmp_path: Path) -> tuple[CheckpointRecords, Log, ObjectStore]:
    key = Ed25519Signer.generate("tv.test/log")
    store = open_store(f"file://{tmp_path / 'witness'}", SETTINGS)
    w = Witness(
        store, CosignatureSigner.generate("w1.test"), [key.verifier], retention=timedelta(days=1)
    )
    return CheckpointRecords(SETTINGS, w), Log(key), store


def _refusals(store: ObjectStore) -> list[dict[str, object]]:
    objs = store.list(f"{origin_prefix(ORIGIN)}refusal/")
    return [json.loads(store.get(o.key)) for o in objs]


def _refused(follower: CheckpointRecords, kind: str) -> float:
    value = follower.witness.metrics.registry.get_sample_value(
        "tracevault_witness_refused_total", {"origin": ORIGIN, "kind": kind}
    )
    return value or 0.0


def test_cosigns_each_extension_and_stores_it(
    env: tuple[CheckpointRecords, Log, ObjectStore],
) -> None:
    follower, log, store = env
    for n in (3, 1, 4, 8):
        got = follower.handle(0, log.batch(n))
        assert isinstance(got, Cosigned) and got.new and got.size == log.tree.size
    assert follower.witness.latest(ORIGIN) == (16, log.tree.root())
    stored = store.get(checkpoint_key(ORIGIN, 16)).decode()
    _, good = open_note(stored, [log.signer.verifier, follower.witness.signer.verifier])
    assert len(good) == 2
    assert [o.key.rsplit("/", 1)[1] for o in store.list(origin_prefix(ORIGIN) + "checkpoint/")] == [
        f"{s:020d}" for s in (3, 4, 8, 16)
    ]


def test_a_poll_of_chained_records_costs_one_cosignature(
    env: tuple[CheckpointRecords, Log, ObjectStore],
) -> None:
    follower, log, store = env
    follower.handle(0, log.batch(2))
    batch = [(0, log.batch(n)) for n in (3, 1, 4)]
    [got] = follower.handle_batch(batch)
    assert isinstance(got, Cosigned) and got.new and got.size == 10
    assert [o.key.rsplit("/", 1)[1] for o in store.list(origin_prefix(ORIGIN) + "checkpoint/")] == [
        f"{s:020d}" for s in (2, 10)
    ]
    # a fork in the middle of a poll ends the chain: it is refused, the genuine ones cosigned
    a = log.batch(2)
    fork = Log(log.signer, tag="fork")
    fork.batch(12)
    forked = fork.batch(1)
    b = log.batch(2)
    got_all = follower.handle_batch([(0, a), (0, forked), (0, b)])
    kinds = [g.kind if isinstance(g, Refused) else g.size for g in got_all]
    assert kinds == [12, "fork", 14]


def test_a_reread_record_is_not_cosigned_again(
    env: tuple[CheckpointRecords, Log, ObjectStore],
) -> None:
    follower, log, store = env
    first = log.batch(2)
    follower.handle(0, first, 0)
    follower.handle(0, log.batch(3), 1)
    again = follower.handle(0, first, 0)  # at its own offset: a re-read (rebalance, seek)
    assert isinstance(again, Cosigned) and not again.new and again.size == 2
    assert _refusals(store) == []
    # the same bytes appended after the newest: an old note replayed, a rollback
    replayed = follower.handle(0, first, 2)
    assert isinstance(replayed, Refused) and replayed.kind == "rollback"
    assert [r["kind"] for r in _refusals(store)] == ["rollback"]


def test_state_survives_a_restart(
    env: tuple[CheckpointRecords, Log, ObjectStore], tmp_path: Path
) -> None:
    follower, log, _store = env
    follower.handle(0, log.batch(5))
    store2 = open_store(f"file://{tmp_path / 'witness'}", SETTINGS)
    w2 = Witness(store2, follower.witness.signer, [log.signer.verifier], retention=timedelta(1))
    assert w2.latest(ORIGIN) == (5, log.tree.root())
    again = CheckpointRecords(SETTINGS, w2).handle(0, log.batch(2))
    assert isinstance(again, Cosigned) and again.size == 7


def test_fork_at_the_same_size_is_refused_and_alerted(
    env: tuple[CheckpointRecords, Log, ObjectStore], caplog: pytest.LogCaptureFixture
) -> None:
    follower, log, store = env
    follower.handle(0, log.batch(4))
    fork = Log(log.signer, tag="fork")  # the key holder signs another history
    with caplog.at_level(logging.ERROR, logger="tracevault.witness"):
        got = follower.handle(0, fork.batch(4))
    assert isinstance(got, Refused) and got.kind == "fork" and got.alert
    assert any("ALERT" in r.getMessage() and "fork" in r.getMessage() for r in caplog.records)
    assert _refused(follower, "fork") == 1
    [rec] = _refusals(store)
    assert rec["kind"] == "fork" and rec["witness_size"] == 4
    assert "\n4\n" in str(rec["note"])  # the signed evidence of the split view is kept
    assert follower.witness.latest(ORIGIN) == (4, log.tree.root())
    assert not store.list(f"{origin_prefix(ORIGIN)}checkpoint/{5:020d}")


def test_a_bigger_forked_tree_fails_the_consistency_proof(
    env: tuple[CheckpointRecords, Log, ObjectStore],
) -> None:
    follower, log, store = env
    follower.handle(0, log.batch(6))
    fork = Log(log.signer, tag="fork")
    fork.batch(6)
    got = follower.handle(0, fork.batch(3))  # starts at 6 like the genuine one, other prefix
    assert isinstance(got, Refused) and got.kind == "fork" and got.alert
    assert "not consistent" in str(got)
    # the refusal keeps the whole record: the signed note and the leaves that prove the fork
    [kept] = _refusals(store)
    rec = CheckpointRecord.decode(base64.b64decode(str(kept["record_b64"])))
    assert rec.verify([log.signer.verifier]).checkpoint.size == 9
    # the genuine log goes on being cosigned
    ok = follower.handle(0, log.batch(3))
    assert isinstance(ok, Cosigned) and ok.size == 9


def test_rollback_is_refused_and_alerted(env: tuple[CheckpointRecords, Log, ObjectStore]) -> None:
    follower, log, store = env
    follower.handle(0, log.batch(2))
    follower.handle(0, log.batch(5))
    old = Log(log.signer, tag="old")
    got = follower.handle(0, old.batch(4))  # size 4 < 7, never cosigned
    assert isinstance(got, Refused) and got.kind == "rollback" and got.alert
    assert _refused(follower, "rollback") == 1
    assert [r["kind"] for r in _refusals(store)] == ["rollback"]


def test_records_not_of_the_log_are_skipped_not_stored(
    env: tuple[CheckpointRecords, Log, ObjectStore],
) -> None:
    follower, log, store = env
    follower.handle(0, log.batch(2))
    stranger = Log(Ed25519Signer.generate("tv.test/log"))  # same name, other key
    assert follower.handle(0, stranger.batch(5)) is None
    assert follower.handle(0, b"TVCP garbage") is None
    assert follower.handle(1, log.batch(1)) is None  # partition 0's checkpoint shown as 1's
    genuine = CheckpointRecord.decode(log.batch(1))
    # the signed note with leaves that do not grow to its root: not the log's either
    bad = CheckpointRecord(genuine.note, genuine.start, genuine.prefix, (b"\x00" * 32,))
    assert follower.handle(0, bad.encode()) is None
    assert _refused(follower, "invalid") == 3
    assert _refusals(store) == []
    assert follower.witness.latest(ORIGIN) == (2, _root_at(log, 2))


def _root_at(log: Log, size: int) -> bytes:
    t = CompactTree()
    t.extend(_leaves(log.tag, 0, size))
    return t.root()


def test_a_gap_is_refused_without_alert(env: tuple[CheckpointRecords, Log, ObjectStore]) -> None:
    follower, log, store = env
    follower.handle(0, log.batch(2))
    log.batch(3)  # a record the witness never saw
    got = follower.handle(0, log.batch(1))
    assert isinstance(got, Refused) and got.kind == "gap" and not got.alert
    assert [r["kind"] for r in _refusals(store)] == ["gap"]


def test_a_gap_is_crossed_when_a_later_start_tree_holds_the_witness_tree(
    env: tuple[CheckpointRecords, Log, ObjectStore],
) -> None:
    follower, log, store = env
    follower.handle(0, log.batch(6))
    log.batch(1)  # 6..7, never seen
    got = follower.handle(0, log.batch(2))  # 7..9: its start tree is [0,4) [4,6) [6]
    assert isinstance(got, Cosigned) and got.new and got.size == 9
    assert _refusals(store) == []


def test_an_old_checkpoint_it_cannot_place_is_old_not_a_rollback(
    env: tuple[CheckpointRecords, Log, ObjectStore],
) -> None:
    """Over add-checkpoint only the note is known: a genuine one and another history's look
    alike below the witness's size, so both get the spec's 409, with no alert."""
    follower, log, store = env
    w = follower.witness
    log.batch(5)
    w.add_checkpoint(sign_note(Checkpoint(ORIGIN, 5, log.tree.root()).body(), [log.signer]), 0, [])
    other = Log(log.signer, tag="other")
    other.batch(3)
    for tree in (_root_at(log, 3), other.tree.root()):
        note = sign_note(Checkpoint(ORIGIN, 3, tree).body(), [log.signer])
        with pytest.raises(Refused) as old:
            w.add_checkpoint(note, 0, [])
        assert (old.value.kind, old.value.status, old.value.size, old.value.alert) == (
            "old",
            409,
            5,
            False,
        )
    assert _refusals(store) == [] and _refused(follower, "old") == 2


def test_add_checkpoint_checks_the_proof_it_is_given(
    env: tuple[CheckpointRecords, Log, ObjectStore],
) -> None:
    """The tlog-witness shaped entry point: a conflict on old size, a bad proof is a fork."""
    follower, log, _store = env
    w = follower.witness
    follower.handle(0, log.batch(4))
    log.batch(4)
    note = sign_note(Checkpoint(ORIGIN, 8, log.tree.root()).body(), [log.signer])
    with pytest.raises(Refused, match="this witness is at 4") as conflict:
        w.add_checkpoint(note, 3, [])
    assert conflict.value.kind == "conflict" and conflict.value.size == 4
    assert conflict.value.status == 409
    # a proof a caller sent that fails is a bad proof (422), not an alert: anyone can send one
    with pytest.raises(Refused) as bad:
        w.add_checkpoint(note, 4, [b"\x01" * 32])
    assert (bad.value.kind, bad.value.status, bad.value.alert) == ("proof", 422, False)
    with pytest.raises(Refused) as too_big:
        w.add_checkpoint(note, 9, [])
    assert too_big.value.status == 400
    with pytest.raises(Refused) as sig:
        w.add_checkpoint(note.replace("\n8\n", "\n9\n"), 4, [])
    assert (sig.value.kind, sig.value.status) == ("signature", 403)


def test_a_witness_needs_a_trusted_log_key(tmp_path: Path) -> None:
    store = open_store(f"file://{tmp_path}", SETTINGS)
    with pytest.raises(LogError, match="at least one trusted log key"):
        Witness(store, CosignatureSigner.generate("w"), [], retention=timedelta(1))
    with pytest.raises(ConfigError, match="log key"):
        CosignatureSigner.from_skey(Ed25519Signer.generate("w").skey)


def test_status_shows_sizes_and_refusals(
    env: tuple[CheckpointRecords, Log, ObjectStore], tmp_path: Path
) -> None:
    follower, log, _store = env
    follower.handle(0, log.batch(3))
    follower.handle(0, Log(log.signer, tag="fork").batch(3))
    url = f"file://{tmp_path / 'witness'}"
    res = CliRunner().invoke(tracevault, ["witness", "status", "--store", url, "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc[ORIGIN]["size"] == 3
    assert [r["kind"] for r in doc[ORIGIN]["refusals"]] == ["fork"]
    res = CliRunner().invoke(tracevault, ["witness", "status", "--store", url], terminal_width=80)
    assert res.exit_code == 0 and "1 (fork)" in res.stdout


def test_cosigned_checkpoint_finds_the_smallest_covering_size(
    env: tuple[CheckpointRecords, Log, ObjectStore],
) -> None:
    follower, log, store = env
    for n in (3, 4):
        follower.handle(0, log.batch(n))
    assert cosigned_sizes(store, ORIGIN) == [3, 7]
    note = cosigned_checkpoint(store, ORIGIN, 5)
    assert note is not None
    text, good = open_note(note, [log.signer.verifier, follower.witness.signer.verifier])
    assert Checkpoint.parse(text).size == 7 and len(good) == 2
    assert cosigned_checkpoint(store, ORIGIN, 8) is None


def test_prefix_root_is_known_exactly_on_the_compact_trees_subtree_boundaries() -> None:
    leaves = _leaves("p", 0, 70)
    for n in range(66):
        tree = CompactTree()
        tree.extend(leaves[:n])
        for m in range(n + 1):
            boundary = m == 0 or any(m == (n >> k) << k for k in range(n.bit_length() + 1))
            got = prefix_root(tree, m)
            assert (got is not None) == boundary, (n, m)
            if got is not None:
                assert got == _root_at_leaves(leaves, m)


def _root_at_leaves(leaves: list[bytes], size: int) -> bytes:
    t = CompactTree()
    t.extend(leaves[:size])
    return t.root()


def test_a_forked_cosigned_checkpoint_names_both_roots() -> None:
    """Verify merging a witness's copy of another root at the run's size: the message names
    the two roots, not ``…@42, not the run's …@42``."""
    key = Ed25519Signer.generate("tv.test/log")
    ours = sign_note(Checkpoint(ORIGIN, 42, b"\x01" * 32).body(), [key])
    theirs = sign_note(Checkpoint(ORIGIN, 42, b"\x02" * 32).body(), [key])
    with pytest.raises(LogError) as err:
        with_cosignatures(ours, theirs)
    msg = str(err.value)
    roots = [base64.b64encode(bytes([b]) * 32).decode() for b in (1, 2)]
    assert all(r in msg for r in roots) and f"{ORIGIN}@42" in msg and "fork" in msg, msg
