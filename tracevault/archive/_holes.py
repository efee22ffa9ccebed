"""Holes in an archived partition log: leaves the archive holds no run history for.

No record may stop a partition's log (docs/log.md, "Holes"), so the archiver writes what it
could not archive as one immutable JSON object per hole, beside the log, and goes on::

    holes/<prefix>/<p>/<first:020d>-<end:020d>.<kind>.json

``kind`` says what is missing from leaves ``first .. end-1``:

- ``gone``: the sealed records *and* their checkpoint records went before the archiver read
  them (topic retention, DeleteRecords, a lost broker). The tree continues from the compact
  tree the next signed checkpoint record carries at ``end`` (kept in the object); the hash
  tiles hold zeros for these leaves and a reader takes every node that overlaps them from
  that compact tree (:func:`hole_node_source`);
- ``unread``: the records went, but a signed checkpoint record listed their leaf hashes, so
  the tree and its tiles are whole; only the leaf data and values are missing;
- ``quarantined``: the record was read but cannot be archived as run history (a run id no
  store can hold, an undecodable value): its leaf is in the tree, its bytes in
  ``quarantine/``;
- ``continued``: leaves ``0 .. end-1`` are archived in another log of the partition, whose
  tree this one goes on with (a log begun before generations, whose sequencer now signs
  under a generation origin): nothing is lost, and nodes before ``end`` come from the
  compact tree as for ``gone``.

The names alone say where each hole is, so a reader needs one listing of the partition's
prefix and reads an object only when a run touches its range. Nothing here is trusted: a
``gone`` hole's compact tree must still give the root its signed checkpoints have, or every
proof across it fails.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from tracevault.errors import ArchiveError, LogError
from tracevault.transparency import CompactTree, NodeSource, compact_positions, hash_children

__all__ = [
    "HOLE_KINDS",
    "LOST",
    "Hole",
    "HoleKey",
    "compact_at",
    "hole_key",
    "hole_node_source",
    "holes_prefix",
    "parse_hole_key",
]

#: ``gone`` (records and hashes), ``unread`` (records only), ``quarantined`` (archivable no),
#: ``continued`` (archived in the log this one continues: nothing lost)
HOLE_KINDS = ("gone", "unread", "quarantined", "continued")
#: the kinds where sealed records were lost
LOST = ("gone", "unread")
_NAME = re.compile(r"^(\d{20})-(\d{20})\.(gone|unread|quarantined|continued)\.json$")


def holes_prefix(log_key: str) -> str:
    """``holes/<prefix>/<p>/`` of the partition log ``log/<prefix>/<p>/``."""
    if not log_key.startswith("log/"):
        raise ArchiveError(f"{log_key!r} is not a partition log key")
    return "holes/" + log_key[len("log/") :]


def hole_key(log_key: str, first: int, end: int, kind: str) -> str:
    return f"{holes_prefix(log_key)}{first:020d}-{end:020d}.{kind}.json"


@dataclass(frozen=True, slots=True)
class HoleKey:
    key: str
    first: int
    end: int
    kind: str

    def overlaps(self, lo: int, hi: int) -> bool:
        """Whether leaves ``lo .. hi-1`` meet this hole."""
        return self.first < hi and lo < self.end


def parse_hole_key(key: str) -> HoleKey | None:
    m = _NAME.match(key.rsplit("/", 1)[-1])
    if m is None:
        return None
    return HoleKey(key, int(m[1]), int(m[2]), m[3])


@dataclass(frozen=True, slots=True)
class Hole:
    """One hole as stored (ASCII JSON, sorted keys)."""

    kind: str
    origin: str
    partition: int
    first: int
    end: int
    detected_at: str  # UTC, ISO 8601
    why: str
    #: runs the archiver knows were touched: run id -> the first seq it read after the hole
    #: (``gone``/``unread``), or the seq of the quarantined leaf (``quarantined``)
    runs: dict[str, int] = field(default_factory=dict)
    #: ``gone``: the compact tree at ``end`` (hex), from the signed checkpoint record
    tree: list[str] = field(default_factory=list)
    reason: str = ""  # ``quarantined``: the quarantine reason
    quarantine_key: str = ""
    topic_offset: int | None = None
    version: int = 1

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":")).encode("ascii")

    @classmethod
    def from_json(cls, data: bytes, key: str) -> Hole:
        try:
            obj: Any = json.loads(data)
            if not isinstance(obj, dict) or obj.get("version") != 1:
                raise ValueError("not a version-1 hole object")
            hole = cls(**obj)
            if hole.kind not in HOLE_KINDS or not 0 <= hole.first < hole.end:
                raise ValueError(f"kind {hole.kind!r}, leaves {hole.first}..{hole.end - 1}")
            return hole
        except (ValueError, TypeError) as exc:
            raise ArchiveError(f"hole object {key} is unreadable: {exc}") from exc

    def compact(self) -> CompactTree:
        """The compact tree at ``end`` (a ``gone`` hole)."""
        try:
            return CompactTree(self.end, [bytes.fromhex(h) for h in self.tree])
        except (ValueError, LogError) as exc:
            raise ArchiveError(f"hole {self.first}..{self.end - 1}: its tree: {exc}") from exc

    def describe(self) -> str:
        what = {
            "gone": "sealed records gone before the archiver read them",
            "unread": "sealed records gone before the archiver read them (hashes signed)",
            "quarantined": f"quarantined ({self.reason}) as {self.quarantine_key}",
            "continued": "archived in the log this one continues",
        }[self.kind]
        return (
            f"leaves {self.first}..{self.end - 1} of {self.origin}: {what}, detected "
            f"{self.detected_at}: {self.why}"
        )


def hole_node_source(
    base: NodeSource, gone: Sequence[CompactTree], starts: Sequence[int]
) -> NodeSource:
    """``base`` (the tiles) except for nodes overlapping a ``gone`` hole.

    ``gone[i]`` is the compact tree at the end of the hole starting at ``starts[i]``. A node
    overlapping it is one of that tree's subtrees, or straddles its end and is combined from
    its children; any other (a node inside the hole that no compact tree holds) raises
    :class:`LogError`. That is every node an inclusion proof of a leaf after the hole, or a
    consistency proof between sizes after it, needs (docs/log.md, "Holes").
    """
    if not gone:
        return base
    holes = [(s, t.size) for s, t in zip(starts, gone, strict=True)]
    memo: dict[tuple[int, int], bytes] = {}
    for tree in gone:
        memo.update(zip(compact_positions(tree.size), tree.hashes, strict=True))

    def node(level: int, index: int) -> bytes:
        got = memo.get((level, index))
        if got is not None:
            return got
        first = index << level
        last = first + (1 << level)
        hit = next(((s, e) for s, e in holes if s < last and first < e), None)
        if hit is None:
            return base(level, index)
        if level == 0 or last <= hit[1]:
            raise LogError(
                f"node of leaves {first}..{last - 1} lies in the hole at leaves "
                f"{hit[0]}..{hit[1] - 1}, whose hashes are gone"
            )
        got = hash_children(node(level - 1, 2 * index), node(level - 1, 2 * index + 1))
        memo[(level, index)] = got
        return got

    return node


def compact_at(size: int, node: NodeSource) -> CompactTree:
    """The compact tree of ``size`` leaves from a node source."""
    return CompactTree(size, [node(level, index) for level, index in compact_positions(size)])


def gone_trees(holes: Iterable[tuple[HoleKey, Hole]]) -> tuple[list[CompactTree], list[int]]:
    """The compact trees and first leaves of the ``gone`` holes, for :func:`hole_node_source`."""
    trees: list[CompactTree] = []
    starts: list[int] = []
    for hk, hole in holes:
        if hk.kind in {"gone", "continued"}:
            trees.append(hole.compact())
            starts.append(hk.first)
    return trees, starts
