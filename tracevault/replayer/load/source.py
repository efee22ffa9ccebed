"""``load_run``: one entry point for the topic and the archive."""

from __future__ import annotations

from typing import Literal

from tracevault.archive import open_store
from tracevault.config import Settings
from tracevault.errors import ConfigError
from tracevault.replayer._results import LoadedRun
from tracevault.replayer.load.archive import load_from_archive

__all__ = ["load_run"]


def load_run(
    settings: Settings,
    run_id: str,
    *,
    source: Literal["topic", "archive"] = "archive",
    with_log: bool = False,
) -> LoadedRun:
    """The run's sealed records from ``source`` (unverified: pass the result to ``verify``).

    ``topic`` seeks ``<prefix>.sealed`` straight to the run (its heads entry gives partition
    and offsets); ``archive`` makes one listing of ``runs/<run>/`` at ``settings.archive_url``.
    Raises ``NotFoundError`` when the run is unknown there. ``with_log`` also reads the
    topic's checkpoint records beside the run (``verify`` with trusted keys needs them).
    """
    if source == "topic":
        # Only the topic needs a Kafka client; reading an archive or a bundle must not import
        # one (docs/design.md, "Layout").
        from tracevault.replayer.load._topic import load_from_topic  # noqa: PLC0415

        return load_from_topic(settings, run_id, with_log=with_log)
    if source == "archive":
        store = open_store(settings.archive_url, settings, create=False)
        try:
            return load_from_archive(store, run_id)
        finally:
            store.close()
    raise ConfigError(f"source must be 'topic' or 'archive', got {source!r}")
