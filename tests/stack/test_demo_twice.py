"""``bash dev/demo`` twice in one directory: a new cluster starts a new log, not a fork.

Each demo finds no broker at its bootstrap address and starts dev/kafka on it with a fresh
data directory (a new Kafka cluster), then stops it: so the second demo is also the demo
after ``dev/kafka stop``/``start``. The archive of the first is still in the directory; the
second's log has the same prefix and partitions but another generation (cluster and topic
ids), so it is archived beside the first instead of being refused as a fork. Slow (two
demos, each with its own broker): about a minute each with this fleet.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from tests.kafka_harness import ROOT, free_port
from tracevault.archive import open_store
from tracevault.replayer.load.archive import load_from_archive


def test_the_demo_twice_in_one_directory(tmp_path: Path) -> None:
    env = {
        **os.environ,
        # a port no broker answers on: each demo starts (and stops) a broker of its own
        "TRACEVAULT_BOOTSTRAP_SERVERS": f"127.0.0.1:{free_port()}",
        "KAFKA_CONTROLLER_PORT": str(free_port()),
    }
    summaries = []
    for i in (1, 2):
        proc = subprocess.run(
            ["bash", str(ROOT / "dev" / "demo"), "--agents", "2", "--runs", "3", "--sample",
             "2", "--json"],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900, check=False,
        )  # fmt: skip
        assert proc.returncode == 0, f"demo {i}: {proc.stderr[-4000:]}"
        summaries.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    first, second = summaries
    assert first["verified"] == second["verified"] == {"archive": 2, "topic": 2}
    store = open_store(f"file://{tmp_path / '.tracevault' / 'archive'}")
    try:
        # two logs of partition 0, one per cluster, side by side
        gens = {k.key.split("/")[2] for k in store.list(f"log/{first['prefix']}/")}
        assert len(gens) == 2 and all(g.startswith("g") for g in gens), gens
        for run_id in first["run_ids"] + second["run_ids"]:
            run = load_from_archive(store, run_id)
            assert run.log_head, run_id  # finished, found in either log
        assert not store.list("holes/"), "nothing was lost"
        assert not [i for i in store.list("quarantine/")], "nothing was refused as a fork"
    finally:
        store.close()
