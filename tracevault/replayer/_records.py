"""Columnar, lazily decoded views of a run's records.

A 100,000-event run must verify in well under two seconds. The loaders keep the rows as
Avro dicts, and a record becomes a :class:`SealedEvent` only when someone looks at it.
Events are either rebuilt all at once inside the checks (``verify(..., rebuild=True)``, ~2.5
µs an event with the direct v1 reader in ``tracevault.schemas.fast``) or, by default,
decoded here on first access with ``decode_event``'s canonical-JSON check.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, overload

from tracevault.schemas import SealedEvent, TraceEvent, decode_event
from tracevault.schemas.fast import SealedColumns

__all__ = ["LazyEvents", "SealedRows", "sealed_of"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def sealed_of(row: Mapping[str, Any]) -> SealedEvent:
    """A SealedEvent from an Avro row; fastavro may have turned ``sealed_at`` into a datetime."""
    at = row["sealed_at"]
    if isinstance(at, datetime):
        row = {**row, "sealed_at": (at - _EPOCH) // timedelta(microseconds=1)}
    return SealedEvent.from_avro(row)


class SealedRows(Sequence[SealedEvent]):
    """SealedEvent rows (Avro dicts) that become :class:`SealedEvent` on access.

    A source that holds the exact sealed values (the archive's data bundles) gives them with
    ``read`` (values -> rows, the codec's fallback and errors included) and ``walk`` (values
    -> :class:`SealedColumns`, or None): the rows are then read on first use of ``rows``,
    and ``verify`` with rebuild asks :meth:`columns` instead, one walk of each value that
    also decodes its event (``tracevault.schemas.fast._columns``), so a verified rebuild
    never builds the row dicts.
    """

    __slots__ = ("_columns", "_read", "_rows", "_values", "_walk")

    def __init__(
        self,
        rows: Sequence[Mapping[str, Any]] | None = None,
        *,
        values: Sequence[bytes] = (),
        read: Callable[[Sequence[bytes]], Sequence[Mapping[str, Any]]] | None = None,
        walk: Callable[[Sequence[bytes]], SealedColumns | None] | None = None,
    ) -> None:
        if rows is None and read is None:
            raise ValueError("SealedRows needs rows, or values with a reader")
        self._rows, self._values, self._read, self._walk = rows, values, read, walk
        self._columns: SealedColumns | None = None

    @property
    def rows(self) -> Sequence[Mapping[str, Any]]:
        if self._rows is None:
            assert self._read is not None  # the constructor's invariant
            self._rows = self._read(self._values)
        return self._rows

    @property
    def values(self) -> Sequence[bytes]:
        """The exact sealed values the rows are read from (empty when built from rows)."""
        return self._values

    def columns(self) -> SealedColumns | None:
        """The values walked once into columns with their events, or None (use ``rows``)."""
        if self._columns is None and self._walk is not None and self._rows is None:
            self._columns = self._walk(self._values)
            if self._columns is None:
                self._walk = None  # declined: the rows are read (and judged) instead
        return self._columns

    def __len__(self) -> int:
        if self._rows is None:
            return len(self._values)
        return len(self._rows)

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
