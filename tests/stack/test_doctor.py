"""``tracevault doctor`` on a healthy deployment, and on the two problems it must name."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

from click.testing import CliRunner
from confluent_kafka.admin import AdminClient, NewTopic

from tests.conftest import unique_name
from tests.kafka_harness import set_topic_config
from tests.services.archiver.sealed_factory import sealed_run
from tests.services.sequencer.support import wait_until
from tests.stack.conftest import DemoRun
from tests.transparency.signed_sealed import SignedSealedWriter
from tests.transparency.signed_sealed import fresh_settings as signed_settings
from tracevault.archive import open_store
from tracevault.archive.layout import segment_key
from tracevault.cli import tracevault
from tracevault.config import Settings
from tracevault.kafka import ensure_topics
from tracevault.services.archiver import Archiver
from tracevault.transparency import Ed25519Signer


def _doctor(*args: str, env: dict[str, str] | None = None) -> tuple[int, dict[str, dict[str, str]]]:
    res = CliRunner().invoke(tracevault, [*args, "doctor", "--json"], env=env)
    checks = {c["check"]: c for c in json.loads(res.output)}
    return res.exit_code, checks


def test_healthy_local_deployment(demo_run: DemoRun) -> None:
    code, checks = _doctor(
        "--bootstrap-servers", demo_run.bootstrap, "--prefix", demo_run.prefix,
        env={"TRACEVAULT_ARCHIVE_URL": demo_run.archive},
    )  # fmt: skip
    assert code == 0, [c for c in checks.values() if c["status"] != "ok"]
    assert {c["status"] for c in checks.values()} == {"ok"}, checks
    assert set(checks) >= {
        "retention policy", "broker", "topic raw", "topic sealed", "topic heads", "topic dlq",
        "sequencer lag", "archiver lag", "archive", "archive retention", "C paths",
    }  # fmt: skip


def test_heads_not_compacted_is_named_with_the_fix(kafka_bootstrap: str, tmp_path: Path) -> None:
    settings = Settings(
        bootstrap_servers=kafka_bootstrap, topic_prefix=unique_name("doc"), partitions=2
    )
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics(
        [NewTopic(settings.topics.heads, 2, 1, config={"cleanup.policy": "delete"})]
    )[settings.topics.heads].result(30)
    for name in (settings.topics.raw, settings.topics.sealed, settings.topics.dlq):
        admin.create_topics([NewTopic(name, 2, 1)])[name].result(30)
    code, checks = _doctor(
        "--bootstrap-servers", kafka_bootstrap, "--prefix", settings.topic_prefix,
        env={"TRACEVAULT_ARCHIVE_URL": f"file://{tmp_path / 'a'}"},
    )  # fmt: skip
    assert code == 1
    heads = checks["topic heads"]
    assert heads["status"] == "fail"
    assert "cleanup.policy=delete, expected compact" in heads["detail"]
    assert "cleanup.policy=compact" in heads["fix"]
    assert checks["topic raw"]["status"] == "ok"


def test_short_archive_retention_is_named(kafka_bootstrap: str, tmp_path: Path) -> None:
    settings = Settings(
        bootstrap_servers=kafka_bootstrap, topic_prefix=unique_name("doc"), partitions=1
    )
    ensure_topics(settings)
    archive = f"file://{tmp_path / 'short'}"
    store = open_store(archive, settings)
    try:
        # An object written by a misconfigured writer: locked for 30 days only.
        store.put(segment_key("run-short", 0, 0), b"not-really-avro",
                  retain_until=datetime.now(UTC) + timedelta(days=30))  # fmt: skip
    finally:
        store.close()
    code, checks = _doctor(
        "--bootstrap-servers", kafka_bootstrap, "--prefix", settings.topic_prefix,
        env={"TRACEVAULT_ARCHIVE_URL": archive},
    )  # fmt: skip
    assert code == 1
    assert checks["archive retention"]["status"] == "fail"
    assert "run-short" in checks["archive retention"]["detail"]
    assert "under 183" in checks["archive retention"]["detail"]

    code, checks = _doctor(
        "--bootstrap-servers", kafka_bootstrap, "--prefix", settings.topic_prefix,
        env={"TRACEVAULT_ARCHIVE_URL": f"file://{tmp_path / 'ok'}",
             "TRACEVAULT_RETENTION_DAYS": "30"},
    )  # fmt: skip
    assert code == 1
    assert checks["retention policy"]["status"] == "fail"
    assert "Art. 19" in checks["retention policy"]["detail"]
    assert checks["archive retention"]["status"] == "ok"  # the other checks still ran


def test_a_missing_archive_is_named_and_not_created(kafka_bootstrap: str, tmp_path: Path) -> None:
    # doctor reads: a mistyped archive URL is a warning naming it, and leaves nothing behind
    settings = Settings(
        bootstrap_servers=kafka_bootstrap, topic_prefix=unique_name("doc"), partitions=1
    )
    ensure_topics(settings)
    missing = tmp_path / "typo" / "archive"
    _, checks = _doctor(
        "--bootstrap-servers", kafka_bootstrap, "--prefix", settings.topic_prefix,
        env={"TRACEVAULT_ARCHIVE_URL": f"file://{missing}"},
    )  # fmt: skip
    assert checks["archive"]["status"] == "warn", checks["archive"]
    assert f"file://{missing}" in checks["archive"]["detail"]
    assert f"nearest existing directory is {tmp_path}" in checks["archive"]["detail"]
    assert not (tmp_path / "typo").exists()

    # and --help names every check doctor ran (the topics as one line of the four roles)
    help_text = CliRunner().invoke(tracevault, ["doctor", "--help"]).output
    assert "topic raw|sealed|heads|dlq" in help_text
    unnamed = [c for c in checks if not c.startswith("topic ") and c not in help_text]
    assert not unnamed, f"doctor --help omits {unnamed}"
    assert {"C paths", "kafka retention raw", "archive holes"} <= set(checks)


def test_a_sealed_retention_under_the_archivers_lag_is_named(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    settings = Settings(
        bootstrap_servers=kafka_bootstrap, topic_prefix=unique_name("doc"), partitions=1
    )
    ensure_topics(settings)
    set_topic_config(kafka_bootstrap, settings.topics.sealed, retention_ms="1000")
    code, checks = _doctor(
        "--bootstrap-servers", kafka_bootstrap, "--prefix", settings.topic_prefix,
        env={"TRACEVAULT_ARCHIVE_URL": f"file://{tmp_path / 'a'}"},
    )  # fmt: skip
    assert code == 1
    sealed = checks["kafka retention sealed"]
    assert sealed["status"] == "fail", sealed
    assert f"retention.ms of topic {settings.topics.sealed}" in sealed["fix"], sealed
    assert checks["kafka retention raw"]["status"] == "ok", checks["kafka retention raw"]


def test_a_stuck_archiver_is_named_as_running_not_as_missing(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """An archiver that runs but cannot go on (here: it trusts another key, so it refuses
    every checkpoint and commits nothing) is not "start `tracevault archiver`"."""
    settings = signed_settings(kafka_bootstrap, tmp_path, partitions=1)
    writer = SignedSealedWriter(settings)
    writer.publish(sealed_run("doc-stuck", 3))
    archiver = Archiver(settings, verifiers=[Ed25519Signer.generate("another").verifier])
    thread = threading.Thread(target=archiver.run, daemon=True)
    thread.start()
    try:
        wait_until(
            lambda: archiver.stats.quarantined.get("bad-checkpoint", 0) > 0,
            timeout=60,
            what="the archiver refusing the checkpoint",
        )
        _, checks = _doctor(
            "--bootstrap-servers", kafka_bootstrap, "--prefix", settings.topic_prefix,
            env={"TRACEVAULT_ARCHIVE_URL": settings.archive_url},
        )  # fmt: skip
    finally:
        archiver.stop()
        thread.join(30)
    lag = checks["archiver lag"]
    assert lag["status"] == "warn", lag
    assert "runs but has not caught up" in lag["detail"], lag
    assert not lag["fix"].startswith("start"), lag
