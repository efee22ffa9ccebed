"""``tracevault erase`` through the real pipeline: broker, sequencer, archiver on moto's S3,
keys in moto's KMS over HTTP.

After erasing one subject by name, and one run of another subject alone: the subject's KMS key
is dead while the other subject's stays (only the run's entry in the run-key store went), the
erased runs' integrity still verifies and ``show`` says "erased on DATE (reason)", every other
run still verifies and replays, and the erasure record is a sealed, archived run that verifies
and names what, when, why and by whom. tests/content/test_erase_run.py searches every store.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from click.testing import CliRunner

from tests.conftest import unique_name
from tests.content import agents
from tests.content.stack import kms_s3_settings, record_secret_run
from tests.replayer.pipeline import sequencer_running, wait_sealed
from tracevault.cli import tracevault
from tracevault.content import KmsProvider
from tracevault.services.archiver import Archiver

AGENT = "tests.content.agents:secret_agent"
TENANT = "tenant-e"


@pytest.fixture(scope="module")
def erased(
    kafka_bootstrap: str, s3_endpoint: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    settings = kms_s3_settings(
        kafka_bootstrap, s3_endpoint, tmp_path_factory.mktemp("erase"), "tv-erase", TENANT
    )
    tag = unique_name("er")
    runs = {"alice": f"{tag}-alice", "bob": f"{tag}-bob", "carol": f"{tag}-carol",
            "tenant": f"{tag}-tenant"}  # fmt: skip
    env = {
        "TRACEVAULT_BOOTSTRAP_SERVERS": settings.bootstrap_servers,
        "TRACEVAULT_TOPIC_PREFIX": settings.topic_prefix,
        "TRACEVAULT_ARCHIVE_URL": settings.archive_url,
        "TRACEVAULT_S3_ENDPOINT_URL": s3_endpoint,
        "TRACEVAULT_RUN_KEY_STORE": settings.run_key_store,
        "TRACEVAULT_SPOOL_DIR": settings.spool_dir,
        "TRACEVAULT_KEY_PROVIDER": "kms",
        "TRACEVAULT_KMS_ENDPOINT_URL": s3_endpoint,
        "TRACEVAULT_TENANT": TENANT,
    }
    with sequencer_running(settings):
        for who, rid in runs.items():
            kw = {} if who == "tenant" else {"subject": f"{who}@example.com"}
            record_secret_run(settings, rid, **kw)
        for rid in runs.values():
            wait_sealed(settings, rid)
        Archiver(settings).run(until_idle=1.0)
        by_subject = _cli(env, "erase", "--subject", "alice@example.com", "--by", "dpo",
                          "--reason", "GDPR Art. 17 request 1187", "--json")  # fmt: skip
        assert by_subject.exit_code == 0, by_subject.output
        by_run = _cli(env, "erase", "--run", runs["bob"], "--reason", "card number by mistake",
                      "--json")  # fmt: skip
        assert by_run.exit_code == 0, by_run.output
        records = [json.loads(r.output) for r in (by_subject, by_run)]
        for r in records:
            wait_sealed(settings, r["record"])
    Archiver(settings).run(until_idle=1.0)
    yield {"env": env, "runs": runs, "records": records, "endpoint": s3_endpoint}


def _cli(env: dict[str, str], *args: str) -> Any:
    res = CliRunner().invoke(tracevault, list(args), env=env, terminal_width=200)
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise res.exception
    return res


def test_a_subjects_kms_key_dies_and_a_runs_erasure_leaves_its_subjects(
    erased: dict[str, Any],
) -> None:
    kms = boto3.client("kms", endpoint_url=erased["endpoint"])
    by_subject, by_run = erased["records"]
    subject_ref = KmsProvider(endpoint_url=erased["endpoint"]).subject_ref  # keyed, in KMS
    alice = subject_ref(TENANT, "alice@example.com")
    assert by_subject["subject"] == alice and len(by_subject["keys"]) == 1
    assert by_subject["entries"] == [f"{TENANT}/{alice}/{erased['runs']['alice']}.json"]
    meta = kms.describe_key(KeyId=f"alias/tracevault/{TENANT}/{alice}")["KeyMetadata"]
    assert meta["KeyId"] == by_subject["keys"][0]
    assert meta["KeyState"] == "PendingDeletion" and not meta["Enabled"]
    bob = subject_ref(TENANT, "bob@example.com")
    assert by_run["subject"] == bob and by_run["keys"] == []
    assert by_run["entries"] == [f"{TENANT}/{bob}/{erased['runs']['bob']}.json"]
    for who in ("bob", "carol"):  # bob's other runs would still open
        ref = subject_ref(TENANT, f"{who}@example.com")
        meta = kms.describe_key(KeyId=f"alias/tracevault/{TENANT}/{ref}")["KeyMetadata"]
        assert meta["KeyState"] == "Enabled"


def test_an_erased_run_verifies_and_show_says_erased(erased: dict[str, Any]) -> None:
    env = erased["env"]
    for who, reason in (("alice", "GDPR Art. 17 request 1187"), ("bob", "card number by mistake")):
        rid = erased["runs"][who]
        res = _cli(env, "replay", "verify", rid)
        assert res.exit_code == 0, res.output
        res = _cli(env, "replay", "show", rid)
        assert res.exit_code == 7, res.output
        assert "erased on 20" in res.output and reason in res.output, res.output
        assert not any(s in res.output for s in agents.SECRETS)
        res = _cli(env, "replay", "run", rid, "--agent", AGENT)
        assert res.exit_code == 7, res.output


def test_every_other_run_still_verifies_and_replays(erased: dict[str, Any]) -> None:
    env = erased["env"]
    for who in ("carol", "tenant"):
        rid = erased["runs"][who]
        assert _cli(env, "replay", "verify", rid).exit_code == 0
        res = _cli(env, "replay", "run", rid, "--agent", AGENT)
        assert res.exit_code == 0, res.output


def test_the_erasure_record_is_sealed_archived_and_names_what_when_why_who(
    erased: dict[str, Any],
) -> None:
    env = {**erased["env"], "TRACEVAULT_KEY_PROVIDER": "none"}  # readable without a key
    first = erased["records"][0]
    res = _cli(env, "replay", "verify", first["record"])
    assert res.exit_code == 0, res.output
    res = _cli(env, "replay", "show", first["record"], "--json")
    assert res.exit_code == 0, res.output
    started = json.loads(res.output.splitlines()[0])
    assert started["agent"]["agent_id"] == "tracevault-erase"
    text = json.dumps(started)
    for value in (first["subject"], first["keys"][0], first["when"], "GDPR Art. 17 request 1187",
                  "dpo", TENANT):  # fmt: skip
        assert value in text, value
    assert "alice@example.com" not in res.output  # the subject goes by its reference only


def test_erasing_again_is_refused(erased: dict[str, Any]) -> None:
    res = _cli(erased["env"], "erase", "--subject", "alice@example.com", "--reason", "again")
    assert res.exit_code == 3 and "already" in res.output, res.output
    res = _cli(erased["env"], "erase", "--run", erased["runs"]["bob"], "--reason", "again")
    assert res.exit_code == 3 and "already" in res.output, res.output
    assert f"run {erased['runs']['bob']}" in res.output  # the run's entry, not its subject
