"""Encrypted content through the real pipeline: Recorder -> broker -> Sequencer -> Archiver on
S3, the data keys from moto's KMS server over HTTP (the same moto server as the S3 archive).

What must hold (docs/confidentiality.md): no plaintext in raw, sealed or the archive; verify
with no content key at all; show, replay and diff with the tenant's key; another tenant's key,
or none, is a clear refusal (exit 7) naming the run's tenant and provider; the metadata-only
timeline still shows kinds and tool names.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tests.conftest import unique_name
from tests.content import agents
from tests.content.stack import archive_bytes, bucket_of, kms_s3_settings, record_secret_run
from tests.replayer.pipeline import sequencer_running, wait_sealed
from tests.services.sequencer.support import read_all
from tracevault.cli import tracevault
from tracevault.config import Settings
from tracevault.content import KEY_ATTRIBUTE
from tracevault.errors import ContentKeyError
from tracevault.schemas import decode_event
from tracevault.services.archiver import Archiver

TENANT = "tenant-a"
AGENT = "tests.content.agents:secret_agent"


@dataclass(frozen=True)
class Pipeline:
    settings: Settings
    endpoint: str
    bucket: str
    runs: tuple[str, ...]


@pytest.fixture(scope="module")
def pipeline(
    kafka_bootstrap: str, s3_endpoint: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Pipeline]:
    settings = kms_s3_settings(
        kafka_bootstrap, s3_endpoint, tmp_path_factory.mktemp("crypt"), "tv-crypt", TENANT
    )
    bucket = bucket_of(settings)
    tag = unique_name("enc")
    runs = (f"{tag}-1", f"{tag}-2", f"{tag}-subject")
    with sequencer_running(settings):
        record_secret_run(settings, runs[0])
        record_secret_run(settings, runs[1])
        record_secret_run(settings, runs[2], subject="customer-42")
        for rid in runs:
            wait_sealed(settings, rid)
    Archiver(settings).run(until_idle=1.0)
    yield Pipeline(settings, s3_endpoint, bucket, runs)


def _env(p: Pipeline, **extra: str) -> dict[str, str | None]:
    env: dict[str, str | None] = {
        "TRACEVAULT_BOOTSTRAP_SERVERS": p.settings.bootstrap_servers,
        "TRACEVAULT_TOPIC_PREFIX": p.settings.topic_prefix,
        "TRACEVAULT_ARCHIVE_URL": p.settings.archive_url,
        "TRACEVAULT_S3_ENDPOINT_URL": p.endpoint,
        "TRACEVAULT_RUN_KEY_STORE": p.settings.run_key_store,
        "TRACEVAULT_KEY_PROVIDER": "none",
        "TRACEVAULT_KMS_ENDPOINT_URL": None,
        "TRACEVAULT_TENANT": None,
    }
    env.update(extra)
    return env


def _with_key(p: Pipeline, tenant: str = TENANT) -> dict[str, str | None]:
    return _env(
        p,
        TRACEVAULT_KEY_PROVIDER="kms",
        TRACEVAULT_KMS_ENDPOINT_URL=p.endpoint,
        TRACEVAULT_TENANT=tenant,
    )


def _replay(env: dict[str, str | None], *args: str) -> Any:
    res = CliRunner().invoke(tracevault, ["replay", *args], env=env, terminal_width=200)
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise res.exception
    return res


def _archive_bytes(p: Pipeline) -> bytes:
    out = archive_bytes(p.endpoint, p.bucket)
    assert out, "nothing was archived"
    return out


def test_no_plaintext_reaches_raw_sealed_or_the_archive(pipeline: Pipeline) -> None:
    raw = [r.value for r in read_all(pipeline.settings, pipeline.settings.topics.raw)]
    sealed = [r.value for r in read_all(pipeline.settings, pipeline.settings.topics.sealed)]
    archived = _archive_bytes(pipeline)
    assert len(raw) == 3 * 7  # RUN_STARTED, 5 crossings, RUN_FINISHED
    ours = [v for v in raw if any(r.encode() in v for r in pipeline.runs)]
    assert len(ours) == len(raw)
    stores = (("raw", b"".join(raw)), ("sealed", b"".join(sealed)), ("archive", archived))
    for where, blob in stores:
        for secret in agents.SECRETS:
            assert secret.encode() not in blob, f"{secret!r} is in clear in {where}"
        assert b"customer-42" not in blob, f"the subject id is in clear in {where}"
    # what stays in clear: kinds, model id, tool names, the wrapped key
    events = [decode_event(v) for v in raw]
    assert {e.model for e in events} >= {agents.MODEL}
    assert b'"tool":"lookup"' in b"".join(e.request for e in events)
    started = [e for e in events if e.seq == 0]
    assert all(json.loads(e.attributes[KEY_ATTRIBUTE])["tenant"] == TENANT for e in started)


def test_verify_needs_no_content_key(pipeline: Pipeline) -> None:
    env = _env(pipeline)  # no key provider at all
    for rid in pipeline.runs:
        res = _replay(env, "verify", rid)
        assert res.exit_code == 0, res.output


def test_show_replay_and_diff_read_with_the_tenants_key(pipeline: Pipeline) -> None:
    env = _with_key(pipeline)
    a, b, _ = pipeline.runs
    res = _replay(env, "show", a, "--json")
    assert res.exit_code == 0, res.output
    for secret in agents.SECRETS[:5]:
        assert secret in res.output
    assert agents.SECRETS[5] in res.output  # the tool's error message, decrypted
    res = _replay(env, "run", a, "--agent", AGENT)
    assert res.exit_code == 0, res.output
    res = _replay(env, "diff", a, b, "--ignore", "clock", "--json")
    assert res.exit_code == 0, res.output
    res = _replay(env, "run", pipeline.runs[2], "--agent", AGENT)
    assert res.exit_code == 0, res.output


def test_without_a_key_show_refuses_and_the_metadata_timeline_remains(pipeline: Pipeline) -> None:
    a = pipeline.runs[0]
    res = _replay(_env(pipeline), "show", a)
    assert res.exit_code == ContentKeyError.exit_code == 7, res.output
    assert TENANT in res.output and "kms" in res.output
    res = _replay(_env(pipeline), "show", a, "--metadata", "--json")
    assert res.exit_code == 0, res.output
    lines = [json.loads(line) for line in res.output.splitlines()]
    assert [ev["kind"] for ev in lines][:3] == ["RUN_STARTED", "TOOL_CALL", "MODEL_CALL"]
    assert "lookup" in res.output and agents.MODEL in res.output
    assert not any(s in res.output for s in agents.SECRETS)


def test_another_tenants_key_is_refused_naming_the_runs_tenant(pipeline: Pipeline) -> None:
    env = _with_key(pipeline, tenant="tenant-b")
    a, b, _ = pipeline.runs
    for args in (("show", a), ("run", a, "--agent", AGENT), ("diff", a, b)):
        res = _replay(env, *args)
        assert res.exit_code == 7, (args, res.output)
        assert TENANT in res.output and "tenant-b" in res.output, res.output
        assert not any(s in res.output for s in agents.SECRETS)


def test_export_otel_with_content_needs_the_key(pipeline: Pipeline, tmp_path: Path) -> None:
    a = pipeline.runs[0]
    out = tmp_path / "otel.json"
    res = _replay(_env(pipeline), "export", a, "--otel", "-o", str(out), "--content")
    assert res.exit_code == 7, res.output
    res = _replay(_env(pipeline), "export", a, "--otel", "-o", str(out))
    assert res.exit_code == 0, res.output
    assert not any(s in out.read_text() for s in agents.SECRETS)
    res = _replay(_with_key(pipeline), "export", a, "--otel", "-o", str(out), "--content")
    assert res.exit_code == 0, res.output
    assert agents.SECRETS[0] in out.read_text()


def test_batch_replays_with_the_key_and_reports_a_refusal_without(pipeline: Pipeline) -> None:
    today = datetime.now(UTC).date().isoformat()  # the pipeline archived the runs today (UTC)
    args = ("batch", "--agent", AGENT, "--since", today, "--until", today, "--json")
    res = _replay(_with_key(pipeline), *args, "--workers", "1")
    out = json.loads(res.output)
    by_run = {r["run_id"]: r for r in out["runs"]}
    assert {by_run[r]["status"] for r in pipeline.runs} == {"ok"}, res.output
    res = _replay(_with_key(pipeline, tenant="tenant-b"), *args)
    by_run = {r["run_id"]: r for r in json.loads(res.output)["runs"]}
    for rid in pipeline.runs:
        assert by_run[rid]["status"] == "error", by_run[rid]
        assert "ContentKeyError" in by_run[rid]["detail"] and TENANT in by_run[rid]["detail"]


def test_a_bundle_holds_ciphertext_only_and_verifies_without_a_key(
    pipeline: Pipeline, tmp_path: Path
) -> None:
    a = pipeline.runs[0]
    out = tmp_path / "bundle"
    res = _replay(_env(pipeline), "export", a, "-o", str(out))
    assert res.exit_code == 0, res.output
    blob = b"".join(p.read_bytes() for p in out.rglob("*") if p.is_file())
    assert b'{"enc":"' in blob  # the envelopes are there, in events.jsonl as in raw/
    for secret in agents.SECRETS:
        assert secret.encode() not in blob, secret
    res = _replay(_env(pipeline), "verify", "--bundle", str(out))
    assert res.exit_code == 0, res.output
