"""The golden corpus under golden/ (tests/replayer/make_golden.py), loaded as a run to verify."""

from __future__ import annotations

import json
from io import BytesIO
from pathlib import Path
from typing import Any

import fastavro

from tracevault.replayer import LoadedRun
from tracevault.replayer._records import SealedRows

GOLDEN = Path(__file__).with_name("golden")
NAMES = sorted(p.stem for p in GOLDEN.glob("*.json"))


def golden_run(name: str) -> tuple[dict[str, Any], LoadedRun]:
    """The run's metadata (golden/NAME.json) and its sealed records (golden/NAME.avro)."""
    meta = json.loads((GOLDEN / f"{name}.json").read_text())
    rows = list(fastavro.reader(BytesIO((GOLDEN / f"{name}.avro").read_bytes())))
    run = LoadedRun(
        run_id=meta["run_id"], source="memory", records=SealedRows(rows),
        objects=[f"golden/{name}.avro"] * len(rows),
    )  # fmt: skip
    return meta, run
