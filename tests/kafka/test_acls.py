"""Kafka ACLs as the first line (docs/acls.md), on a private SASL/SCRAM broker with ACLs on.

Each principal logs in with its own SCRAM password and holds only what ``tracevault topics
acls`` granted. The attacks are real: an agent's own credentials against the real broker.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from confluent_kafka import KafkaError, KafkaException, Producer

from tests.kafka.conftest import ROLES, Deployment, grant, sasl_env
from tests.services.archiver.helpers import finished_runs
from tests.services.archiver.helpers import running as archiving
from tests.services.sequencer.support import raw_event, read_all, wait_until
from tests.services.sequencer.support import running as sequencing
from tracevault.cli import tracevault
from tracevault.config import Settings
from tracevault.producer import Publisher, Recorder
from tracevault.schemas import decode_sealed
from tracevault.services.archiver import Archiver
from tracevault.transparency import CHECKPOINT_KEY


def _produce_as(settings: Settings, topic: str, value: bytes, **conf: Any) -> KafkaError | None:
    """Produce one record as ``settings``' principal; the broker's verdict (None = written)."""
    producer = Producer(settings.kafka_config(**{"log_level": 0, **conf}))
    verdict: list[KafkaError | None] = []
    producer.produce(topic, value, b"k", on_delivery=lambda err, _msg: verdict.append(err))
    producer.flush(30)
    assert verdict, f"no delivery report for {topic} within 30s"
    return verdict[0]


def test_agent_can_write_raw_and_nothing_else(deployment: Deployment) -> None:
    agent = deployment.settings("agent")
    t = agent.topics
    assert _produce_as(agent, t.raw, raw_event("r-ok", 0)) is None

    forged = raw_event("r-forged", 0)
    for topic in (t.sealed, t.heads, t.dlq):
        err = _produce_as(agent, topic, forged)
        assert err is not None, f"the agent wrote to {topic}"
        assert err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, (topic, err)
        # The idempotent producer an attacker might copy from the SDK is refused the same way.
        err = _produce_as(agent, topic, forged, **{"enable.idempotence": True})
        assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, topic

    admin = deployment.settings("admin")
    assert read_all(admin, t.sealed) == [] and read_all(admin, t.heads) == []


def test_agent_cannot_take_the_sequencers_transactional_id(deployment: Deployment) -> None:
    agent = deployment.settings("agent")
    producer = Producer(
        agent.kafka_config(
            **{"transactional.id": f"{deployment.prefix}.sequencer.t1", "log_level": 0}
        )
    )
    with pytest.raises(KafkaException) as caught:
        producer.init_transactions(30)
    err = caught.value.args[0]
    assert err.code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, err


def test_every_service_runs_as_its_own_principal(
    deployment: Deployment, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Runs recorded by the SDK as ``agent``, sealed by the real sequencer logged in as
    ``sequencer`` (twice: a restart restores its state from heads, which it must read),
    archived by the real archiver logged in as ``archiver``, verified from the topic by
    ``reader``, checked by the doctor as ``admin``; no client is refused anything."""
    agent = deployment.settings("agent", spool_dir=str(tmp_path / "spool"))
    admin = deployment.settings("admin")
    seq = deployment.settings(
        "sequencer", sequencer_batch_wait_ms=20, sequencer_session_timeout_ms=6_000
    )

    def record() -> str:
        publisher = Publisher(agent)
        rec = Recorder(
            publisher=publisher, agent_id="a", agent_version="1", tools={"lookup": lambda a: a}
        )
        rec.run(lambda task, edges: {"echo": edges.tool("lookup", task)}, {"q": 1})
        report = publisher.close(timeout=30)
        assert report.delivered == 3 and report.spooled == 0, report
        return rec.run_id

    def sealed(run_id: str) -> list[int]:
        records = read_all(admin, admin.topics.sealed)
        # the sealed topic also holds the signed log's checkpoint records (docs/log.md)
        out = [decode_sealed(r.value) for r in records if r.value and r.key != CHECKPOINT_KEY]
        return [e.seq for e in out if e.run_id == run_id]

    runs = []
    for _ in range(2):
        runs.append(record())
        with sequencing(seq, instance_id="acl-seq") as (_, errors):
            wait_until(
                lambda: sealed(runs[-1]) == [0, 1, 2] or bool(errors),
                timeout=60,
                what="sealed run",
            )
        assert not errors, errors
    assert [sealed(r) for r in runs] == [[0, 1, 2], [0, 1, 2]]

    archiver = Archiver(
        deployment.settings("archiver", archive_url=f"file://{tmp_path / 'archive'}")
    )
    with archiving(archiver) as out:
        wait_until(
            lambda: finished_runs(archiver.store, runs) == 2 or bool(out),
            timeout=60,
            what="archived runs",
        )
    assert finished_runs(archiver.store, runs) == 2, out

    res = CliRunner().invoke(
        tracevault,
        ["--bootstrap-servers", deployment.bootstrap, "--prefix", deployment.prefix,
         "replay", "verify", runs[1], "--from", "topic", "--json"],
        env=sasl_env("reader"),
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    # The operator's doctor, logged in as admin, reads every group's lag through SASL too.
    res = CliRunner().invoke(
        tracevault,
        ["--bootstrap-servers", deployment.bootstrap, "--prefix", deployment.prefix,
         "doctor", "--archive", f"file://{tmp_path / 'archive'}", "--json"],
        env=sasl_env("admin"),
    )  # fmt: skip
    checks = {c["check"]: c for c in json.loads(res.output)}
    kafka_checks = ["broker", "topic raw", "topic sealed", "sequencer lag", "archiver lag"]
    assert all(checks[name]["status"] == "ok" for name in kafka_checks), checks
    refused = [r.getMessage() for r in caplog.records if "AUTHORIZATION_FAILED" in r.getMessage()]
    assert not refused, refused


def test_grant_is_idempotent_and_reports_what_exists(deployment: Deployment) -> None:
    first = json.loads(deployment.grant_output)
    assert {row["status"] for row in first} == {"added"}
    code, out = grant(deployment.bootstrap, deployment.prefix, *ROLES, "--json")
    assert code == 0, out
    again = json.loads(out)
    assert {row["status"] for row in again} == {"present"}
    assert [r | {"status": ""} for r in again] == [r | {"status": ""} for r in first]


def test_grant_refused_without_the_right_to_alter_acls(deployment: Deployment) -> None:
    res = CliRunner().invoke(
        tracevault,
        ["--bootstrap-servers", deployment.bootstrap, "--prefix", deployment.prefix,
         "topics", "acls", "--agent", "User:agent"],
        env=sasl_env("agent"),
    )  # fmt: skip
    assert res.exit_code == 2, res.output
    assert "refused to change ACLs for agent" in res.output


def test_grant_on_a_broker_without_an_authorizer_says_so(kafka_bootstrap: str) -> None:
    res = CliRunner().invoke(
        tracevault,
        ["--bootstrap-servers", kafka_bootstrap, "--prefix", "acl-none", "topics", "acls",
         "--agent", "User:agent"],
    )  # fmt: skip
    assert res.exit_code == 2, res.output
    assert "has no authorizer" in res.output


def _dry_run(*args: str, width: int = 80) -> str:
    # An address nothing listens on: a dry run must not need Kafka.
    res = CliRunner().invoke(
        tracevault,
        ["--bootstrap-servers", "127.0.0.1:1", "--prefix", "p", "topics", "acls", *args],
        terminal_width=width,
    )
    assert res.exit_code == 0, res.output
    return res.output


def test_dry_run_gives_the_write_side_to_the_sequencer_only() -> None:
    rows = json.loads(_dry_run(*ROLES, "--dry-run", "--json"))
    assert {r["status"] for r in rows} == {"dry run"}
    writes = {
        (r["principal"], r["resource"], r["name"], r["pattern"])
        for r in rows
        if r["operation"] in ("WRITE", "IDEMPOTENT_WRITE")
    }
    assert writes == {
        ("User:sequencer", "TOPIC", "p.sealed", "LITERAL"),
        ("User:sequencer", "TOPIC", "p.heads", "LITERAL"),
        ("User:sequencer", "TOPIC", "p.dlq", "LITERAL"),
        ("User:sequencer", "TRANSACTIONAL_ID", "p.sequencer.", "PREFIXED"),
        ("User:sequencer", "CLUSTER", "kafka-cluster", "LITERAL"),
        ("User:agent", "TOPIC", "p.raw", "LITERAL"),
    }
    reads = {(r["principal"], r["name"]) for r in rows if r["operation"] == "READ"}
    assert reads == {
        ("User:sequencer", "p.raw"),
        ("User:sequencer", "p.sequencer"),
        ("User:sequencer", "p.heads"),
        ("User:sequencer", "p.sealed"),
        ("User:archiver", "p.sealed"),
        ("User:archiver", "tracevault-archiver.p"),
        ("User:reader", "p.sealed"),
        ("User:reader", "p.heads"),
    }


def test_dry_run_table_reads_at_80_columns() -> None:
    out = _dry_run(*ROLES, "--agent", "User:agent-2", "--dry-run")
    assert all(len(line) <= 80 for line in out.splitlines())
    assert "would grant (dry run)" in out
    assert "User:agent-2" in out and "txn id" in out and "p.sequencer.*" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--agent", "agent"), "--agent 'agent' is not a Kafka principal"),
        (("--dry-run",), "name at least one principal"),
    ],
)
def test_usage_errors_name_the_option(args: tuple[str, ...], message: str) -> None:
    res = CliRunner().invoke(
        tracevault, ["--bootstrap-servers", "127.0.0.1:1", "topics", "acls", *args]
    )
    assert res.exit_code == 2, res.output
    assert message in res.output
