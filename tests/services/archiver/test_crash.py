"""SIGKILL the archiver (a real subprocess) five times while it archives 20,000 sealed events.

Afterwards: every sealed event a checkpoint covers is archived exactly once (each partition's
archived log is the signed log, leaf for leaf), no object was rewritten with other bytes (the
store refuses that, and the archiver would have exited), and every archived checkpoint is
signed and consistent with the next one.
"""

from __future__ import annotations

import itertools
import random
import signal
import subprocess
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from tests.services.archiver.helpers import SealedLog, archived_size, start_archiver, wait_for
from tests.services.archiver.sealed_factory import sealed_values
from tracevault.archive import ObjectStore, open_store
from tracevault.archive.layout import run_prefix
from tracevault.archive.tlog import (
    RunIndex,
    checkpoint_prefix,
    data_key,
    decode_values,
    log_prefix,
    parse_run_index_key,
    tile_key,
)
from tracevault.config import Settings
from tracevault.replayer.load.archive import load_from_archive
from tracevault.replayer.load.verify import verify
from tracevault.schemas import decode_sealed
from tracevault.transparency import (
    Checkpoint,
    consistency_proof,
    open_note,
    tile_node_source,
    tile_width,
    tree_root,
    verify_consistency,
)

RUNS = 40
EVENTS_PER_RUN = 500  # 40 x 500 = 20,000 sealed events, the number
KILLS = 5


def _start(settings: Settings, vkey: str, log: Path) -> subprocess.Popen[bytes]:
    return start_archiver(settings, vkey, log, "crash", 200)


def _archived_size(store: ObjectStore, settings: Settings, p: int) -> int:
    return archived_size(store, settings, p)


def test_sigkill_five_times_during_20000_events_leaves_a_complete_log(
    settings_factory: Callable[..., Settings], tmp_path: Path
) -> None:
    settings = settings_factory(partitions=3)
    sl = SealedLog(settings)
    run_ids = [f"crash-{i:02d}" for i in range(RUNS)]
    runs = {r: sealed_values(r, EVENTS_PER_RUN) for r in run_ids}
    assert sl.produce(runs, batch=500) == RUNS * EVENTS_PER_RUN
    sizes = {p: t.size for p, t in sl.trees.items()}
    store = open_store(settings.archive_url, settings)
    log = tmp_path / "archiver.log"

    def done() -> bool:
        return all(_archived_size(store, settings, p) == n for p, n in sizes.items())

    def archived() -> int:
        return sum(_archived_size(store, settings, p) for p in sizes)

    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    # kill when the archive first holds a random number of leaves, at random points of the
    # work; the last 30% stay out of range so that a kill always leaves work to do
    targets = sorted(rng.sample(range(500, 14_000), KILLS))
    for target in targets:
        proc = _start(settings, sl.vkey, log)
        try:
            wait_for(
                lambda: proc.poll() is not None or archived() >= target,  # noqa: B023
                120,
                f"{target} leaves (seed {seed})",
            )
            assert proc.poll() is None, f"archiver exited early: {log.read_text()[-2000:]}"
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(30)
        assert proc.returncode == -signal.SIGKILL
        assert not done(), "killed after the work was done"

    proc = _start(settings, sl.vkey, log)
    try:
        wait_for(done, 180, f"the whole log archived (seed {seed})")
    finally:
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(60)
    assert rc == 0, log.read_text()[-2000:]
    assert "ALERT" not in log.read_text(), "nothing was quarantined"

    seen: Counter[tuple[str, int]] = Counter()
    for p, size in sizes.items():
        lp = log_prefix(settings.topic_prefix, p)
        for n in range((size + 255) // 256):
            dk = data_key(lp, n, tile_width(0, n, size))
            seen.update(
                (e.run_id, e.seq) for e in map(decode_sealed, decode_values(store.get(dk), dk))
            )

        def read(level: int, index: int, width: int, lp: str = lp) -> bytes:
            return store.get(tile_key(lp, level, index, width))

        node = tile_node_source(size, read)
        assert tree_root(size, node) == sl.trees[p].root()  # the archived log is the signed one
        cps = []
        for info in store.list(checkpoint_prefix(lp)):
            text, _ = open_note(store.get(info.key).decode(), [sl.signer.verifier])
            cps.append(Checkpoint.parse(text))
        assert cps[-1].size == size
        for old, new in itertools.pairwise(cps):  # each consistent with the next
            proof = consistency_proof(old.size, new.size, node)
            verify_consistency(old.size, new.size, proof, old.root, new.root)
    assert len(seen) == RUNS * EVENTS_PER_RUN
    assert set(seen.values()) == {1}, "an event was archived twice"
    for run_id in run_ids[:: RUNS // 4]:
        keys = [i.key for i in store.list(run_prefix(run_id)) if parse_run_index_key(i.key)]
        assert RunIndex.from_json(store.get(keys[-1]), keys[-1]).finished
        report = verify(load_from_archive(store, run_id), keys=[sl.signer.verifier])
        assert report.count == EVENTS_PER_RUN and report.finished
