"""The runs the Runs page lists: the seam between the desk and whatever finds runs.

Today the archive's listing (``archive.list_runs``, keys only, filtered by a substring of the
run id). When the index exists (``tracevault search``), a ``RunSource`` over it takes this
one's place in ``DeskConfig.runs``: the page asks only ``search(query)`` and ``name``.
"""

from __future__ import annotations

from typing import Protocol

from tracevault.archive import RunSummary, list_runs, open_store
from tracevault.config import Settings

__all__ = ["ArchiveListing", "RunSource"]


class RunSource(Protocol):
    """What the Runs page needs of a search: the runs matching ``query``, and its own name."""

    @property
    def name(self) -> str: ...

    def search(self, query: str) -> list[RunSummary]: ...


class ArchiveListing:
    """Every run in the archive whose id contains ``query`` (case-insensitive), by id."""

    name = "the archive"

    def __init__(self, settings: Settings) -> None:
        self._settings = settings

    def search(self, query: str) -> list[RunSummary]:
        store = open_store(self._settings.archive_url, self._settings, create=False)
        try:
            found = list_runs(store)
        finally:
            store.close()
        q = query.lower()
        return [r for r in found if q in r.run_id.lower()]
