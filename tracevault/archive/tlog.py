"""The archive as a static log per sealed partition (C2SP tlog-tiles) plus a per-run index.

Keys (every object written once and retention-locked; docs/log.md, "Archive")::

    log/<prefix>/[<gen>/]<p>/...                 one log per partition and generation:
    log/<prefix>/<p>/tile/<L>/<N>[.p/<W>]        hash tiles (c2sp.org/tlog-tiles)
    log/<prefix>/<p>/tile/entries/<N>[.p/<W>]    entry bundles: the leaf data (u16-prefixed)
    log/<prefix>/<p>/data/<N>[.p/<W>]            the sealed records of the same leaves (u32-
                                                 prefixed SealedEvent values), aligned
    log/<prefix>/<p>/checkpoint/<size:020d>      the signed checkpoint note at that size
    runs/<run>/log-<p>-<size:012d>.json          RunIndex: the run's leaves added by the flush
                                                 that ended at <size>
    index/day-runs/<day>/<prefix>-<p>-<size>     the runs a flush first saw on <day>, one
                                                 object per flush (layout.day_batch_key)

The spec's single mutable ``checkpoint`` object cannot live on WORM storage, so each
checkpoint is its own immutable object named by its size; the newest is the last in a listing.
A run is one listing of ``runs/<run>/``; legacy ``seg-*`` objects under the same prefix are the
older layout (``tracevault.archive.layout``), still read.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import chain
from typing import Any
from urllib.parse import quote

from tracevault.errors import ArchiveError
from tracevault.transparency import entries_path, tile_path

__all__ = [
    "RunIndex",
    "RunIndexJson",
    "checkpoint_key",
    "checkpoint_prefix",
    "data_key",
    "decode_values",
    "encode_values",
    "entries_key",
    "log_prefix",
    "parse_checkpoint_key",
    "parse_run_index_key",
    "run_index_key",
    "tile_key",
]

_U32 = struct.Struct(">I")
#: what ``json.dumps`` (ensure_ascii) writes for a ``str``, quotes included
_json_str = json.encoder.encode_basestring_ascii


def log_prefix(prefix: str, partition: int, generation: str = "") -> str:
    """``log/<prefix>/<p>/`` of a log begun before generations, else
    ``log/<prefix>/<generation>/<p>/``: one log per sealed topic incarnation, side by side."""
    gen = f"{generation}/" if generation else ""
    return f"log/{quote(prefix, safe='-_.')}/{gen}{partition}/"


def tile_key(log: str, level: int, index: int, width: int) -> str:
    return log + tile_path(level, index, width)


def entries_key(log: str, index: int, width: int) -> str:
    return log + entries_path(index, width)


def data_key(log: str, index: int, width: int) -> str:
    return log + "data/" + entries_path(index, width)[len("tile/entries/") :]


def checkpoint_prefix(log: str) -> str:
    return log + "checkpoint/"


def checkpoint_key(log: str, size: int) -> str:
    return f"{checkpoint_prefix(log)}{size:020d}"


def parse_checkpoint_key(key: str) -> int | None:
    """The tree size a checkpoint object's key names, or None if ``key`` is not one."""
    name = key.rsplit("/", 1)[-1]
    return int(name) if name.isdigit() else None


def run_index_key(run_prefix: str, partition: int, size: int, generation: str = "") -> str:
    """``log-<p>-<size>[-<generation>].json``: the generation keeps two incarnations of a
    partition's log apart when one run id is recorded in both at the same tree size, where one
    key would be two objects with different content (docs/log.md, "A new cluster is a new
    log")."""
    gen = f"-{generation}" if generation else ""
    return f"{run_prefix}log-{partition}-{size:012d}{gen}.json"


def parse_run_index_key(key: str) -> tuple[int, int] | None:
    """``(partition, size)`` of a run index key, or None if ``key`` is not one."""
    name = key.rsplit("/", 1)[-1]
    if not (name.startswith("log-") and name.endswith(".json")):
        return None
    try:
        p, size, *gen = name[4:-5].split("-")
        if len(gen) > 1 or (gen and not gen[0]):
            return None
        return int(p), int(size)
    except ValueError:
        return None


def encode_values(values: Iterable[bytes]) -> bytes:
    """A data bundle: each sealed value as a big-endian u32 length and the bytes.

    The lengths and the values are interleaved into one list and joined once: concatenating
    each length to its value first copied every value twice (the archiver bundles every
    event it archives on its consumer thread)."""
    vals = list(values)
    out: list[bytes] = [b""] * (2 * len(vals))
    out[0::2] = map(_U32.pack, map(len, vals))
    out[1::2] = vals
    return b"".join(out)


