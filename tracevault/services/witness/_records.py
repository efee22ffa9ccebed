"""What the witness makes of the sealed topic's checkpoint records, one partition log per origin.

Why the topic and not an HTTP endpoint fed by someone else: the sequencer already writes, in
each transaction, a checkpoint record carrying the compact tree at its start and the leaves it
adds (docs/log.md). From that alone the witness computes the consistency proof from its own
last cosigned size (``compact_range_source``), so it needs no copy of the log, no archive, and
no cooperation from the operator it is watching: a log that wants cosignatures must show its
checkpoints where the witness reads them. The decision itself is ``Witness.add_checkpoint``
(:mod:`tracevault.witness`), shaped as C2SP tlog-witness ``add-checkpoint``, so an HTTP front
end serves it beside this. Reading the topic is the service's (``_follower``, on the one
service runtime); this part only decides what was read, and needs no Kafka.

What the witness sees and does, per checkpoint record of partition ``p`` (records of one
poll that chain are joined first, see :meth:`CheckpointRecords.handle_batch`):

- not decodable, not signed by a trusted log key, not for origin
  ``<log_origin>/<prefix>/[<gen>/]p``, or its leaves do not grow to the signed root: not
  the log's; counted, warned, skipped (anyone with write access to the topic can append
  such a record);
- ending at or before the witness's size: the same checkpoint seen again (re-read after a
  restart, at a lower offset) is fine; another root for a size it cosigned is a fork; a
  smaller size is ``old`` (a late joiner re-reading the log: no alert) unless it is shown to
  be a rollback: not a prefix of the witness's tree, or newer in the partition (a higher
  offset) than the record of the witness's size or a larger head it does not extend (the
  log presented a smaller size as its newest), even an exact copy of one it cosigned;
- ending after it: proof from the witness's size, then ``add_checkpoint`` (a bad proof is a
  fork). The record proves from any size that ends on a subtree of its start tree; across a
  wider gap (records gone from the topic) the missing nodes come from the archive's tiles if
  one is configured. Unprovable: refused as a ``gap``, stored once per size, and every later
  record is tried again, so the witness cosigns as soon as one proves.

Offsets are committed after the decision is stored, so a crash re-reads, and re-reading is
harmless (the second case).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from tracevault.config import Settings
from tracevault.errors import LogError, TraceVaultError
from tracevault.transparency import (
    Checkpoint,
    CheckpointRecord,
    CompactTree,
    NodeSource,
    compact_range_source,
    consistency_proof,
    is_partition_origin,
    log_origin,
    origin_generation,
    split_note,
    verify_consistency,
)
from tracevault.witness import ArchiveTiles, Cosigned, Refused, Witness

__all__ = ["CheckpointRecords"]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Head:
    """The newest checked record of a partition in this process: its offset and tree."""

    offset: int | None
    tree: CompactTree


@dataclass(slots=True)
class _Range:
    """Checked records of one partition joined in a poll, and what the log showed before."""

    rec: CheckpointRecord
    tree: CompactTree
    head_before: int
    offset: int | None  # of the range's last record


class CheckpointRecords:
    """Decides the checkpoint records read from ``<prefix>.sealed`` with the witness.

    ``archive``: the archive's tiles, read only to prove consistency across a gap. Holds, per
    partition, the newest record seen in this process (a rollback shows against it) and, per
    origin, the size a gap refusal is stored at (refused once, not once per record).
    """

    def __init__(
        self, settings: Settings, witness: Witness, archive: ArchiveTiles | None = None
    ) -> None:
        self.settings = settings
        self.witness = witness
        self.archive = archive
        self._heads: dict[int, _Head] = {}
        self._gaps: dict[str, int] = {}  # origin -> the size a gap refusal is stored at

    def origin(self, partition: int) -> str:
        """The partition's log as named before generations (docs/log.md)."""
        return log_origin(self.settings.log_origin, self.settings.topic_prefix, partition)

    @staticmethod
    def _origin(rec: CheckpointRecord) -> str:
        """The origin a checked record signs: its partition's log of one generation (a new
        cluster is a new log, with its own history here: docs/log.md)."""
        return Checkpoint.parse(split_note(rec.note)[0]).origin

    def handle(
        self, partition: int, value: bytes, offset: int | None = None
    ) -> Cosigned | Refused | None:
        """Decide one checkpoint record; None when it is not the log's (see module doc)."""
        got = self.handle_batch([(partition, value)], None if offset is None else [offset])
        return got[0] if got else None

    def handle_batch(
        self, records: Sequence[tuple[int, bytes]], offsets: Sequence[int] | None = None
    ) -> list[Cosigned | Refused]:
        """Decide the checkpoint records of one poll, in order, one decision per run of them.

        Consecutive records of a partition that chain (each starts where the last ended, on
        the same compact tree) are joined into one range and only its last checkpoint is
        cosigned: every record is still checked, but the witness pays one stored, fsynced
        cosignature per partition per poll instead of one per sequencer transaction, so it
        keeps up with the sequencer. A verifier needs a cosigned checkpoint at or after its
        run's end, not one per transaction. A record that does not chain (a re-read, a fork)
        ends the range and is decided on its own.

        ``offsets`` (the records' Kafka offsets) tell a re-read (at or below the newest
        offset seen) from a record the log appended after its head; without them each record
        counts as the newest.
        """
        out: list[Cosigned | Refused] = []
        pending: dict[int, _Range] = {}
        for i, (partition, value) in enumerate(records):
            checked = self._checked(partition, value)
            if checked is None:
                continue
            rec, tree = checked
            offset = offsets[i] if offsets else None
            head_before = self._advance(partition, rec, tree, offset)
            cur = pending.get(partition)
            if (
                cur is not None
                and rec.start == cur.tree.size
                and list(rec.prefix) == cur.tree.hashes
            ):
                joined = CheckpointRecord(
                    rec.note, cur.rec.start, cur.rec.prefix, cur.rec.leaves + rec.leaves
                )
                pending[partition] = _Range(joined, tree, cur.head_before, offset)
                continue
            if cur is not None:
                out.append(self._decide(partition, cur))
            pending[partition] = _Range(rec, tree, head_before, offset)
        out.extend(self._decide(p, r) for p, r in pending.items())
        return out

    def _advance(
        self, partition: int, rec: CheckpointRecord, tree: CompactTree, offset: int | None
    ) -> int:
        """Move the partition's head to ``rec`` when it is newer; the size of a larger head
        it does not extend (the log showed that, then presented this smaller one), else 0."""
        head = self._heads.get(partition)
        last = None if head is None else head.offset
        if last is not None and offset is not None and offset <= last:
            return 0  # a re-read (rebalance, seek): not what the log shows as newest
        self._heads[partition] = _Head(offset, tree)
        if head is None or tree.size >= head.tree.size:
            return 0
        chains = rec.start == head.tree.size and list(rec.prefix) == head.tree.hashes
        return 0 if chains else head.tree.size

    def _checked(self, partition: int, value: bytes) -> tuple[CheckpointRecord, CompactTree] | None:
        origin = self.origin(partition)
        try:
            rec = CheckpointRecord.decode(value)
            vc = rec.verify(self.witness.log_keys)
            signed = vc.checkpoint.origin
            s = self.settings
            if not is_partition_origin(signed, s.log_origin, s.topic_prefix, partition):
                raise LogError(
                    f"checkpoint is for log {signed!r}, expected {origin!r} or another "
                    "generation of it"
                )
            tree, origin = vc.tree, signed
        except LogError as e:
            self.witness.metrics.refused.labels(origin, "invalid").inc()
            log.warning("skipped a checkpoint record in partition %s: %s", partition, e)
            return None
        return rec, tree

    def _decide(self, partition: int, r: _Range) -> Cosigned | Refused:
        """``r.rec`` is checked (signed, its leaves reach its root); prove it from our size."""
        rec = r.rec
        origin = self._origin(rec)
        latest = self.witness.latest(origin)
        size, root = latest if latest is not None else (0, b"")
        proof: list[bytes] = []
        from_log = True
        try:
            if latest is not None and size < rec.end:
                src = compact_range_source(rec.start, rec.prefix, rec.leaves)
                try:
                    proof = consistency_proof(size, rec.end, src)
                except LogError:  # a gap: the record alone does not reach back to our size
                    proof = self._across_gap(partition, r, size, root, src)
                    from_log = False
            got = self.witness.add_checkpoint(
                rec.note,
                size,
                proof,
                proof_from_log=from_log,
                evidence=rec.encode(),
                head_before=r.head_before,
                record=rec,
                offset=r.offset,
            )
        except Refused as refused:
            return refused
        if got.new and self._gaps.pop(origin, None) is not None:
            log.warning(
                "witness of %s cosigns again: %s proved consistent with %s", origin, rec.end, size
            )
        return got

    def _across_gap(
        self, partition: int, r: _Range, size: int, root: bytes, src: NodeSource
    ) -> list[bytes]:
        """The proof from ``size`` to the range's end with the nodes left of its start read
        from the archive's tiles; a checked proof or :class:`Refused` (``gap``)."""
        rec = r.rec
        origin = self._origin(rec)
        why = "no archive is configured to read the missing nodes from"
        if self.archive is not None:
            try:
                _, tiles = self.archive.source(partition, origin_generation(origin))

                def node(level: int, index: int) -> bytes:
                    try:
                        return src(level, index)
                    except LogError:
                        return tiles(level, index)

                proof = consistency_proof(size, rec.end, node)
                verify_consistency(size, rec.end, proof, root, r.tree.root())
                return proof
            except TraceVaultError as e:  # not archived that far yet, unreachable, or doctored
                why = f"the archive {self.archive.store.url} does not prove it: {e}"
        raise self._gap(origin, rec, size, why)

    def _gap(self, origin: str, rec: CheckpointRecord, size: int, why: str) -> Refused:
        """Refuse a record it cannot prove from ``size``: stored and counted once per size.

        Why once: while the gap lasts every later record is one too, and a refusal per record
        (and per restart) would bury the one that matters; the store's copy names the sizes.
        """
        message = (
            f"checkpoint {origin}@{rec.end} lists leaves from {rec.start}, the witness is at "
            f"{size}: it cannot prove consistency across leaves {size}..{rec.start - 1} "
            f"({why}); it cosigns again once a checkpoint proves from {size}"
        )
        if self._gaps.get(origin) == size or (
            origin not in self._gaps and self.witness.refused_before(origin, "gap", size)
        ):
            self._gaps[origin] = size
            log.debug("still a gap: %s", message)
            return Refused("gap", origin, message, size, 409)
        self._gaps[origin] = size
        detail = {"start": rec.start, "checkpoint_size": rec.end}
        return self.witness.refuse(
            "gap", origin, message, rec.note, evidence=rec.encode(), detail=detail
        )
