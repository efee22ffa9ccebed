"""No record stops a partition's log: a sealed leaf the archive cannot hold as run history
still enters the archived tree, and every later checkpoint and run archives.

The records are in a real sealed topic on the shared broker, written under the signed-log
contract (``SignedSealedWriter``: records, checkpoint and head in one transaction, as the
sequencer commits them), as a sealed topic written before run ids were checked holds them:
run ``.`` (no archive path), a run of 85 CJK characters, and one record of a valid run whose
``sealed_at`` is no date. The real archiver reads them; ``replay verify`` names the
quarantined leaf of the run it touches.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from tests.services.archiver.sealed_factory import sealed_run
from tests.transparency.signed_sealed import SignedSealedWriter, cli_env, fresh_settings
from tracevault.archive import open_store
from tracevault.archive._holes import Hole
from tracevault.cli import tracevault as main
from tracevault.config import Settings
from tracevault.services.archiver import Archiver
from tracevault.services.archiver._quarantine import MAX_SEALED_AT


def _verify(settings: Settings, run_id: str, vkey: str) -> Any:
    return CliRunner().invoke(
        main,
        ["replay", "--archive-url", settings.archive_url, "verify", run_id, "--json",
         "--trusted-key", vkey, "--no-agent-check"],  # hand-made runs, unsigned
        env=cli_env(settings),
    )  # fmt: skip


def test_unarchivable_leaves_enter_the_tree_and_later_runs_archive(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    settings = fresh_settings(kafka_bootstrap, tmp_path, partitions=1)
    writer = SignedSealedWriter(settings)
    mixed = sealed_run("q-mixed", 4)
    mixed[1] = dataclasses.replace(mixed[1], sealed_at=MAX_SEALED_AT + 1)  # no date
    writer.publish(sealed_run("q-first", 3))
    writer.publish(sealed_run(".", 3))
    writer.publish(sealed_run("漢" * 85, 2))
    writer.publish(mixed)
    writer.publish(sealed_run("q-last", 3))

    archiver = Archiver(settings, verifiers=[writer.signer.verifier])
    archiver.run(until_idle=2)
    st = archiver.stats
    assert st.leaves_quarantined == 3 + 2 + 1, st
    assert st.quarantined.get("bad-checkpoint", 0) == 0, st
    assert st.holes == 0, "nothing was lost: quarantined leaves are no hole of lost records"

    store = open_store(settings.archive_url, settings)
    holes = [Hole.from_json(store.get(i.key), i.key) for i in store.list("holes/")]
    # leaves: q-first 0..2, "." 3..5, the CJK run 6..7, q-mixed 8..11 (seq 1 at 9), q-last
    assert [(h.kind, h.first) for h in holes] == [("quarantined", i) for i in (3, 4, 5, 6, 7, 9)]
    assert holes[-1].runs == {"q-mixed": 1} and holes[-1].quarantine_key.startswith("quarant")
    # the tree holds every leaf: the newest checkpoint is at the size the writer signed
    cp = store.list(f"log/{settings.topic_prefix}/0/checkpoint/")[-1]
    assert cp.key.endswith(f"checkpoint/{3 + 3 + 2 + 4 + 3:020d}"), cp.key

    for run_id in ("q-first", "q-last"):
        res = _verify(settings, run_id, writer.vkey)
        assert res.exit_code == 0, res.output
        assert json.loads(res.stdout)["log_checked"] is True
    res = _verify(settings, "q-mixed", writer.vkey)
    assert res.exit_code == 1, res.output
    out = json.loads(res.stdout)
    assert out["seq"] == 1 and "leaf 9" in out["error"] and "quarantined" in out["error"], out
    assert holes[-1].quarantine_key in out["error"], out

    # a restarted archiver resumes across the quarantined leaves and goes on
    writer.publish(sealed_run("q-later", 2))
    again = Archiver(settings, verifiers=[writer.signer.verifier])
    again.run(until_idle=2)
    assert again.stats.events_archived == 2 and not again.stats.quarantined, again.stats
    assert _verify(settings, "q-later", writer.vkey).exit_code == 0
