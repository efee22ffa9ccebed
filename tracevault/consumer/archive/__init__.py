"""The archiver: immutable Avro segments in object storage under a retention lock.

Import from here::

    from tracevault.consumer.archive import open_store, read_run_objects

    store = open_store("file:///var/lib/tracevault/archive")      # or s3://bucket/prefix
    run = read_run_objects(store, "run-42")                      # one listing of runs/<run>/
    for seg in run.segments:                                     # seq order, receipted only
        for sealed in seg.events(): ...

Keys and receipts are defined in :mod:`tracevault.consumer.archive.layout`.
"""

from tracevault.consumer.archive._archiver import Archiver, ArchiverStats
from tracevault.consumer.archive._reader import (
    RunListing,
    RunObjects,
    SegmentObject,
    check_run,
    list_run,
    read_run_objects,
)
from tracevault.consumer.archive._retention import (
    ObjectRetention,
    PurgeReport,
    RunRetention,
    RunSummary,
    hold_run,
    list_runs,
    purge,
    retention_report,
)
from tracevault.consumer.archive._segment import (
    CODEC,
    encode_segment,
    iter_segment,
    read_segment,
    sealed_body,
)
from tracevault.consumer.archive._store import (
    LockMode,
    ObjectInfo,
    ObjectStore,
    open_store,
)
from tracevault.consumer.archive._writer import ArchiveWriter, RunCursor
from tracevault.consumer.archive.layout import FinalReceipt, SegmentReceipt

__all__ = [
    # the archiver
    "Archiver",
    "ArchiverStats",
    "ArchiveWriter",
    "RunCursor",
    # stores
    "LockMode",
    "ObjectInfo",
    "ObjectStore",
    "open_store",
    # reading runs back
    "RunListing",
    "RunObjects",
    "SegmentObject",
    "check_run",
    "list_run",
    "read_run_objects",
    # retention operations
    "ObjectRetention",
    "PurgeReport",
    "RunRetention",
    "RunSummary",
    "hold_run",
    "list_runs",
    "purge",
    "retention_report",
    # segments and receipts
    "CODEC",
    "FinalReceipt",
    "SegmentReceipt",
    "encode_segment",
    "iter_segment",
    "read_segment",
    "sealed_body",
]
