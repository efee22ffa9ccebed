"""The archive's public surface is what the replayer and users import: pin it."""

from __future__ import annotations

import tracevault.consumer.archive


def test_archive_exports() -> None:
    assert set(tracevault.consumer.archive.__all__) == {
        "Archiver", "ArchiverStats", "ArchiveWriter", "RunCursor",
        "LockMode", "ObjectInfo", "ObjectStore", "open_store",
        "RunListing", "RunObjects", "SegmentObject", "check_run", "list_run", "read_run_objects",
        "ObjectRetention", "PurgeReport", "RunRetention", "RunSummary", "hold_run", "list_runs",
        "purge", "retention_report",
        "CODEC", "FinalReceipt", "SegmentReceipt", "encode_segment", "iter_segment",
        "read_segment", "sealed_body",
    }  # fmt: skip
    for name in tracevault.consumer.archive.__all__:
        assert getattr(tracevault.consumer.archive, name) is not None
