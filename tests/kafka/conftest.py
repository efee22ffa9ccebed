"""A private SASL/SCRAM broker with ACLs enforced, started once per session by dev/kafka.

The shared broker is PLAINTEXT without an authorizer; ACL tests need one that authenticates
and authorizes, so they start their own on a free port (``dev/kafka start --sasl``) and stop
it at the end. It is started lazily: only a session that runs an ACL test pays for it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
from click.testing import CliRunner

from tests.conftest import unique_name
from tests.kafka_harness import LocalBroker, free_port
from tracevault.cli import tracevault
from tracevault.config import Settings
from tracevault.kafka import ensure_topics

MECHANISM = "SCRAM-SHA-512"


@dataclass
class SaslBroker(LocalBroker):
    """``dev/kafka start --sasl``: admin (super user), sequencer, archiver, agent, reader."""

    def _env(self) -> dict[str, str]:
        env = super()._env()
        env["KAFKA_SASL"] = "1"
        env["KAFKA_SASL_MECHANISM"] = MECHANISM
        return env


def sasl_env(user: str) -> dict[str, str]:
    """The TRACEVAULT_* variables that make any tracevault client log in as ``user``."""
    return {
        "TRACEVAULT_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
        "TRACEVAULT_SASL_MECHANISM": MECHANISM,
        "TRACEVAULT_SASL_USERNAME": user,
        "TRACEVAULT_SASL_PASSWORD": f"{user}-secret",  # dev/kafka's password for every user
    }


@pytest.fixture(scope="session")
def sasl_broker() -> Iterator[str]:
    """Bootstrap of the private SASL broker; the session fails (never skips) without it."""
    broker = SaslBroker(free_port())
    try:
        bootstrap = broker.start()
    except Exception as exc:
        pytest.fail(f"dev/kafka start --sasl failed: {exc}", pytrace=False)
    try:
        yield bootstrap
    finally:
        broker.stop()


@dataclass(frozen=True)
class Deployment:
    """One topic prefix on the SASL broker, its topics made and its ACLs granted."""

    bootstrap: str
    prefix: str
    grant_output: str

    def settings(self, user: str, **overrides: object) -> Settings:
        """Settings of a client logged in as ``user`` (one of dev/kafka's SASL users)."""
        env = sasl_env(user)
        values: dict[str, object] = {
            "bootstrap_servers": self.bootstrap,
            "topic_prefix": self.prefix,
            "partitions": 2,
            "security_protocol": env["TRACEVAULT_SECURITY_PROTOCOL"],
            "sasl_mechanism": env["TRACEVAULT_SASL_MECHANISM"],
            "sasl_username": user,
            "sasl_password": env["TRACEVAULT_SASL_PASSWORD"],
        }
        values.update(overrides)
        return Settings(**values)  # type: ignore[arg-type]


def grant(bootstrap: str, prefix: str, *args: str) -> tuple[int, str]:
    """``tracevault topics acls`` as the admin user, through the real CLI."""
    res = CliRunner().invoke(
        tracevault,
        ["--bootstrap-servers", bootstrap, "--prefix", prefix, "topics", "acls", *args],
        env=sasl_env("admin"),
        terminal_width=80,
    )
    return res.exit_code, res.output


ROLES = (
    *("--sequencer", "User:sequencer", "--archiver", "User:archiver"),
    *("--agent", "User:agent", "--reader", "User:reader"),
)


@pytest.fixture(scope="module")
def deployment(sasl_broker: str) -> Deployment:
    """Topics created as admin, then every role's ACLs granted by ``tracevault topics acls``."""
    prefix = unique_name("acl")
    dep = Deployment(sasl_broker, prefix, "")
    ensure_topics(dep.settings("admin"))
    code, out = grant(sasl_broker, prefix, *ROLES, "--json")
    assert code == 0, out
    return Deployment(sasl_broker, prefix, out)


@pytest.fixture
def as_user(deployment: Deployment) -> Callable[..., Settings]:
    return deployment.settings
