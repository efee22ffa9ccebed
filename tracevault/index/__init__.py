"""The investigator's index: Parquet metadata of every archived run and event, never content.

Import from here::

    from tracevault.index import Filters, search, rebuild, update

    rebuild(store)                                        # from the archive alone
    for hit in search(store, Filters(tool="send_email")).hits:
        print(hit.run_id, hit.started, hit.status)        # typed rows (RunHit)

Derived, never trusted: every hit carries what verifying it needs, and verify never reads the
index. Sits in the shared-formats layer beside the archive it reads; the CLI (``tracevault
index``, ``tracevault search``) is :mod:`tracevault.index.commands` and
``tracevault.replayer.search`` (docs/index.md).
"""

from tracevault.index._build import BuildReport, build_index, covered_sizes
from tracevault.index._ops import rebuild, update
from tracevault.index._read import LoadedIndex, load_index, open_views
from tracevault.index._rows import IndexedRun, LogPlace, StatusRow, run_rows
from tracevault.index._search import (
    FILTERS,
    STATUSES,
    Filters,
    IndexLag,
    RunHit,
    RunList,
    SearchResult,
    index_lag,
    run_sql,
    search,
)
from tracevault.index._step import IndexFlush, IndexStep
from tracevault.index._tables import (
    EVENT_SCHEMA,
    RUN_SCHEMA,
    STATUS_SCHEMA,
    index_keys,
    parse_index_key,
)
from tracevault.index._worker import IndexWorker

__all__ = [
    # building
    "BuildReport",
    "build_index",
    "covered_sizes",
    "rebuild",
    "update",
    "IndexFlush",
    "IndexStep",
    "IndexWorker",
    "IndexedRun",
    "LogPlace",
    "StatusRow",
    "run_rows",
    # reading and searching
    "FILTERS",
    "STATUSES",
    "Filters",
    "IndexLag",
    "LoadedIndex",
    "RunHit",
    "RunList",
    "SearchResult",
    "index_lag",
    "load_index",
    "open_views",
    "run_sql",
    "search",
    # the tables
    "EVENT_SCHEMA",
    "RUN_SCHEMA",
    "STATUS_SCHEMA",
    "index_keys",
    "parse_index_key",
]
