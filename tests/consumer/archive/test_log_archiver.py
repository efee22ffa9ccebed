"""The archiver verifies the signed log before it archives, and writes a static log."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.consumer.archive.helpers import SealedLog, running, wait_for
from tests.consumer.archive.sealed_factory import sealed_values
from tracevault.archive import open_store
from tracevault.archive.tlog import checkpoint_prefix, log_prefix
from tracevault.config import Settings
from tracevault.consumer.archive import Archiver, ArchiverStats
from tracevault.errors import ConfigError
from tracevault.replayer._archive import load_from_archive
from tracevault.replayer._verify import verify


def _archive(settings: Settings, until: Callable[[Archiver], bool]) -> ArchiverStats:
    archiver = Archiver(settings)
    with running(archiver) as out:
        wait_for(lambda: until(archiver), 60, "the archiver")
    stats = out[0]
    assert isinstance(stats, ArchiverStats), stats
    return stats


def test_the_archiver_refuses_to_start_without_trusted_keys(
    settings_factory: Callable[..., Settings],
) -> None:
    with pytest.raises(ConfigError, match="LOG_VKEYS"):
        Archiver(settings_factory(create=False))


def test_logged_runs_archive_as_a_static_log_and_verify_with_the_key(
    settings_factory: Callable[..., Settings],
) -> None:
    sl = SealedLog(settings_factory(archive_segment_max_events=100, archive_segment_max_age_s=0.3))
    runs = {f"run-{i}": sealed_values(f"run-{i}", 20 + i) for i in range(12)}
    n = sl.produce(runs, batch=70)
    settings = sl.settings_trusting()
    stats = _archive(settings, lambda a: a.stats.events_archived == n)
    assert stats.events_quarantined == 0
    assert stats.runs_finished == 12
    store = open_store(settings.archive_url, settings)
    for p in range(sl.partitions):
        cps = [i.key for i in store.list(checkpoint_prefix(log_prefix(settings.topic_prefix, p)))]
        if sl.trees.get(p):
            assert cps[-1].endswith(f"{sl.trees[p].size:020d}")
    for run_id, values in runs.items():
        run = load_from_archive(store, run_id)
        assert run.log_evidence is not None
        report = verify(run, keys=[sl.signer.verifier], require_finished=True)
        assert report.count == len(values) and report.finished
        assert report.checks[0].startswith("L1")
