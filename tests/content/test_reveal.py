"""``export --reveal-to``: a bundle an auditor reads with nothing but its own private key.

Through the real pipeline (broker, sequencer, archiver on moto's S3, data keys from moto's
KMS): the default bundle is ciphertext only, verifies without a key and cannot be read; a
bundle revealed to a recipient is read by that recipient alone, with no provider at all; any
other key is refused with exit 7 (docs/confidentiality.md, "Bundles for one reader").
"""

from __future__ import annotations

import json
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.content import agents
from tests.content.reveal_stack import Pipeline, cli, env, export, pipeline_of, recipient
from tracevault.errors import ContentKeyError


@pytest.fixture(scope="module")
def pipeline(
    kafka_bootstrap: str, s3_endpoint: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Pipeline]:
    yield from pipeline_of(kafka_bootstrap, s3_endpoint, tmp_path_factory)


def _bytes(bundle: Path) -> bytes:
    return b"".join(p.read_bytes() for p in bundle.rglob("*") if p.is_file())


def test_recipient_keys_are_made_0600_with_a_printable_public_key(tmp_path: Path) -> None:
    path, public = recipient(tmp_path, "auditor.example")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert public.startswith("RECIPIENT+auditor.example+") and public.isprintable()
    res = cli({}, "keys", "show", str(path), "--json")
    assert res.exit_code == 0, res.output
    shown = json.loads(res.stdout)
    assert shown["key"] == public and shown["type"] == "recipient"
    assert public.split("+")[-1] not in path.read_text()  # the file holds the private key


def test_the_recipient_reads_a_revealed_bundle_with_only_its_private_key(
    pipeline: Pipeline, tmp_path: Path
) -> None:
    key, public = recipient(tmp_path, "auditor.example")
    bundle = tmp_path / "revealed"
    export(pipeline, pipeline.runs[0], bundle, "--reveal-to", public)
    for secret in agents.SECRETS:  # still ciphertext: only a sealed key was added
        assert secret.encode() not in _bytes(bundle), secret
    no_key = env(pipeline, key=False)  # no provider, no KMS: the recipient's file only
    res = cli(no_key, "replay", "verify", "--bundle", str(bundle))
    assert res.exit_code == 0, res.output
    res = cli(no_key, "replay", "show", "--bundle", str(bundle), "--recipient-key", str(key))
    assert res.exit_code == 0, res.output
    assert pipeline.runs[0] in res.output and agents.SECRETS[2][:6] in res.output
    res = cli(no_key, "replay", "show", "--bundle", str(bundle), "--recipient-key", str(key),
              "--json")  # fmt: skip
    assert res.exit_code == 0, res.output
    for secret in agents.SECRETS:
        assert secret in res.stdout, secret
    assert len(res.stdout.splitlines()) == 7
    # @FILE works as well as the string
    pub = tmp_path / "auditor.pub"
    pub.write_text(public + "\n")
    export(pipeline, pipeline.runs[1], tmp_path / "second", "--reveal-to", f"@{pub}")


def test_a_ciphertext_only_bundle_verifies_and_cannot_be_read(
    pipeline: Pipeline, tmp_path: Path
) -> None:
    key, _ = recipient(tmp_path, "auditor.example")
    bundle = tmp_path / "plain-export"
    export(pipeline, pipeline.runs[0], bundle)
    assert not (bundle / "reveal.json").exists()
    assert "reveal" not in json.loads((bundle / "manifest.json").read_bytes())
    no_key = env(pipeline, key=False)
    res = cli(no_key, "replay", "verify", "--bundle", str(bundle))
    assert res.exit_code == 0, res.output
    for args in ((), ("--recipient-key", str(key))):
        res = cli(no_key, "replay", "show", "--bundle", str(bundle), *args)
        assert res.exit_code == ContentKeyError.exit_code == 7, res.output
        assert not any(s in res.output for s in agents.SECRETS)
    assert "ciphertext only" in res.output
    res = cli(no_key, "replay", "show", "--bundle", str(bundle), "--metadata", "--json")
    assert res.exit_code == 0, res.output
    assert "lookup" in res.stdout and not any(s in res.stdout for s in agents.SECRETS)


def test_another_recipients_key_is_refused(pipeline: Pipeline, tmp_path: Path) -> None:
    _, public = recipient(tmp_path, "auditor.example")
    other, _ = recipient(tmp_path, "someone.else")
    bundle = tmp_path / "for-auditor"
    export(pipeline, pipeline.runs[0], bundle, "--reveal-to", public)
    res = cli(env(pipeline, key=False), "replay", "show", "--bundle", str(bundle),
              "--recipient-key", str(other))  # fmt: skip
    assert res.exit_code == 7, res.output
    assert "auditor.example" in res.output and "someone.else" in res.output
    assert not any(s in res.output for s in agents.SECRETS)


def test_reveal_to_needs_the_exporters_key(pipeline: Pipeline, tmp_path: Path) -> None:
    _, public = recipient(tmp_path, "auditor.example")
    out = tmp_path / "never"
    res = cli(env(pipeline, key=False), "replay", "export", pipeline.runs[0], "--from",
              "archive", "-o", str(out), "--reveal-to", public)  # fmt: skip
    assert res.exit_code == 7, res.output
    assert not out.exists()
    res = cli(env(pipeline, key=True), "replay", "export", pipeline.runs[0], "-o", str(out),
              "--reveal-to", "RECIPIENT+x+00000000+AAAA")  # fmt: skip
    assert res.exit_code == 2, res.output
