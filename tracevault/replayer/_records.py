"""Columnar, lazily decoded views of a run's records.

A 100,000-event run must verify in well under two seconds. The loaders keep the rows as
Avro dicts, and a record becomes a :class:`SealedEvent` only when someone looks at it.
Events are either rebuilt all at once inside the checks (``verify(..., rebuild=True)``, ~2.5
µs an event with the direct v1 reader in ``tracevault.schemas.fast``) or, by default,
decoded here on first access with ``decode_event``'s canonical-JSON check.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, overload

from tracevault.schemas import SealedEvent, TraceEvent, decode_event

__all__ = ["LazyEvents", "SealedRows", "sealed_of"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def sealed_of(row: Mapping[str, Any]) -> SealedEvent:
    """A SealedEvent from an Avro row; fastavro may have turned ``sealed_at`` into a datetime."""
    at = row["sealed_at"]
    if isinstance(at, datetime):
        row = {**row, "sealed_at": (at - _EPOCH) // timedelta(microseconds=1)}
    return SealedEvent.from_avro(row)


class SealedRows(Sequence[SealedEvent]):
    """SealedEvent rows (Avro dicts) that become :class:`SealedEvent` on access."""

    __slots__ = ("rows",)

    def __init__(self, rows: Sequence[Mapping[str, Any]]) -> None:
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    @overload
    def __getitem__(self, i: int) -> SealedEvent: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[SealedEvent]: ...
    def __getitem__(self, i: int | slice) -> SealedEvent | Sequence[SealedEvent]:
        if isinstance(i, slice):
            return [sealed_of(r) for r in self.rows[i]]
        return sealed_of(self.rows[i])

    def __iter__(self) -> Iterator[SealedEvent]:
        for r in self.rows:
            yield sealed_of(r)

    @classmethod
    def of(cls, records: Sequence[SealedEvent]) -> SealedRows:
        if isinstance(records, SealedRows):
            return records
        return cls([r.to_avro() for r in records])


class LazyEvents(Sequence[TraceEvent]):
    """The run's TraceEvents, decoded (with canonical-JSON checks) when first read."""

    __slots__ = ("_cache", "_raws")

    def __init__(self, raws: Sequence[bytes]) -> None:
        self._raws = raws
        self._cache: list[TraceEvent | None] = [None] * len(raws)

    def __len__(self) -> int:
        return len(self._raws)

    def _get(self, i: int) -> TraceEvent:
        ev = self._cache[i]
        if ev is None:
            ev = decode_event(self._raws[i], what=f"event at position {i}")
            self._cache[i] = ev
        return ev

    @overload
    def __getitem__(self, i: int) -> TraceEvent: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[TraceEvent]: ...
    def __getitem__(self, i: int | slice) -> TraceEvent | Sequence[TraceEvent]:
        if isinstance(i, slice):
            return [self._get(j) for j in range(*i.indices(len(self._raws)))]
        if i < 0:
            i += len(self._raws)
        if not 0 <= i < len(self._raws):
            raise IndexError(i)
        return self._get(i)

    def __iter__(self) -> Iterator[TraceEvent]:
        for i in range(len(self._raws)):
            yield self._get(i)
