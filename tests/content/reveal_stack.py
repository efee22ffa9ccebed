"""Encrypted runs through the real pipeline for the ``--reveal-to`` tests: a real broker,
sequencer and archiver, data keys from moto's KMS server, and the CLI driven as a user would."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tests.conftest import unique_name
from tests.content.stack import kms_s3_settings, record_secret_run
from tests.replayer.pipeline import sequencer_running, wait_sealed
from tracevault.cli import tracevault
from tracevault.config import Settings
from tracevault.services.archiver import Archiver

TENANT = "tenant-a"


@dataclass(frozen=True)
class Pipeline:
    settings: Settings
    endpoint: str
    runs: tuple[str, ...]


def pipeline_of(bootstrap: str, endpoint: str, tmp: pytest.TempPathFactory) -> Iterator[Pipeline]:
    settings = kms_s3_settings(bootstrap, endpoint, tmp.mktemp("reveal"), "tv-reveal", TENANT)
    tag = unique_name("rev")
    runs = (f"{tag}-1", f"{tag}-2")
    with sequencer_running(settings):
        for rid in runs:
            record_secret_run(settings, rid)
        for rid in runs:
            wait_sealed(settings, rid)
    Archiver(settings).run(until_idle=1.0)
    yield Pipeline(settings, endpoint, runs)


def env(p: Pipeline, *, key: bool) -> dict[str, str | None]:
    """The CLI's settings: with the tenant's KMS grant, or with no key provider at all."""
    return {
        "TRACEVAULT_BOOTSTRAP_SERVERS": p.settings.bootstrap_servers,
        "TRACEVAULT_TOPIC_PREFIX": p.settings.topic_prefix,
        "TRACEVAULT_ARCHIVE_URL": p.settings.archive_url,
        "TRACEVAULT_S3_ENDPOINT_URL": p.endpoint,
        "TRACEVAULT_KEY_PROVIDER": "kms" if key else "none",
        "TRACEVAULT_KMS_ENDPOINT_URL": p.endpoint if key else None,
        "TRACEVAULT_TENANT": TENANT if key else None,
        "TRACEVAULT_RUN_KEY_STORE": p.settings.run_key_store if key else None,
    }


def cli(environ: dict[str, str | None], *args: str) -> Any:
    res = CliRunner().invoke(tracevault, list(args), env=environ, terminal_width=200)
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise res.exception
    return res


def recipient(tmp: Path, name: str) -> tuple[Path, str]:
    """A recipient key pair made with ``keys generate --type recipient``: file, public key."""
    path = tmp / f"{name}.key"
    res = cli({}, "keys", "generate", "--type", "recipient", "--name", name, "--out", str(path))
    assert res.exit_code == 0, res.output
    return path, res.stdout.strip()


def export(p: Pipeline, run_id: str, out: Path, *extra: str) -> None:
    res = cli(env(p, key=True), "replay", "export", run_id, "--from", "archive", "-o", str(out),
              *extra)  # fmt: skip
    assert res.exit_code == 0, res.output


def rehash(bundle: Path, rel: str) -> None:
    """Make manifest.json list ``rel`` with its current SHA-256, as a tamperer would."""
    path = bundle / "manifest.json"
    manifest = json.loads(path.read_bytes())
    manifest["files"][rel] = hashlib.sha256((bundle / rel).read_bytes()).hexdigest()
    path.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
