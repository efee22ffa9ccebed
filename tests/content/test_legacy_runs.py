"""Runs recorded before encryption (the golden corpus, plaintext) stay readable, replayable and
verifiable where a key provider is configured: a run without a wrapped key is read as is."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.replayer.golden_runs import NAMES, golden_run
from tracevault.config import Settings
from tracevault.content import is_encrypted
from tracevault.replayer import areplay, replay, verify
from tracevault.replayer.batch.jobs import load_agent
from tracevault.replayer.load.opened import opened


@pytest.mark.parametrize("name", NAMES)
def test_a_plaintext_run_opens_as_is_under_a_key_provider(name: str, tmp_path: Path) -> None:
    meta, run = golden_run(name)
    report = verify(run, require_finished=True)
    assert not is_encrypted(report.events)
    keyed = Settings(key_provider="keyring", keyring_path=str(tmp_path / "kr.json"))
    events = opened(keyed, report.events)
    assert [e.request for e in events] == [e.request for e in report.events]
    agent = load_agent(meta["agent"])
    if asyncio.iscoroutinefunction(agent):
        result = asyncio.run(areplay(events, agent))
    else:
        result = replay(events, agent)
    assert result.matched and result.steps == report.count
    assert not (tmp_path / "kr.json").exists()  # nothing asked of the provider
