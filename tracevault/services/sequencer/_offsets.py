"""The heads' offsets: which sealed records get a delivery report, and what the reports give.

Heads need the offsets of seq 0 and of each run's last record of a batch. Our records of a
partition (its events, then its checkpoint) are produced in order by one idempotent
producer, so with no other writer they take consecutive offsets: two delivery reports per
partition (its first event, its checkpoint) then give every offset, checked by their
distance. After another producer's record landed inside a transaction, every tracked record
gets its own report instead (docs/design.md, "Sequencer batch protocol").
"""

from __future__ import annotations

from typing import Any, Protocol

from confluent_kafka import KafkaError, Message

from tracevault.services.sequencer._rules import BatchOutput

__all__ = [
    "bound_recorder",
    "delivery_recorder",
    "first_per_partition",
    "needs_offset",
    "place_from_bounds",
    "place_per_record",
]


class _Reports(Protocol):
    """Where a delivery callback leaves the transaction's first failure (the runtime's
    :class:`~tracevault.services.runtime.Transaction`)."""

    def failed(self, err: KafkaError) -> None: ...


def _off(msg: Message) -> int:
    o = msg.offset()
    return -1 if o is None else int(o)


def needs_offset(out: BatchOutput) -> set[int]:
    """Indexes of the sealed records whose offsets go into heads: seq 0 and each run's last."""
    seen: set[str] = set()
    need: set[int] = set()
    for i in range(len(out.sealed) - 1, -1, -1):
        rec = out.sealed[i]
        run_id = rec.run.run_id
        if run_id not in seen:
            seen.add(run_id)
            need.add(i)
        elif rec.seq == 0:
            need.add(i)
    return need


def first_per_partition(out: BatchOutput) -> set[int]:
    """Indexes of the first sealed record of each partition in the batch."""
    seen: set[int] = set()
    first: set[int] = set()
    for i, rec in enumerate(out.sealed):
        part = rec.run.partition
        if part not in seen:
            seen.add(part)
            first.add(i)
    return first


def bound_recorder(txn: _Reports, bounds: dict[int, list[int]], slot: int) -> Any:
    """The delivery callback of each partition's first event (slot 0) or checkpoint (1)."""

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            txn.failed(err)
            return
        part = msg.partition()
        pair = bounds.get(part)  # type: ignore[arg-type]  # a delivered record has one
        if pair is None:
            pair = bounds[part] = [-1, -1]  # type: ignore[index]
        pair[slot] = _off(msg)

    return on_delivery


def delivery_recorder(txn: _Reports, delivered: dict[bytes, list[int]]) -> Any:
    """The delivery callback of a batch's tracked records: each offset under its run key."""

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            txn.failed(err)
            return
        key = msg.key()
        offs = delivered.get(key)  # type: ignore[arg-type]  # ours: always a run key
        if offs is None:
            delivered[key] = [_off(msg)]  # type: ignore[index]
        else:
            offs.append(_off(msg))

    return on_delivery


def place_per_record(
    out: BatchOutput, tracked: set[int], delivered: dict[bytes, list[int]]
) -> bool:
    """Heads' offsets from a report per tracked record: a run's tracked records, in
    produce order, take its delivered offsets in increasing order (one idempotent
    producer, one partition per run: produce order is offset order). False when a
    tracked record has no report."""
    used: dict[bytes, int] = {}
    for i in sorted(tracked):
        rec = out.sealed[i]
        key = rec.run.key
        offs = delivered.get(key)
        n = used.get(key, 0)
        if offs is None or n >= len(offs):
            return False
        if n == 0:
            offs.sort()
        used[key] = n + 1
        if rec.seq == 0:
            rec.run.first_offset = offs[n]
        rec.run.last_offset = offs[n]
    return True


def place_from_bounds(out: BatchOutput, first: dict[int, int]) -> None:
    """Heads' offsets from each partition's first event offset, once its checkpoint proved
    our records of it consecutive."""
    nxt = dict(first)
    for rec in out.sealed:
        run = rec.run
        offset = nxt[run.partition]
        nxt[run.partition] = offset + 1
        if rec.seq == 0:
            run.first_offset = offset
        run.last_offset = offset
