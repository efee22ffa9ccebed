"""The archiver's and the archive's public surfaces are what users import: pin them."""

from __future__ import annotations

import subprocess
import sys

import click

import tracevault.archive
import tracevault.archive.commands
import tracevault.index.commands
import tracevault.services.archiver
import tracevault.services.archiver.commands
from tracevault.cli import tracevault as cli


def test_archiver_exports() -> None:
    assert set(tracevault.services.archiver.__all__) == {
        "Archiver", "ArchiverStats", "ArchiveWriter", "RunCursor",
    }  # fmt: skip
    for name in tracevault.services.archiver.__all__:
        assert getattr(tracevault.services.archiver, name) is not None


def test_the_storage_commands_live_with_the_storage_and_the_service_with_the_service() -> None:
    """``tracevault archive ...`` operates on storage; ``tracevault archiver`` is the service:
    each is mounted from its own room (one package named archive, one archiver). The group
    is mounted from the index's room, which sits above the archive: its ``ls`` adds the
    index's columns, every other storage command is the archive room's own."""
    ctx = click.Context(cli)
    group = cli.get_command(ctx, "archive")
    assert group is tracevault.index.commands.archive
    storage = tracevault.archive.commands.archive.commands
    assert isinstance(group, click.Group) and set(group.commands) == set(storage)
    assert all(group.commands[n] is cmd for n, cmd in storage.items() if n != "ls")
    assert cli.get_command(ctx, "archiver") is tracevault.services.archiver.commands.archiver
    assert tracevault.services.archiver.commands.__all__ == ["archiver"]
    assert not hasattr(tracevault.services.archiver.commands, "archive")


def test_archive_exports() -> None:
    assert set(tracevault.archive.__all__) == {
        "LockMode", "ObjectInfo", "ObjectStore", "ObjectVersion", "open_store",
        "S3Store", "check_key", "utc_now",
        "HOLE_KINDS", "LOST", "Hole", "HoleKey", "compact_at", "gone_trees", "hole_key",
        "hole_node_source", "holes_prefix", "parse_hole_key",
        "RunListing", "RunObjects", "SegmentObject", "check_run", "list_run", "read_run_objects",
        "ObjectRetention", "PurgeReport", "RunRetention", "RunSummary", "hold_run", "list_runs",
        "HoldReport",
        "archived_run",
        "purge", "retention_report", "runs_on_day",
        "LogRun", "read_log_run", "LogHead", "read_log_head", "run_index_keys", "run_log_keys",
        "CODEC", "FinalReceipt", "SegmentReceipt", "encode_segment", "iter_segment",
        "read_segment", "sealed_body",
        "Freshness", "Rollback", "SignedSize", "TopicTail", "archive_freshness",
        "check_freshness", "deployment_origins", "freshest_cosigned",
    }  # fmt: skip
    for name in tracevault.archive.__all__:
        assert getattr(tracevault.archive, name) is not None


def _modules_after(statement: str) -> set[str]:
    """The modules a fresh interpreter has loaded after ``statement``: imports are global."""
    out = subprocess.run(
        [sys.executable, "-c", f"{statement}\nimport sys\nprint('\\n'.join(sys.modules))"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return set(out.split())


def test_replayer_and_archive_import_no_kafka_client() -> None:
    """Verifying an archive or a bundle must work where no Kafka client is installed."""
    for statement in (
        "import tracevault.replayer",
        "import tracevault.archive",
        "from tracevault.replayer import verify_bundle, load_run, verify",
    ):
        loaded = _modules_after(statement)
        kafka = sorted(m for m in loaded if m.startswith("confluent_kafka"))
        assert not kafka, f"{statement!r} loaded {kafka}"
        services = sorted(m for m in loaded if m.startswith("tracevault.services"))
        assert not services, f"{statement!r} loaded {services}"
