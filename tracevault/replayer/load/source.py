"""``load_run``: one entry point for the topic and the archive."""

from __future__ import annotations

import dataclasses
from typing import Literal

from tracevault.archive import ObjectStore, open_store
from tracevault.config import Settings
from tracevault.errors import ConfigError, NotFoundError
from tracevault.replayer._results import LoadedRun
from tracevault.replayer.load.archive import find_contested, load_from_archive
from tracevault.runid import run_id_problem

__all__ = ["load_archived", "load_run", "refuse_bad_run_id"]


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
    The sequencer's contested records naming the run come with it (``LoadedRun.contested``).
    """
    if source == "topic":
        # Only the topic needs a Kafka client; reading an archive or a bundle must not import
        # one (docs/design.md, "Layout").
        from tracevault.replayer.load._topic import (  # noqa: PLC0415
            find_contested_on_topic,
            find_dlq_copies,
            load_from_topic,
        )

        run = load_from_topic(settings, run_id, with_log=with_log)
        found = find_contested_on_topic(settings, run_id, with_log=with_log)
        if not found:
            return run
        copies = find_dlq_copies(settings, run_id)
        return dataclasses.replace(
            run, contested=found, dlq_copies=copies or (), dlq_read=copies is not None
        )
    if source == "archive":
        store = open_store(settings.archive_url, settings, create=False)
        try:
            return load_archived(store, run_id)
        finally:
            store.close()
    raise ConfigError(f"source must be 'topic' or 'archive', got {source!r}")


def refuse_bad_run_id(run_id: str, exc: NotFoundError) -> None:
    """A run not found whose id breaks the grammar is a usage error naming the grammar, not
    "not in the archive": no new run can have that id. A run recorded before the grammar is
    still read (it is found), so the rule is applied only once the lookup failed
    (docs/design.md, "Run ids")."""
    problem = run_id_problem(run_id)
    if problem is not None:
        raise ConfigError(f"{problem}; no run can have that id") from exc


def load_archived(store: ObjectStore, run_id: str) -> LoadedRun:
    """The run from an open archive ``store``, with the contested records naming it."""
    run = load_from_archive(store, run_id)
    found = find_contested(store, run_id)
    return dataclasses.replace(run, contested=found) if found else run
