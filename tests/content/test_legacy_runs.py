"""Runs recorded before encryption (the golden corpus, plaintext) stay readable, replayable and
verifiable where a key provider is configured: a run without a wrapped key is read as is."""

from __future__ import annotations

import asyncio
import json
from io import BytesIO
from pathlib import Path

import fastavro
import pytest

from tracevault.config import Settings
from tracevault.content import is_encrypted
from tracevault.replayer import LoadedRun, areplay, replay, verify
from tracevault.replayer._batch import load_agent
from tracevault.replayer._opened import opened
from tracevault.replayer._records import SealedRows

GOLDEN = Path(__file__).parents[1] / "replayer" / "golden"
NAMES = sorted(p.stem for p in GOLDEN.glob("*.json"))


@pytest.mark.parametrize("name", NAMES)
def test_a_plaintext_run_opens_as_is_under_a_key_provider(name: str, tmp_path: Path) -> None:
    meta = json.loads((GOLDEN / f"{name}.json").read_text())
    rows = list(fastavro.reader(BytesIO((GOLDEN / f"{name}.avro").read_bytes())))
    run = LoadedRun(
        run_id=meta["run_id"], source="memory", records=SealedRows(rows),
        objects=[f"golden/{name}.avro"] * len(rows),
    )  # fmt: skip
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
