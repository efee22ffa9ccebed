"""A genuine sequencer's heads always prove themselves at restore (no false ALERT).

The attacks are in tests/attacks/test_heads_attacks.py; here the other side: every shape of
head a real sequencer commits (open, behind a gap with held events, just started, finished
runs in chunks, the log's trees) is proven against ``sealed`` and ``raw`` with nothing
rejected and nothing rebuilt, or a rebuild would hide behind every restart.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from tests.services.sequencer.support import produce_raw, raw_event, running, wait_until
from tracevault.config import Settings
from tracevault.heads import prove_state, read_state
from tracevault.transparency import Ed25519Signer


def test_every_head_a_sequencer_commits_proves_itself(
    seq_settings: Callable[..., Settings], log_signer: Ed25519Signer
) -> None:
    settings = seq_settings(partitions=3)
    items: list[tuple[str | bytes | None, bytes | None]] = []
    for i in range(40):
        run = f"open-{i}"
        items += [(run, raw_event(run, s)) for s in range(3)]
    for i in range(10):
        run = f"done-{i}"
        items += [(run, raw_event(run, s, last=2)) for s in range(3)]
    items += [("held", raw_event("held", s)) for s in (0, 1, 3, 4)]  # seq 2 missing: held
    with running(settings) as (seq, errors):
        produce_raw(settings, items)
        wait_until(
            lambda: (
                seq.metrics.snapshot()["tracevault_sequencer_sealed_total"] == 40 * 3 + 30 + 2
                and seq.metrics.snapshot()["tracevault_sequencer_held_events"] == 2
            ),
            timeout=60,
            what="everything sealed or held",
        )
    assert not errors, errors
    parts = list(range(settings.partitions))
    state = read_state(settings, parts, stable=True, keep_heads=False)
    assert len(state.heads) == 41 and not state.bad
    assert [e.seq for e in state.heads["held"].held] == [3, 4]
    proven = prove_state(
        settings,
        state,
        parts,
        partition_count=settings.partitions,
        verifiers=[log_signer.verifier],
        horizon_us=3_600_000_000,
        now_us=time.time_ns() // 1000,
    )
    assert proven.rejected == []
    assert not proven.rebuilt and not proven.forget
    assert sorted(h.run_id for h in proven.heads) == sorted(state.heads)
    assert {p: t.size for p, t in proven.trees.items()} == {
        p: t.size for p, t in state.trees.items()
    }
    assert sum(t.size for t in proven.trees.values()) == 40 * 3 + 30 + 2
