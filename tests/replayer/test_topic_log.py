"""``verify`` from the sealed topic with trusted keys (a real broker): L1-L4 before the chain,
and bundles carrying C2SP tlog-proofs checked offline."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from tests.replayer.conftest import recorded
from tests.replayer.recording import seal
from tests.replayer.topic_writer import publish
from tests.transparency.signed_sealed import SignedSealedWriter, cli_env, fresh_settings
from tracevault.cli import tracevault as main
from tracevault.errors import LogError
from tracevault.replayer import export_bundle, load_run, verify, verify_bundle
from tracevault.replayer.load.log_policy import LogPolicy
from tracevault.transparency import (
    LOG_CHECKS,
    CosignatureSigner,
    Ed25519Signer,
    add_cosignature,
    sign_note,
    split_note,
)

# These tests name their trusted keys themselves (the session's vkey is not one).
pytestmark = pytest.mark.usefixtures("only_keys_given_here")


@pytest.fixture(scope="module")
def settings(kafka_bootstrap, tmp_path_factory):
    return fresh_settings(kafka_bootstrap, tmp_path_factory.mktemp("tv"))


@pytest.fixture(scope="module")
def writer(settings):
    return SignedSealedWriter(settings)


def _policy(settings, *vkeys: str) -> LogPolicy:
    policy = LogPolicy.of(settings, vkeys)
    assert policy is not None
    return policy


def _cli(settings, *args: str):
    return CliRunner().invoke(main, ["replay", *args], env=cli_env(settings))


def test_a_run_over_three_transactions_verifies_against_the_signed_log(settings, writer) -> None:
    sealed = seal(recorded("run-log-1"))
    other = seal(recorded("run-log-other"))
    writer.publish(other[:4])
    writer.publish(sealed[:4])
    writer.publish(other[4:])
    writer.publish(sealed[4:], batches=2)
    run = load_run(settings, "run-log-1", source="topic", with_log=True)
    assert len(run.log_checkpoints) >= 3
    report = verify(run, log=_policy(settings, writer.vkey))
    assert report.log_checked and report.finished
    assert report.checks[:4] == LOG_CHECKS
    assert report.checks[4].startswith("1 run") and report.checks[-1].startswith("T1")
    part = writer.partition("run-log-1")
    assert report.checkpoint.startswith(f"{settings.log_origin}/{settings.topic_prefix}/{part}@")
    assert len(report.log_evidence.others) == 1  # the oldest checkpoint, consistent

    stranger = Ed25519Signer.generate("tv.test-log")
    with pytest.raises(LogError, match="L1 signature: checkpoint record"):
        verify(load_run(settings, "run-log-1", source="topic", with_log=True),
               log=_policy(settings, stranger.verifier.vkey))  # fmt: skip


def test_cli_verify_from_topic_lists_l1_to_l4_and_is_unverified_without_a_key(
    settings, writer
) -> None:
    writer.publish(seal(recorded("run-log-cli")), batches=2)
    res = _cli(settings, "verify", "run-log-cli", "--from", "topic", "--json",
               "--trusted-key", writer.vkey)  # fmt: skip
    out = json.loads(res.output)
    assert res.exit_code == 0, res.output
    assert out["log_checked"] is True and out["checks"][0].startswith("L1 signature")
    assert [c[:2] for c in out["checks"][:4]] == ["L1", "L2", "L3", "L4"]
    res = _cli(settings, "verify", "run-log-cli", "--from", "topic", "--json")
    out = json.loads(res.output)
    assert res.exit_code == 1 and out["log_checked"] is False and out["checks"][0][:2] == "1 "
    assert (out["ok"], out["status"]) == (False, "unverified")
    res = _cli(settings, "verify", "run-log-cli", "--from", "topic")
    assert res.exit_code == 1 and "unverified: no trusted log key" in " ".join(res.output.split())
    res = _cli(settings, "verify", "run-log-cli", "--from", "topic", "--no-log-check")
    assert res.exit_code == 0 and "signed log was NOT checked" in " ".join(res.output.split())


def test_a_legacy_run_verifies_without_keys_and_fails_l1_with_them(settings, tmp_path) -> None:
    publish(settings, seal(recorded("run-log-legacy")))  # no checkpoint records
    run = load_run(settings, "run-log-legacy", source="topic", with_log=True)
    assert verify(run).log_checked is False
    key = Ed25519Signer.generate("tv.test-log")
    with pytest.raises(LogError, match=r"L1 signature: .* carries no signed-log evidence"):
        verify(run, log=_policy(settings, key.verifier.vkey))
    export_bundle(run, tmp_path / "b")  # a bundle without log/ (as before the signed log)
    assert not (tmp_path / "b" / "log").exists()
    assert verify_bundle(tmp_path / "b").log_checked is False
    with pytest.raises(LogError, match="carries no signed-log evidence"):
        verify_bundle(tmp_path / "b", log=_policy(settings, key.verifier.vkey))


def test_a_topic_run_loaded_without_its_log_says_to_load_it_with_log(settings, writer) -> None:
    writer.publish(seal(recorded("run-log-nolog")), batches=2)
    run = load_run(settings, "run-log-nolog", source="topic")  # with_log forgotten
    with pytest.raises(LogError, match=r"without its signed-log checkpoints.*with_log=True"):
        verify(run, log=_policy(settings, writer.vkey))
    report = verify(load_run(settings, "run-log-nolog", source="topic", with_log=True),
                    log=_policy(settings, writer.vkey))  # fmt: skip
    assert report.log_checked


def test_a_bundle_from_the_topic_carries_tlog_proofs_checked_offline(
    settings, writer, tmp_path
) -> None:
    writer.publish(seal(recorded("run-log-bundle")), batches=3)
    out = tmp_path / "bundle"
    res = _cli(settings, "export", "run-log-bundle", "--from", "topic", "-o", str(out),
               "--trusted-key", writer.vkey)  # fmt: skip
    assert res.exit_code == 0, res.output
    proof = (out / "log" / "000000000003.tlog-proof").read_text()
    assert proof.startswith("c2sp.org/tlog-proof@v1\nindex ")
    assert proof.endswith((out / "log" / "checkpoint").read_text())
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["log"]["origin"].startswith(settings.log_origin)
    # offline: a fresh CLI with no broker settings, only the deployment's prefix (which
    # fixes the origin its checkpoint must name)
    prefix = ["--prefix", settings.topic_prefix]
    res = CliRunner().invoke(main, [*prefix, "replay", "verify", "--bundle", str(out), "--json",
                                    "--trusted-key", writer.vkey])  # fmt: skip
    got = json.loads(res.output)
    assert res.exit_code == 0, res.output
    assert got["log_checked"] is True and got["checks"][1].startswith("L1 signature")
    # a witness: the checkpoint must carry its cosignature
    wit = CosignatureSigner.generate("witness.example")
    res = CliRunner().invoke(main, [*prefix, "replay", "verify", "--bundle", str(out), "--json",
                                    "--trusted-key", writer.vkey,
                                    "--witness-key", wit.verifier.vkey])  # fmt: skip
    assert res.exit_code == 1 and "0 trusted witness cosignature(s), 1 required" in res.output
    # its cosignature, added at export, satisfies --min-witnesses offline
    text, _ = split_note((out / "log" / "checkpoint").read_text())
    cos = tmp_path / "cosigned.note"
    cos.write_text(add_cosignature((out / "log" / "checkpoint").read_text(), wit))
    res = _cli(settings, "export", "run-log-bundle", "--from", "topic", "-o",
               str(tmp_path / "b2"), "--cosigned", str(cos))  # fmt: skip
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(main, [*prefix, "replay", "verify", "--bundle", str(tmp_path / "b2"),
                                    "--json", "--trusted-key", writer.vkey,
                                    "--witness-key", wit.verifier.vkey])  # fmt: skip
    assert res.exit_code == 0, res.output
    other = Ed25519Signer.generate("tv.test-log")
    cos.write_text(sign_note(text.replace("\n", "x\n", 1), [other]))
    res = _cli(settings, "export", "run-log-bundle", "--from", "topic", "-o",
               str(tmp_path / "b3"), "--cosigned", str(cos))  # fmt: skip
    assert res.exit_code == 1 and "not the run's" in res.output


def test_a_run_in_progress_verifies_without_l3_unless_required(settings, writer) -> None:
    writer.publish(seal(recorded("run-log-live"))[:5])  # no RUN_FINISHED yet
    run = load_run(settings, "run-log-live", source="topic", with_log=True)
    report = verify(run, log=_policy(settings, writer.vkey))
    assert report.log_checked and not report.finished
    assert report.checks[2].startswith("L3 end: not required")
    assert any("no RUN_FINISHED in the signed log yet" in w for w in report.warnings)
    with pytest.raises(LogError, match="L3 end: run run-log-live has no RUN_FINISHED"):
        verify(run, log=_policy(settings, writer.vkey), require_finished=True)
