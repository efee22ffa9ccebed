"""Sealed partitions written under the signed-log contract, for tests that cannot wait for the
sequencer: each transaction writes the sealed records, then one CheckpointRecord per
partition it touched (docs/log.md, "The checkpoint record in the sealed topic"), then the
run's head, exactly as the sequencer commits them.

``SignedSealedWriter`` keeps each partition's compact tree like the sequencer does, signs with
a key made by ``Ed25519Signer.generate`` (``vkey`` is what a verifier trusts), and
``inject`` writes a record with a plain, non-transactional producer, as an attacker with
write access to ``<prefix>.sealed`` would.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from pathlib import Path

from confluent_kafka import Producer

from tracevault.config import Settings
from tracevault.heads import Head, encode_head
from tracevault.kafka import ensure_topics, partition_for
from tracevault.schemas import EventKind, SealedEvent, decode_event, encode_sealed
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

CHECKPOINT_HEADERS = [(RECORD_HEADER, RECORD_HEADER_CHECKPOINT)]


def fresh_settings(bootstrap: str, base: Path, partitions: int = 2) -> Settings:
    """Settings on a new topic prefix (topics created), for a module of tests to share."""
    s = Settings(
        bootstrap_servers=bootstrap, topic_prefix=f"tv-{uuid.uuid4().hex[:12]}",
        partitions=partitions, archive_url=f"file://{base / 'archive'}",
        spool_dir=str(base / "spool"),
    )  # fmt: skip
    ensure_topics(s)
    return s


def cli_env(settings: Settings) -> dict[str, str]:
    """The environment that points ``tracevault replay`` at ``settings``' broker and topics."""
    return {
        "TRACEVAULT_BOOTSTRAP_SERVERS": settings.bootstrap_servers,
        "TRACEVAULT_TOPIC_PREFIX": settings.topic_prefix,
        "TRACEVAULT_PARTITIONS": str(settings.partitions),
    }


class SignedSealedWriter:
    """The sequencer's side of the contract: records, checkpoint and head per transaction."""

    def __init__(self, settings: Settings, signer: Ed25519Signer | None = None) -> None:
        self.settings = settings
        self.signer = signer or Ed25519Signer.generate("tv.test-log")
        self.trees: dict[int, CompactTree] = {}
        self.first_offsets: dict[str, int] = {}
        self.producer = Producer(
            settings.kafka_config(
                **{
                    "transactional.id": f"test-signed-{uuid.uuid4().hex[:8]}",
                    "enable.idempotence": True,
                    "log_level": 0,
                }
            )
        )
        self.producer.init_transactions(30)

    @property
    def vkey(self) -> str:
        return self.signer.verifier.vkey

    def origin(self, partition: int) -> str:
        return log_origin(self.settings.log_origin, self.settings.topic_prefix, partition)

    def partition(self, run_id: str) -> int:
        return partition_for(run_id, self.settings.partitions)

    def commit(
        self,
        written: Sequence[SealedEvent],
        *,
        logged: Sequence[SealedEvent] | None = None,
        honest_last: SealedEvent | None = None,
        signer: Ed25519Signer | None = None,
    ) -> tuple[Head, int]:
        """One transaction: ``written`` to the run's partition, the checkpoint listing
        ``logged`` (default: ``written``), the head of ``honest_last`` (default: the last
        written). Returns the head and the checkpoint record's offset."""
        rid = written[0].run_id
        part = self.partition(rid)
        offsets: list[int] = []
        cp_offset: list[int] = []

        def on_delivery(err, msg) -> None:  # type: ignore[no-untyped-def]
            assert err is None, err
            offsets.append(msg.offset())

        self.producer.begin_transaction()
        for s in written:
            self.producer.produce(
                self.settings.topics.sealed, encode_sealed(s), rid.encode(), partition=part,
                on_delivery=on_delivery,
            )  # fmt: skip
        self.producer.flush(30)
        tree = self.trees.get(part, CompactTree())
        leaves = [leaf_hash(s.run_id, s.seq, s.hash) for s in (logged or written)]
        rec, new_tree = CheckpointRecord.build(
            tree, leaves, self.origin(part), signer or self.signer
        )
        self.producer.produce(
            self.settings.topics.sealed, rec.encode(), CHECKPOINT_KEY, partition=part,
            headers=CHECKPOINT_HEADERS,
            on_delivery=lambda err, msg: cp_offset.append(msg.offset()),
        )  # fmt: skip
        self.producer.flush(30)
        last = honest_last or written[-1]
        first = self.first_offsets.setdefault(rid, min(offsets))
        head = Head(
            run_id=rid,
            next_seq=last.seq + 1,
            last_hash=last.hash,
            finished=decode_event(last.raw).kind is EventKind.RUN_FINISHED,
            partition=part,
            first_offset=first,
            last_offset=max(offsets),
        )
        self.producer.produce(
            self.settings.topics.heads, encode_head(head), rid.encode(), partition=part
        )
        self.producer.commit_transaction(30)
        self.trees[part] = new_tree
        return head, cp_offset[0]

    def publish(self, sealed: Sequence[SealedEvent], *, batches: int = 1) -> list[int]:
        """The run in ``batches`` transactions; returns the checkpoint records' offsets."""
        step = -(-len(sealed) // batches)
        return [self.commit(sealed[i : i + step])[1] for i in range(0, len(sealed), step)]


def inject(settings: Settings, partition: int, record: SealedEvent | bytes, key: bytes) -> int:
    """Append one record with a plain producer (no transaction); returns its offset."""
    producer = Producer(settings.kafka_config(**{"log_level": 0}))
    out: list[int] = []
    value = record if isinstance(record, bytes) else encode_sealed(record)
    headers = CHECKPOINT_HEADERS if key == CHECKPOINT_KEY else None
    producer.produce(
        settings.topics.sealed, value, key, partition=partition, headers=headers,
        on_delivery=lambda err, msg: out.append(msg.offset()),
    )  # fmt: skip
    assert producer.flush(30) == 0
    return out[0]
