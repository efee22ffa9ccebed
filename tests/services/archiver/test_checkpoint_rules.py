"""What the archiver does with each checkpoint record, fed real ``confluent_kafka.Message``
objects and a real ``file://`` store (the broker is not what these rules are about)."""

from __future__ import annotations

from pathlib import Path

from confluent_kafka import Message

from tests.services.archiver.sealed_factory import sealed_run
from tracevault.archive._filestore import FileStore
from tracevault.archive._holes import Hole
from tracevault.config import Settings
from tracevault.schemas import encode_sealed
from tracevault.services.archiver import Archiver
from tracevault.services.archiver._quarantine import Quarantined
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

SIGNER = Ed25519Signer.generate("rules-log")


class _Feed:
    def __init__(self, tmp: Path) -> None:
        self.store = FileStore(tmp)
        self.settings = Settings(archive_url=f"file://{tmp}")
        self.archiver = Archiver(self.settings, store=self.store, verifiers=[SIGNER.verifier])
        self.offset = 0
        self.origin = log_origin(self.settings.log_origin, self.settings.topic_prefix, 0)

    def msg(self, key: bytes, value: bytes, checkpoint: bool = False) -> Message:
        headers = [(RECORD_HEADER, RECORD_HEADER_CHECKPOINT)] if checkpoint else None
        m = Message(
            topic=self.archiver.topic, partition=0, offset=self.offset, key=key, value=value,
            headers=headers,
        )  # fmt: skip
        self.offset += 1
        return m

    def events(self, run_id: str, seqs: range) -> list[Message]:
        evs = sealed_run(run_id, 10)
        return [self.msg(run_id.encode(), encode_sealed(evs[s])) for s in seqs]

    def checkpoint(self, tree: CompactTree, run_id: str, seqs: range, origin: str = "") -> bytes:
        evs = sealed_run(run_id, 10)
        leaves = [leaf_hash(run_id, s, evs[s].hash) for s in seqs]
        rec, _ = CheckpointRecord.build(tree, leaves, origin or self.origin, SIGNER)
        return rec.encode()

    def feed(self, msgs: list[Message]) -> None:
        self.archiver.take(msgs)
        for part in self.archiver.parts.values():
            self.archiver.flusher.flush(part)
            self.archiver.flusher.wait(part)

    def quarantined(self) -> list[Quarantined]:
        return [Quarantined.from_json(self.store.get(i.key)) for i in self.store.list("q")]


def _tree(run_id: str, seqs: range) -> CompactTree:
    evs = sealed_run(run_id, 10)
    t = CompactTree()
    t.extend([leaf_hash(run_id, s, evs[s].hash) for s in seqs])
    return t


def test_a_fork_and_another_partitions_checkpoint_are_refused(tmp_path: Path) -> None:
    f = _Feed(tmp_path)
    f.feed(
        [
            *f.events("a", range(3)),
            f.msg(CHECKPOINT_KEY, f.checkpoint(CompactTree(), "a", range(3)), True),
        ]
    )
    assert f.archiver.stats.events_archived == 3
    # signed by the key, but its tree at 3 leaves is another one: the log forked
    forked = f.checkpoint(_tree("x", range(3)), "a", range(3, 5))
    # signed, for partition 1's log
    other = f.checkpoint(
        _tree("a", range(3)), "a", range(3, 5), log_origin("tracevault", f.settings.topic_prefix, 1)
    )
    f.feed([
        *f.events("a", range(3, 5)),
        f.msg(CHECKPOINT_KEY, forked, True),
        f.msg(CHECKPOINT_KEY, other, True),
    ])  # fmt: skip
    details = {q.offset: q.detail for q in f.quarantined() if q.reason == "bad-checkpoint"}
    assert "forked" in details[6] and "expected" in details[7]
    assert f.archiver.stats.events_archived == 3, "the records they cover stay pending"
    assert len(f.archiver.parts[0].pending) == 2
    # the genuine checkpoint arrives: the pending records are archived after all
    f.feed([f.msg(CHECKPOINT_KEY, f.checkpoint(_tree("a", range(3)), "a", range(3, 5)), True)])
    assert f.archiver.stats.events_archived == 5
    assert not f.archiver.parts[0].pending
    assert f.archiver.stats.holes == 0


def _holes(f: _Feed) -> list[Hole]:
    return [Hole.from_json(f.store.get(i.key), i.key) for i in f.store.list("holes/")]


