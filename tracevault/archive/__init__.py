"""The archive: its layout, receipts and object stores, and reading runs back from it.

Import from here::

    from tracevault.archive import open_store, read_run_objects

    store = open_store("file:///var/lib/tracevault/archive")      # or s3://bucket/prefix
    run = read_run_objects(store, "run-42")                      # one listing of runs/<run>/
    for seg in run.segments:                                     # seq order, receipted only
        for sealed in seg.events(): ...

This package sits beneath the archiver (``tracevault.services.archiver``, which writes it) and
the replayer (which reads it) and imports no Kafka client: verifying an archive or a bundle
needs none (docs/design.md, "Layout"). Keys and receipts are defined in
:mod:`tracevault.archive.layout`. The storage commands (``tracevault archive ls``, ``hold``,
``release``, ``purge``, ``retention-report``) are :mod:`tracevault.archive.commands`, which
this package does not import; only ``retention-report`` with a log key asks Kafka, lazily.
"""

from typing import TYPE_CHECKING

from tracevault.archive._freshness import (
    Freshness,
    Rollback,
    SignedSize,
    TopicTail,
    archive_freshness,
    check_freshness,
    deployment_origins,
    freshest_cosigned,
)
from tracevault.archive._holds import HoldReport, hold_run
from tracevault.archive._holes import (
    HOLE_KINDS,
    LOST,
    Hole,
    HoleKey,
    compact_at,
    gone_trees,
    hole_key,
    hole_node_source,
    holes_prefix,
    parse_hole_key,
)
from tracevault.archive._logread import (
    LogHead,
    LogRun,
    read_log_head,
    read_log_run,
    run_index_keys,
    run_log_keys,
)
from tracevault.archive._open import open_store
from tracevault.archive._purge import PurgeReport, purge
from tracevault.archive._reader import (
    RunListing,
    RunObjects,
    SegmentObject,
    check_run,
    list_run,
    read_run_objects,
)
from tracevault.archive._retention import ObjectRetention, RunRetention, retention_report
from tracevault.archive._runs import RunSummary, archived_run, list_runs, runs_on_day
from tracevault.archive._segment import (
    CODEC,
    encode_segment,
    iter_segment,
    read_segment,
    sealed_body,
)
from tracevault.archive._store import (
    LockMode,
    ObjectInfo,
    ObjectStore,
    ObjectVersion,
    check_key,
    utc_now,
)
from tracevault.archive.layout import FinalReceipt, SegmentReceipt

if TYPE_CHECKING:
    from tracevault.archive._s3store import S3Store

__all__ = [
    "archived_run",
    # stores
    "LockMode",
    "ObjectInfo",
    "ObjectStore",
    "ObjectVersion",
    "S3Store",
    "check_key",
    "open_store",
    "utc_now",
    # reading runs back
    "LogHead",
    "LogRun",
    "read_log_head",
    "read_log_run",
    "run_index_keys",
    "run_log_keys",
    "RunListing",
    "RunObjects",
    "SegmentObject",
    "check_run",
    "list_run",
    "read_run_objects",
    # freshness: the archive against witnesses and the topic (docs/log.md)
    "Freshness",
    "Rollback",
    "SignedSize",
    "TopicTail",
    "archive_freshness",
    "check_freshness",
    "deployment_origins",
    "freshest_cosigned",
    # holes: leaves the archived tree holds but no run history (docs/log.md)
    "HOLE_KINDS",
    "LOST",
    "Hole",
    "HoleKey",
    "compact_at",
    "gone_trees",
    "hole_key",
    "hole_node_source",
    "holes_prefix",
    "parse_hole_key",
    # retention operations
    "ObjectRetention",
    "PurgeReport",
    "RunRetention",
    "RunSummary",
    "HoldReport",
    "hold_run",
    "list_runs",
    "purge",
    "retention_report",
    "runs_on_day",
    # segments and receipts
    "CODEC",
    "FinalReceipt",
    "SegmentReceipt",
    "encode_segment",
    "iter_segment",
    "read_segment",
    "sealed_body",
]


def __getattr__(name: str) -> object:
    """``S3Store`` on first use: it imports boto3, slow to import and needed only for s3://."""
    if name == "S3Store":
        from tracevault.archive._s3store import S3Store  # noqa: PLC0415

        return S3Store
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
