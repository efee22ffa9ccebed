"""Generated TraceEvent and SealedEvent values, and fastavro's reading of them, for the fast paths.

``events()`` and ``sealed()`` draw record dicts over the whole published schema: every kind,
null and non-null in every union, empty and large maps, unicode (astral too), longs at every
varint width including the 64-bit limits, and payloads across the 1- and 2-byte length
boundaries. ``encode()`` writes a record the way any conforming Avro writer may: minimal, or
with non-minimal varints and maps split into (also negative-count) blocks. ``reference()`` is
the oracle: ``fastavro.schemaless_reader`` with the published schema, as the codec reads it.
"""

from __future__ import annotations

import random
from io import BytesIO
from typing import Any

from fastavro import schemaless_reader, schemaless_writer
from hypothesis import strategies as st

from tracevault.schemas import MAGIC, default_schemas

LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1

_WIDTH_EDGES = [
    v
    for k in range(1, 10)
    for e in (1 << (7 * k - 1),)  # zig-zag: |v| around 2**(7k-1) changes the varint width
    for v in (e - 1, e, -e, -e - 1)
] + [0, -1, LONG_MIN, LONG_MAX, LONG_MIN + 1, LONG_MAX - 1]

longs = st.one_of(
    st.sampled_from(_WIDTH_EDGES), st.integers(LONG_MIN, LONG_MAX), st.integers(-200, 9000)
)
#: Timestamps: mostly µs between 1974 and 2540 (8-byte varints, read as one word), any long too.
micros = st.one_of(st.integers(2**48, 2**55 - 1), longs)
texts = st.one_of(
    st.text(max_size=12),
    st.text(alphabet=st.characters(codec="utf-8", min_codepoint=0x80), max_size=40),
    st.text(min_size=60, max_size=200),  # lengths of 2-byte varints
    st.sampled_from(["", "run-1", "rün-✓", "🙂" * 20, "\x00"]),
)
payloads = st.one_of(
    st.binary(max_size=80),
    st.integers(8150, 8250).map(lambda n: b"{" + b"x" * (n - 2) + b"}"),  # 2 <-> 3 byte length
    st.integers(0, 70_000).map(bytes),
)
attributes = st.one_of(
    st.just({}),
    st.dictionaries(texts, texts, max_size=6),
    st.dictionaries(
        st.text(min_size=1, max_size=8), st.text(max_size=8), min_size=64, max_size=300
    ),
)


def _kind_symbols() -> list[str]:
    v = default_schemas().get("TraceEvent")
    (kind,) = (f for f in v.source["fields"] if f["name"] == "kind")
    return list(kind["type"]["symbols"])


events = st.fixed_dictionaries(
    {
        "run_id": texts,
        "seq": longs,
        "kind": st.sampled_from(_kind_symbols()),
        "at": micros,
        "agent": st.fixed_dictionaries(
            {
                "agent_id": texts,
                "agent_version": texts,
                "host": texts,
                "harness": texts,
                "sdk_version": texts,
            }
        ),
        "model": st.none() | texts,
        "seed": st.none() | longs,
        "request": payloads,
        "response": payloads,
        "error": st.none() | st.fixed_dictionaries({"type": texts, "message": texts}),
        "idempotency_key": st.none() | texts,
        "parent_seq": st.none() | longs,
        "attributes": attributes,
        "interleave": st.none()
        | st.fixed_dictionaries(
            {"branch_prev": st.none() | longs, "started_at_done": longs, "done_order": longs}
        ),
    }
)

hashes = st.binary(min_size=32, max_size=32)
sealed = st.fixed_dictionaries(
    {
        "run_id": texts,
        "seq": longs,
        "prev_hash": hashes,
        "hash": hashes,
        "raw": payloads,
        "sealed_at": micros,
        "source_partition": st.integers(-(2**31), 2**31 - 1),
        "source_offset": longs,
        "sequencer_id": texts,
    }
)

#: A valid TraceEvent value as ``raw``, so the archiver's reading of the kind is exercised.
_SOME_EVENT = {
    "run_id": "r",
    "seq": 0,
    "kind": "RUN_FINISHED",
    "at": 1,
    "agent": dict.fromkeys(("agent_id", "agent_version", "host", "harness", "sdk_version"), ""),
    "model": None,
    "seed": None,
    "request": b"{}",
    "response": b"null",
    "error": None,
    "idempotency_key": None,
    "parent_seq": None,
    "attributes": {},
    "interleave": {"branch_prev": 3, "started_at_done": 9, "done_order": 5},
}