def test_a_checkpoint_starting_past_the_log_read_is_a_gone_hole(tmp_path: Path) -> None:
    f = _Feed(tmp_path)
    f.feed(
        [
            *f.events("a", range(3)),
            f.msg(CHECKPOINT_KEY, f.checkpoint(CompactTree(), "a", range(3)), True),
        ]
    )
    # leaves 3..6 (run a's seqs 3..6) went before the archiver read them; seqs 7..8 remain
    f.feed([
        *f.events("a", range(7, 9)),
        f.msg(CHECKPOINT_KEY, f.checkpoint(_tree("a", range(7)), "a", range(7, 9)), True),
    ])  # fmt: skip
    (hole,) = _holes(f)
    assert (hole.kind, hole.first, hole.end, hole.runs) == ("gone", 3, 7, {"a": 7})
    assert f.archiver.stats.holes == 1 and f.archiver.stats.leaves_lost == 4
    assert f.archiver.stats.events_archived == 5
    assert not f.quarantined()
    # the log goes on, and a restarted archiver resumes across the hole
    g = _Feed(tmp_path)
    g.offset = 20
    g.feed([
        *g.events("a", range(9, 10)),
        g.msg(CHECKPOINT_KEY, g.checkpoint(_tree("a", range(9)), "a", range(9, 10)), True),
    ])  # fmt: skip
    assert g.archiver.stats.events_archived == 1 and not g.quarantined()


def test_a_checkpoint_listing_a_record_the_topic_lacks_is_an_unread_hole(tmp_path: Path) -> None:
    f = _Feed(tmp_path)
    # seq 1 never reached the archiver (deleted), yet the checkpoint lists it
    msgs = [*f.events("b", range(1)), *f.events("b", range(2, 3))]
    f.feed([*msgs, f.msg(CHECKPOINT_KEY, f.checkpoint(CompactTree(), "b", range(3)), True)])
    assert not f.quarantined()
    (hole,) = _holes(f)
    assert (hole.kind, hole.first, hole.end) == ("unread", 1, 2)
    assert f.archiver.stats.events_archived == 2
    assert f.archiver.parts[0].log.archived == 3, "the tree has all three leaves"


def test_after_a_restart_a_checkpoint_overlapping_the_archive_must_extend_it(
    tmp_path: Path,
) -> None:
    f = _Feed(tmp_path)
    f.feed(
        [
            *f.events("a", range(3)),
            f.msg(CHECKPOINT_KEY, f.checkpoint(CompactTree(), "a", range(3)), True),
        ]
    )
    # a restarted archiver re-reads from a committed offset inside a later transaction
    g = _Feed(tmp_path)
    g.offset = 10
    forged = g.checkpoint(CompactTree(), "z", range(5))  # signed, but another history
    genuine = g.checkpoint(CompactTree(), "a", range(5))
    g.feed([*g.events("a", range(2, 5)), g.msg(CHECKPOINT_KEY, forged, True)])
    (q,) = [q for q in g.quarantined() if q.reason == "bad-checkpoint"]
    assert "not a prefix" in q.detail
    g.feed([g.msg(CHECKPOINT_KEY, genuine, True)])
    assert (g.archiver.stats.events_archived, g.archiver.stats.events_skipped) == (2, 1)


def test_a_generation_origin_going_on_with_the_same_tree_continues_the_log(
    tmp_path: Path,
) -> None:
    """After an upgrade the sequencer signs the same tree under a generation origin: a new
    log, archived beside the old, that continues it (no loss), and another root is refused."""
    f = _Feed(tmp_path)
    f.feed(
        [
            *f.events("a", range(3)),
            f.msg(CHECKPOINT_KEY, f.checkpoint(CompactTree(), "a", range(3)), True),
        ]
    )
    gen = log_origin(f.settings.log_origin, f.settings.topic_prefix, 0, "g" + "0" * 16)
    f.feed([
        *f.events("a", range(3, 5)),
        f.msg(CHECKPOINT_KEY, f.checkpoint(_tree("a", range(3)), "a", range(3, 5), gen), True),
    ])  # fmt: skip
    (hole,) = _holes(f)
    assert (hole.kind, hole.first, hole.end, hole.origin) == ("continued", 0, 3, gen)
    assert f.archiver.stats.holes == 0 and f.archiver.stats.events_archived == 5
    prefix = f.settings.topic_prefix
    assert f.store.list(f"log/{prefix}/{'g' + '0' * 16}/0/checkpoint/")[-1].key.endswith(
        f"{5:020d}"
    )
    assert f.store.list(f"log/{prefix}/0/checkpoint/")[-1].key.endswith(f"{3:020d}")
    # another partition's origin, of any generation, is still refused
    other = log_origin(f.settings.log_origin, prefix, 1, "g" + "1" * 16)
    f.feed(
        [f.msg(CHECKPOINT_KEY, f.checkpoint(_tree("a", range(5)), "a", range(5, 6), other), True)]
    )
    (q,) = [q for q in f.quarantined() if q.reason == "bad-checkpoint"]
    assert "expected" in q.detail