def decode_values(data: bytes, key: str) -> list[bytes]:
    out: list[bytes] = []
    add, unpack = out.append, _U32.unpack_from  # locals: a verify reads every value
    pos, end = 0, len(data)
    while pos < end:
        if pos + 4 > end:
            raise ArchiveError(f"data bundle {key} ends inside a length (byte {pos})")
        (n,) = unpack(data, pos)
        pos += 4
        q = pos + n
        if q > end:
            raise ArchiveError(f"data bundle {key} ends inside record {len(out)}")
        add(data[pos:q])
        pos = q
    return out


@dataclass(frozen=True, slots=True)
class RunIndex:
    """One flush's part of a run: which leaves of which partition log hold which seqs.

    ``size`` is the tree size the flush archived (its checkpoint object and the bundles at
    that size hold every listed leaf); ``finished`` and ``head`` are set on the flush that
    archived the run's RUN_FINISHED. Canonical JSON, no timestamps: a flush redone after a
    crash writes the same bytes.
    """

    run_id: str
    log: str
    origin: str
    partition: int
    size: int
    leaves: tuple[tuple[int, int], ...]  # (leaf index, seq), seq order
    finished: bool = False
    head: str = ""
    version: int = 1

    def to_json(self) -> bytes:
        """``json.dumps`` of the fields in key order, ``separators=(",", ":")``."""
        if _plain(self):
            json_of = RunIndexJson(self.log, self.origin, self.partition, self.size, self.version)
            return json_of(self.run_id, self.leaves, self.finished, self.head)
        obj = {  # a field of another type (only a caller outside the archiver passes one)
            "finished": self.finished,
            "head": self.head,
            "leaves": [list(x) for x in self.leaves],
            "log": self.log,
            "origin": self.origin,
            "partition": self.partition,
            "run_id": self.run_id,
            "size": self.size,
            "version": self.version,
        }
        return json.dumps(obj, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, data: bytes, key: str) -> RunIndex:
        try:
            obj: Any = json.loads(data)
            if not isinstance(obj, dict) or obj.get("version") != 1:
                raise ValueError("not a version-1 run index object")
            pairs = obj.pop("leaves")
            if set(map(type, chain.from_iterable(pairs))) <= {int} and set(map(len, pairs)) <= {2}:
                leaves = tuple(map(tuple, pairs))  # plain (leaf, seq) pairs: converted in C
            else:
                leaves = tuple((int(i), int(s)) for i, s in pairs)
            return cls(leaves=leaves, **obj)
        except (ValueError, TypeError, KeyError) as exc:
            raise ArchiveError(f"run index {key} is unreadable: {exc}") from exc


def _plain(idx: RunIndex) -> bool:
    """Every field of the type it is declared with (``int`` exactly: not a ``bool``)."""
    leaves = idx.leaves
    return (
        {type(idx.finished)} == {bool}
        and {type(idx.partition), type(idx.size), type(idx.version)} == {int}
        and {type(idx.head), type(idx.log), type(idx.origin), type(idx.run_id)} == {str}
        and set(map(type, leaves)) <= {tuple}
        and set(map(len, leaves)) <= {2}
        and set(map(type, chain.from_iterable(leaves))) <= {int}
    )


class RunIndexJson:
    """``RunIndex.to_json`` of the runs of one flush, written out by hand.

    Why: the archiver's main thread makes one per run per flush, and building a ``RunIndex``
    and ``json.dumps`` of it cost about 15 µs a run (this, 4); the fields every run of a
    flush shares are encoded once. The bytes are ``json.dumps``'s, which a flush redone
    after a crash must write again (a store refuses others at the same key): strings go
    through the ``json`` module's own escaper and ``%d`` writes a plain ``int`` as
    ``json.dumps`` does (tests/services/archiver/test_encoding_identity.py).
    """

    __slots__ = ("_end", "_mid")

    def __init__(self, log: str, origin: str, partition: int, size: int, version: int = 1):
        self._mid = (
            f'"log":{_json_str(log)},"origin":{_json_str(origin)},"partition":{partition:d},'
            '"run_id":'
        )
        self._end = f',"size":{size:d},"version":{version:d}}}'

    def __call__(
        self, run_id: str, leaves: Iterable[tuple[int, int]], finished: bool, head: str
    ) -> bytes:
        """``leaves``: (leaf index, seq) tuples of plain ``int``."""
        pairs = "],[".join(map("%d,%d".__mod__, leaves))
        return (
            f'{{"finished":{"true" if finished else "false"},"head":{_json_str(head)},'
            f'"leaves":[{"[" + pairs + "]" if pairs else ""}],{self._mid}{_json_str(run_id)}'
            f"{self._end}"
        ).encode()
