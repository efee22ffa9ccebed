"""Sequencer test settings: short gap and transaction timeouts so fault paths finish fast."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tracevault.config import Settings


@pytest.fixture
def seq_settings(settings_factory: Callable[..., Settings]) -> Callable[..., Settings]:
    def make(partitions: int = 3, **overrides: object) -> Settings:
        values: dict[str, object] = {
            "sequencer_batch_size": 500,
            "sequencer_batch_wait_ms": 20,
            "sequencer_transaction_timeout_ms": 10_000,
            "sequencer_session_timeout_ms": 6_000,
            "sequencer_gap_timeout_s": 30.0,
        }
        values.update(overrides)
        return settings_factory(partitions=partitions, **values)

    return make
