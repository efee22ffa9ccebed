"""A module-wide pipeline for the adapter and export tests: real broker, real sequencer."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integrations.pipeline import Pipeline
from tests.replayer.pipeline import fresh_settings, sequencer_running


@pytest.fixture(scope="module")
def pipeline(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pipeline]:
    base = tmp_path_factory.mktemp("integrations")
    settings = fresh_settings(kafka_bootstrap, base, "tvi")
    with sequencer_running(settings):
        yield Pipeline(settings)
