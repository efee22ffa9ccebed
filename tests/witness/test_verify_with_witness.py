"""``replay verify/export --witness-store``: the witness's cosignatures reach the verifier.

Real parts end to end: runs recorded by the Recorder and sealed by the real Sequencer on the
shared broker, two real witnesses (``WitnessFollower`` on the sealed topic, each with its own
file store), the real archiver (``tracevault archiver --until-idle``), and the CLI.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tests.replayer import agents
from tests.replayer.pipeline import fresh_settings, record_live, sequencer_running, wait_sealed
from tests.transparency.signed_sealed import cli_env
from tracevault.archive import ObjectStore, open_store
from tracevault.cli import tracevault as main
from tracevault.config import Settings
from tracevault.errors import LogError
from tracevault.kafka import sealed_generation
from tracevault.replayer import LoadedRun
from tracevault.replayer._records import SealedRows
from tracevault.replayer.load.log_policy import LogPolicy
from tracevault.replayer.load.witnessed import pick_witnessed_size, witnessed
from tracevault.services.witness import WitnessFollower
from tracevault.transparency import (
    Checkpoint,
    CosignatureSigner,
    Ed25519Signer,
    LeafProof,
    RunLogEvidence,
    add_cosignature,
    log_origin,
    open_note,
    sign_note,
)
from tracevault.witness import checkpoint_key, cosigned_sizes
from tracevault.witness._core import Witness


def _cli(settings: Settings, *args: str, env: dict[str, str] | None = None) -> Any:
    return CliRunner().invoke(main, list(args), env={**cli_env(settings), **(env or {})})


def _log_size(settings: Settings, log_vkey: str, run_id: str) -> int:
    """The size of the checkpoint the topic proves ``run_id`` against."""
    res = _cli(settings, "replay", "verify", run_id, "--from", "topic", "--json",
               "--trusted-key", log_vkey)  # fmt: skip
    assert res.exit_code == 0, res.output
    return int(json.loads(res.output)["checkpoint"].rsplit("@", 1)[1])


class _Witnesses:
    """Two witnesses following the sealed topic, each in its own thread and file store."""

    def __init__(self, settings: Settings, base: Path, log_signer: Ed25519Signer) -> None:
        self.followers: list[WitnessFollower] = []
        self.signers = [CosignatureSigner.generate(f"w{i}.test") for i in (1, 2)]
        self.urls = [f"file://{base / f'witness{i}'}" for i in (1, 2)]
        self.stores: list[ObjectStore] = [open_store(u, settings) for u in self.urls]
        self.threads: list[threading.Thread] = []
        for i, (signer, store) in enumerate(zip(self.signers, self.stores, strict=True)):
            w = Witness(store, signer, [log_signer.verifier], retention=timedelta(days=1))
            follower = WitnessFollower(settings, w, group_id=f"wit{i}-{settings.topic_prefix}")
            self.followers.append(follower)
            t = threading.Thread(target=follower.run, daemon=True)
            t.start()
            self.threads.append(t)

    def wait_cosigned(self, origin: str, size: int, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        tick = threading.Event()
        while not all(max(cosigned_sizes(s, origin), default=0) >= size for s in self.stores):
            assert time.monotonic() < deadline, f"the witnesses did not reach {origin}@{size}"
            tick.wait(0.2)

    def close(self) -> None:
        for follower in self.followers:
            follower.stop()
        for t in self.threads:
            t.join(30)
            assert not t.is_alive(), "a witness did not stop"


@pytest.fixture(scope="module")
def sealed(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory, log_signer: Ed25519Signer
) -> Iterator[tuple[Settings, _Witnesses, str, Path]]:
    """Two runs sealed before the witnesses start (so they cosign past run a's checkpoint),
    and a third sealed after they stopped, so the archive is ahead of what they cosigned."""
    base = tmp_path_factory.mktemp("witverify")
    settings = fresh_settings(kafka_bootstrap, base, "witv", partitions=1)
    gen = sealed_generation(settings)
    origin = log_origin(settings.log_origin, settings.topic_prefix, 0, gen)
    vkey = log_signer.verifier.vkey
    with sequencer_running(settings):
        for run_id in ("wv-a", "wv-b"):
            record_live(settings, agents.research_agent, agents.INPUT, run_id)
            wait_sealed(settings, run_id)
        witnesses = _Witnesses(settings, base, log_signer)
        try:
            witnesses.wait_cosigned(origin, _log_size(settings, vkey, "wv-b"))
        finally:
            witnesses.close()
        record_live(settings, agents.research_agent, agents.INPUT, "wv-c")
        wait_sealed(settings, "wv-c")
    res = _cli(settings, "--bootstrap-servers", settings.bootstrap_servers, "--prefix",
               settings.topic_prefix, "archiver", "--archive", settings.archive_url,
               "--until-idle", "2", "--trusted-key", vkey)  # fmt: skip
    assert res.exit_code == 0, res.output
    yield settings, witnesses, origin, base


def _verify(
    settings: Settings, vkey: str, run_id: str, *extra: str, env: dict[str, str] | None = None
) -> Any:
    return _cli(settings, "replay", "--archive-url", settings.archive_url, "verify", run_id,
                "--json", "--trusted-key", vkey, *extra, env=env)  # fmt: skip


@pytest.mark.parametrize("source", ["topic", "archive"])
def test_verify_counts_the_witness_from_its_store(sealed, log_vkey: str, source: str) -> None:
    settings, wit, origin, _ = sealed
    w1, w2 = (s.verifier.vkey for s in wit.signers)
    # the witness cosigned only sizes past run a's own checkpoint: verify re-anchors to one
    own = _log_size(settings, log_vkey, "wv-a")
    witnessed = cosigned_sizes(wit.stores[0], origin)
    assert witnessed and own not in witnessed and min(witnessed) > own

    res = _verify(settings, log_vkey, "wv-a", "--from", source, "--witness-key", w1,
                  "--witness-store", wit.urls[0], "--min-witnesses", "1")  # fmt: skip
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["log_checked"] is True
    assert out["checkpoint"].endswith(f"@{min(witnessed)}")

    # without the store the cosignature never reaches verify: 0 of 1, named in L1
    res = _verify(settings, log_vkey, "wv-a", "--from", source, "--witness-key", w1,
                  "--min-witnesses", "1")  # fmt: skip
    assert res.exit_code == 1
    assert "L1 signature" in res.output
    assert "0 trusted witness cosignature(s), 1 required (of w1.test)" in " ".join(
        res.output.split()
    )

    # another witness's store: its cosignature is not by the trusted witness key
    res = _verify(settings, log_vkey, "wv-a", "--from", source, "--witness-key", w1,
                  "--witness-store", wit.urls[1], "--min-witnesses", "1")  # fmt: skip
    assert res.exit_code == 1
    assert "0 trusted witness cosignature(s), 1 required" in " ".join(res.output.split())

    # both stores (from the environment) and both keys: two witnesses on one checkpoint
    res = _verify(settings, log_vkey, "wv-a", "--from", source, "--witness-key", w1,
                  "--witness-key", w2, "--min-witnesses", "2",
                  env={"TRACEVAULT_WITNESS_STORES": ",".join(wit.urls)})  # fmt: skip
    assert res.exit_code == 0, res.output


def test_a_run_past_what_the_witness_cosigned_fails_naming_the_store(sealed, log_vkey: str) -> None:
    settings, wit, origin, _ = sealed
    w1 = wit.signers[0].verifier.vkey
    for source in ("topic", "archive"):
        res = _verify(settings, log_vkey, "wv-c", "--from", source, "--witness-key", w1,
                      "--witness-store", wit.urls[0])  # fmt: skip
        assert res.exit_code == 1, res.output
        text = " ".join(res.output.split())
        assert "no witness store" in text and wit.urls[0] in text and origin in text
    # no witness required (the stores set for every verify): not cosigned yet is no failure
    res = _verify(settings, log_vkey, "wv-c", "--from", "topic",
                  env={"TRACEVAULT_WITNESS_STORES": wit.urls[0]})  # fmt: skip
    assert res.exit_code == 0, res.output


def test_export_with_the_witness_store_verifies_offline(
    sealed, log_vkey: str, tmp_path: Path
) -> None:
    settings, wit, _, _ = sealed
    w1 = wit.signers[0].verifier.vkey
    for source in ("topic", "archive"):
        out = tmp_path / source
        res = _cli(settings, "replay", "--archive-url", settings.archive_url, "export", "wv-a",
                   "--from", source, "-o", str(out), "--trusted-key", log_vkey,
                   "--witness-key", w1, "--witness-store", wit.urls[0])  # fmt: skip
        assert res.exit_code == 0, res.output
        # offline: no broker, no store settings, only the deployment's prefix (its origin)
        res = CliRunner().invoke(main, ["--prefix", settings.topic_prefix,
                                        "replay", "verify", "--bundle", str(out), "--json",
                                        "--trusted-key", log_vkey, "--witness-key", w1,
                                        "--min-witnesses", "1"])  # fmt: skip
        assert res.exit_code == 0, res.output
        assert json.loads(res.output)["log_checked"] is True


def test_the_smallest_size_enough_stores_cosigned_is_picked() -> None:
    assert pick_witnessed_size([[3, 8, 12], [8, 20]], 5, 2) == 8
    assert pick_witnessed_size([[3, 9, 12], [8, 20]], 5, 2) == 8  # none shared: the smallest
    assert pick_witnessed_size([[3, 9, 12], [8, 20]], 5, 1) == 8
    assert pick_witnessed_size([[3, 4]], 5, 1) is None


def _stored(store: ObjectStore, origin: str, note: str) -> None:
    size = int(note.split("\n")[1])
    store.put(checkpoint_key(origin, size), note.encode(), retain_until=datetime.now(UTC))


def test_a_store_with_another_root_at_the_size_is_named_not_merged(tmp_path: Path) -> None:
    """A witness copy of the run's own size merges in place (no re-read); one of another
    root at that size (a split view) is an error naming the store, never merged."""
    origin = "tv.test/wv/0"
    log_key = Ed25519Signer.generate("tv.test/log")
    w1 = CosignatureSigner.generate("w1.test")
    note = sign_note(Checkpoint(origin, 5, b"\x01" * 32).body(), [log_key])
    forked = sign_note(Checkpoint(origin, 5, b"\x02" * 32).body(), [log_key])
    evidence = RunLogEvidence(origin, note, (LeafProof(0, 4, ()),), checkpoint_obj="t[0]@9")
    run = LoadedRun("r", "topic", SealedRows([]), [], log_evidence=evidence)
    policy = LogPolicy((log_key.verifier,), (w1.verifier,), 1)

    def never(size: int, note: str) -> LoadedRun:
        raise AssertionError("the run's own size needs no re-read")

    good = open_store(f"file://{tmp_path / 'good'}", Settings())
    _stored(good, origin, add_cosignature(note, w1))
    got = witnessed(run, policy, [good], never).log_evidence
    assert got is not None and got.checkpoint_obj == "t[0]@9"
    _, sigs = open_note(got.checkpoint, [log_key.verifier, w1.verifier])
    assert len(sigs) == 2  # the log's signature still holds on the same body, plus w1's

    bad = open_store(f"file://{tmp_path / 'bad'}", Settings())
    _stored(bad, origin, add_cosignature(forked, w1))
    with pytest.raises(LogError, match=f"witness store {bad.url}"):
        witnessed(run, policy, [bad], never)