def version(name: str) -> Any:
    """The newest published version of ``name`` (the one the fast paths are pinned to)."""
    return default_schemas().get(name)


def canonical(name: str, rec: dict[str, Any]) -> bytes:
    """``rec`` as fastavro writes it (minimal varints, one map block), with its header."""
    v = version(name)
    buf = BytesIO()
    buf.write(MAGIC + v.fingerprint)
    schemaless_writer(buf, v.parsed, rec)
    return buf.getvalue()


def reference(name: str, value: bytes) -> dict[str, Any] | None:
    """What the codec makes of ``value``: fastavro's record, or None when it refuses it."""
    v = version(name)
    if value[:10] != MAGIC + v.fingerprint:
        return None
    buf = BytesIO(value)
    buf.seek(10)
    try:
        rec = schemaless_reader(buf, v.parsed, None)
    except Exception:  # fastavro's many error types all mean "refused"
        return None
    return rec if buf.tell() == len(value) else None


class Writer:
    """A conforming Avro binary writer that may pick non-canonical encodings.

    ``pad`` is the chance that a varint gets extra (zero) 7-bit groups, up to 10 bytes in all;
    ``split`` the chance that a map is written in several blocks, half of them with a negative
    count followed by the block's size in bytes. Both are valid Avro that fastavro reads.
    """

    def __init__(self, rng: random.Random, *, pad: float = 0.3, split: float = 0.5) -> None:
        self.rng, self.pad, self.split = rng, pad, split

    def long(self, n: int) -> bytes:
        z = ((n << 1) ^ (n >> 63)) & ((1 << 64) - 1)
        groups = []
        while True:
            groups.append(z & 0x7F)
            z >>= 7
            if not z:
                break
        if self.rng.random() < self.pad:
            groups += [0] * self.rng.randint(1, 10 - len(groups)) if len(groups) < 10 else []
        return bytes([g | 0x80 for g in groups[:-1]] + [groups[-1]])

    def bytes_(self, b: bytes) -> bytes:
        return self.long(len(b)) + b

    def string(self, s: str) -> bytes:
        return self.bytes_(s.encode("utf-8"))

    def map_(self, m: dict[str, str]) -> bytes:
        items = list(m.items())
        out = b""
        while items:
            k = self.rng.randint(1, len(items)) if self.rng.random() < self.split else len(items)
            block = b"".join(self.string(key) + self.string(val) for key, val in items[:k])
            items = items[k:]
            if self.rng.random() < 0.5:
                out += self.long(-k) + self.long(len(block)) + block
            else:
                out += self.long(k) + block
        return out + self.long(0)

    def union(self, value: Any, write: Any) -> bytes:
        return self.long(0) if value is None else self.long(1) + write(value)

    def event(self, r: dict[str, Any]) -> bytes:
        a, e = r["agent"], r["error"]
        return b"".join(
            [
                self.string(r["run_id"]),
                self.long(r["seq"]),
                self.long(_kind_symbols().index(r["kind"])),
                self.long(r["at"]),
                *(self.string(a[k]) for k in ("agent_id", "agent_version", "host")),
                *(self.string(a[k]) for k in ("harness", "sdk_version")),
                self.union(r["model"], self.string),
                self.union(r["seed"], self.long),
                self.bytes_(r["request"]),
                self.bytes_(r["response"]),
                self.union(e, lambda err: self.string(err["type"]) + self.string(err["message"])),
                self.union(r["idempotency_key"], self.string),
                self.union(r["parent_seq"], self.long),
                self.map_(r["attributes"]),
                self.union(
                    r["interleave"],
                    lambda il: (
                        self.union(il["branch_prev"], self.long)
                        + self.long(il["started_at_done"])
                        + self.long(il["done_order"])
                    ),
                ),
            ]
        )

    def sealed(self, r: dict[str, Any]) -> bytes:
        return b"".join(
            [
                self.string(r["run_id"]),
                self.long(r["seq"]),
                r["prev_hash"],
                r["hash"],
                self.bytes_(r["raw"]),
                self.long(r["sealed_at"]),
                self.long(r["source_partition"]),
                self.long(r["source_offset"]),
                self.string(r["sequencer_id"]),
            ]
        )


def some_event_value() -> bytes:
    return canonical("TraceEvent", _SOME_EVENT)
