"""The sequencer's side of the signed log: its key, and one tree per sealed partition.

Per transaction, for each sealed partition it wrote event records to, the sequencer appends
their leaf hashes (in the order it produced them, which is their offset order: one
idempotent producer, explicit partitions) to the partition's compact tree, signs one
checkpoint, and writes the checkpoint record to that sealed partition and the new compact
tree to the same heads partition, both inside the transaction (docs/log.md, "Sequencer").

The trees change only when the transaction committed (:meth:`PartitionLogs.committed`); an
abort, rewind or new session restores them from the heads topic together with the run book,
so they are never half-applied.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from tracevault.config import Settings
from tracevault.errors import ConfigError
from tracevault.kafka import sealed_generation
from tracevault.transparency import (
    CheckpointRecord,
    CompactTree,
    Ed25519Signer,
    NoteSigner,
    load_signer,
    log_origin,
)

__all__ = ["PartitionLogs", "SignedBatch", "signer_from_settings"]

_NO_KEY = (
    "the sequencer signs a checkpoint of every sealed partition in each transaction and "
    "needs the log key: set log_key_file (TRACEVAULT_LOG_KEY_FILE, --log-key-file; a file "
    "of mode 0600) or log_key (TRACEVAULT_LOG_KEY); create one with `tracevault keys generate`"
)


def signer_from_settings(settings: Settings) -> NoteSigner:
    """The log key of ``settings`` (the file first); :class:`ConfigError` when there is none."""
    if settings.log_key_file:
        return load_signer(settings.log_key_file)
    if settings.log_key is not None and settings.log_key.get_secret_value().strip():
        return Ed25519Signer.from_skey(settings.log_key.get_secret_value())
    raise ConfigError(_NO_KEY)


@dataclass(slots=True)
class SignedBatch:
    """What one transaction adds to the logs: per partition, the encoded checkpoint record
    for the sealed topic and the tree after it (for heads, and for memory once committed)."""

    records: dict[int, bytes]
    trees: dict[int, CompactTree]


class PartitionLogs:
    """The compact tree of every sealed partition this instance owns, and its signer."""

    def __init__(self, settings: Settings, signer: NoteSigner) -> None:
        self.signer = signer
        self._settings = settings
        self._base = settings.log_origin
        self._prefix = settings.topic_prefix
        self.generation = ""  # of the sealed topic, learnt at the first restore
        self.trees: dict[int, CompactTree] = {}

    def origin(self, partition: int) -> str:
        """``<log_origin>/<prefix>/<generation>/<partition>``: the generation names the
        sealed topic's incarnation, so a new cluster or a re-created topic starts a new log
        instead of forking the archived one (docs/log.md, "A new cluster is a new log")."""
        return log_origin(self._base, self._prefix, partition, self.generation)

    def restore(self, partitions: Iterable[int], trees: dict[int, CompactTree]) -> None:
        """The trees of ``partitions`` as the heads topic has them (empty: a new log)."""
        if not self.generation:
            self.generation = sealed_generation(self._settings)
        for p in partitions:
            self.trees[p] = trees[p].copy() if p in trees else CompactTree()

    def drop(self, partitions: Iterable[int]) -> None:
        for p in partitions:
            self.trees.pop(p, None)

    def clear(self) -> None:
        self.trees.clear()

    def sign(self, leaves: dict[int, list[bytes]]) -> SignedBatch:
        """One signed checkpoint per partition with leaves; the trees in memory stay as they
        are until :meth:`committed`."""
        batch = SignedBatch({}, {})
        for p, hashes in leaves.items():
            rec, tree = CheckpointRecord.build(self.trees[p], hashes, self.origin(p), self.signer)
            batch.records[p] = rec.encode()
            batch.trees[p] = tree
        return batch

    def committed(self, batch: SignedBatch) -> None:
        self.trees.update(batch.trees)
