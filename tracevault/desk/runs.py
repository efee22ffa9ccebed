"""The runs the Runs page lists: the seam between the desk and whatever finds runs.

The page asks a ``RunSource`` for one page of a ``RunQuery`` (a run-id substring, the
filters of ``tracevault search``, a page) and shows the ``RunPage`` it gets. Two sources:
``IndexSource``, the index's search (``tracevault.index``: DuckDB over Parquet, every filter,
paged in the query so a 1M-run index is one screen), and ``ArchiveListing``, the archive's
keys when no index was built (run id only: it says the filters need the index).
``source_for`` picks the index when the archive has one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from tracevault.archive import ObjectStore, list_runs, open_store
from tracevault.config import Settings
from tracevault.index import Filters, RunList, index_keys

__all__ = [
    "ArchiveListing",
    "IndexSource",
    "RunPage",
    "RunQuery",
    "RunRow",
    "RunSource",
    "source_for",
]


@dataclass(frozen=True, slots=True)
class RunQuery:
    """What the Runs page asks: runs whose id contains ``text`` and every filter holds for,
    page ``page`` of ``size`` rows."""

    text: str = ""
    filters: Filters = field(default_factory=Filters)
    page: int = 0
    size: int = 100

    @property
    def filtered(self) -> bool:
        return self.filters != Filters()


@dataclass(frozen=True, slots=True)
class RunRow:
    """One run of the list: what its row shows (unknown fields None)."""

    run_id: str
    events: int
    status: str
    started: datetime | None = None
    agent: str | None = None
    tools: tuple[str, ...] = ()
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class RunPage:
    """One page of runs, the number that match in all, and what the page must say about
    how they were found (index objects skipped, filters the source cannot apply)."""

    rows: list[RunRow]
    total: int
    notes: tuple[str, ...] = ()


class RunSource(Protocol):
    """What the Runs page needs of a search: one page of a query, and the source's name."""

    @property
    def name(self) -> str: ...

    def search(self, query: RunQuery) -> RunPage: ...


class IndexSource:
    """The index's search (the runs view, deduplicated, kept between pages by ``RunList``)."""

    name = "the index"

    def __init__(self, store: ObjectStore) -> None:
        self._runs = RunList(store)

    def search(self, query: RunQuery) -> RunPage:
        hits, total, skipped = self._runs.page(
            query.filters, offset=query.page * query.size, limit=query.size, id_contains=query.text
        )
        rows = [
            RunRow(h.run_id, h.events, h.status, h.started, h.agent_id, h.tools, h.status_reason)
            for h in hits
        ]
        notes = tuple(
            f"index object skipped (unreadable): {k}: {why}" for k, why in skipped.items()
        )
        return RunPage(rows, total, notes)

    def warm(self) -> None:
        """Read the index and build its runs view now, not on the first visitor's page."""
        self._runs.page(Filters(), offset=0, limit=1)

    def close(self) -> None:
        self._runs.close()


class ArchiveListing:
    """Every run in the archive whose id contains the query's text (case-insensitive), by id:
    from the archive's keys alone, so it cannot filter by agent, tool or time."""

    name = "the archive"

    def __init__(self, settings: Settings) -> None:
        self._settings = settings

    def search(self, query: RunQuery) -> RunPage:
        store = open_store(self._settings.archive_url, self._settings, create=False)
        try:
            found = list_runs(store)
        finally:
            store.close()
        q = query.text.lower()
        rows = [
            RunRow(r.run_id, r.events, "finished" if r.complete else "unfinished")
            for r in found
            if q in r.run_id.lower()
        ]
        notes: tuple[str, ...] = ()
        if query.filtered:
            notes = (
                "filters need the index (`tracevault index rebuild`): these are all runs "
                "whose id matches, unfiltered",
            )
        lo = query.page * query.size
        return RunPage(rows[lo : lo + query.size], len(rows), notes)


def source_for(settings: Settings) -> RunSource:
    """The index when the archive has one, else the archive's listing."""
    store = open_store(settings.archive_url, settings, create=False)
    if index_keys(store, ("runs",)):
        return IndexSource(store)
    store.close()
    return ArchiveListing(settings)
