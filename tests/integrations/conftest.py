"""A module-wide pipeline for the adapter and export tests: real broker, real sequencer."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import unique_name
from tests.integrations.pipeline import Pipeline
from tests.replayer.pipeline import sequencer_running
from tracevault.config import Settings
from tracevault.kafka import ensure_topics


@pytest.fixture(scope="module")
def pipeline(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pipeline]:
    base = tmp_path_factory.mktemp("integrations")
    settings = Settings(
        bootstrap_servers=kafka_bootstrap,
        topic_prefix=unique_name("tvi"),
        partitions=1,
        archive_url=f"file://{base / 'archive'}",
        spool_dir=str(base / "spool"),
    )
    ensure_topics(settings)
    with sequencer_running(settings):
        yield Pipeline(settings)
