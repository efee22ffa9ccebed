"""A genuine fork is still refused: the same origin and size as the archived log, another root.

A new cluster is a new log (another generation in its origin, docs/log.md), so what is left
under one origin with two roots is a fork: the log key signed two histories. On the shared
broker, a second writer with the same key and origin starts the partition's log again; the
real archiver refuses its checkpoint with an ALERT and archives none of it.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tests.services.archiver.sealed_factory import sealed_run
from tests.transparency.signed_sealed import SignedSealedWriter, fresh_settings
from tracevault.archive import open_store
from tracevault.services.archiver import Archiver
from tracevault.services.archiver._quarantine import Quarantined


def test_the_same_origin_and_size_with_another_root_is_refused_with_an_alert(
    kafka_bootstrap: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = fresh_settings(kafka_bootstrap, tmp_path, partitions=1)
    writer = SignedSealedWriter(settings)
    writer.publish(sealed_run("f-genuine", 3))
    assert Archiver(settings, verifiers=[writer.signer.verifier]).run(until_idle=2).events_archived
    fork = SignedSealedWriter(settings, writer.signer)  # same key and origin, a fresh tree
    fork.publish(sealed_run("f-forked", 3))
    caplog.set_level(logging.ERROR)
    stats = Archiver(settings, verifiers=[writer.signer.verifier]).run(until_idle=2)
    assert stats.events_archived == 0 and stats.holes == 0, stats
    store = open_store(settings.archive_url, settings)
    refused = [Quarantined.from_json(store.get(i.key)) for i in store.list("quarantine/")]
    assert [q.reason for q in refused] == ["bad-checkpoint"], refused
    assert "forked" in refused[0].detail
    assert any("ALERT" in r.getMessage() and "forked" in r.getMessage() for r in caplog.records)
    assert not store.list("runs/f-forked/")
