"""The Kafka ACLs of a deployment: who may write which topic (docs/acls.md).

ACLs are the first line against a forged record: only the sequencer's principal may write
``<p>.sealed``, ``<p>.heads`` and ``<p>.dlq`` or use its transactional ids, so an agent that
can write ``<p>.raw`` cannot append a chain-valid event to a sealed run. The plan is data
(``Grant`` rows) so ``--dry-run`` prints exactly what ``grant_acls`` would create, and
re-running grants nothing twice: Kafka treats an existing binding as already created.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from tracevault.config import Settings
from tracevault.errors import ConfigError, ServiceUnavailableError

__all__ = ["Grant", "acl_plan", "grant_acls", "parse_principal"]

Role = Literal["sequencer", "archiver", "agent", "reader"]
_PRINCIPAL = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*:[^\s]+$")
# Readers that assign partitions (no group membership) still need a group.id, and librdkafka
# looks up its coordinator, which needs DESCRIBE on the group: without it every heads read
# logs GROUP_AUTHORIZATION_FAILED. These prefixes are the group ids those readers draw.
_HEADS_READER_GROUPS = "tracevault-heads-"  # tracevault-heads-reader-*, tracevault-heads-probe
_HISTORY_READER_GROUPS = "tracevault-sealed-history-"
_REPLAYER_GROUPS = "tracevault-replayer-"
_IN_EFFECT_S = 15.0  # how long `topics acls` waits for the authorizer to list new bindings
_CLUSTER = "kafka-cluster"  # the one name Kafka gives the CLUSTER resource
# librdkafka calls Kafka's CLUSTER resource type (wire code 4) BROKER.
_RESOURCE_TYPES = {
    "TOPIC": ResourceType.TOPIC,
    "GROUP": ResourceType.GROUP,
    "TRANSACTIONAL_ID": ResourceType.TRANSACTIONAL_ID,
    "CLUSTER": ResourceType.BROKER,
}


@dataclass(frozen=True, slots=True)
class Grant:
    """One ALLOW binding: ``principal`` may do ``operation`` on a resource, from any host."""

    role: Role
    principal: str
    resource: Literal["TOPIC", "GROUP", "TRANSACTIONAL_ID", "CLUSTER"]
    name: str
    pattern: Literal["LITERAL", "PREFIXED"]
    operation: Literal["READ", "WRITE", "DESCRIBE", "IDEMPOTENT_WRITE"]
    why: str

    def binding(self) -> Any:
        return AclBinding(
            _RESOURCE_TYPES[self.resource],
            self.name,
            ResourcePatternType[self.pattern],
            self.principal,
            "*",
            AclOperation[self.operation],
            AclPermissionType.ALLOW,
        )

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


def parse_principal(value: str, option: str) -> str:
    """``User:name`` as Kafka spells principals; anything else is a usage error naming
    ``option`` (a bare name would be granted to nobody the broker authenticates)."""
    if not _PRINCIPAL.match(value):
        raise ConfigError(
            f"{option} {value!r} is not a Kafka principal; write it as User:NAME "
            "(the SASL user name, e.g. User:sequencer)"
        )
    return value


def _sequencer(settings: Settings, who: str) -> list[Grant]:
    t, p = settings.topics, settings.topic_prefix

    def g(res: Any, name: str, op: Any, why: str, pattern: Any = "LITERAL") -> Grant:
        return Grant("sequencer", who, res, name, pattern, op, why)

    return [
        g("TOPIC", t.raw, "READ", "consume raw events"),
        g("TOPIC", t.raw, "DESCRIBE", "find raw's partitions"),
        g("GROUP", settings.sequencer_group_id, "READ", "join the group, commit offsets"),
        *(
            g("TOPIC", name, op, why)
            for name, why in (
                (t.sealed, "the only writer of sealed runs"),
                (t.heads, "the only writer of run heads"),
                (t.dlq, "refused events"),
            )
            for op in ("WRITE", "DESCRIBE")
        ),
        # The sequencer restores its state from heads and re-reads sealed history.
        g("TOPIC", t.heads, "READ", "restore run heads at start"),
        g("TOPIC", t.sealed, "READ", "re-read a run's sealed history"),
        g("GROUP", _HEADS_READER_GROUPS, "DESCRIBE", "heads reader's group", "PREFIXED"),
        g("GROUP", _HISTORY_READER_GROUPS, "DESCRIBE", "history reader's group", "PREFIXED"),
        g("TRANSACTIONAL_ID", f"{p}.sequencer.", "WRITE", "its transactions", "PREFIXED"),
        g("TRANSACTIONAL_ID", f"{p}.sequencer.", "DESCRIBE", "its transactions", "PREFIXED"),
        g("CLUSTER", _CLUSTER, "IDEMPOTENT_WRITE", "transactional producer id"),
    ]


def _archiver(settings: Settings, who: str) -> list[Grant]:
    t = settings.topics
    return [
        Grant("archiver", who, "TOPIC", t.sealed, "LITERAL", "READ", "archive sealed runs"),
        Grant("archiver", who, "TOPIC", t.sealed, "LITERAL", "DESCRIBE", "find partitions"),
        Grant(
            "archiver",
            who,
            "GROUP",
            settings.archiver_group_id,
            "LITERAL",
            "READ",
            "join the group, commit offsets",
        ),
    ]


def _agent(settings: Settings, who: str) -> list[Grant]:
    raw = settings.topics.raw
    # WRITE on a topic also lets an idempotent producer get its id (Kafka 3.0+, KIP-679):
    # agents need no cluster-wide IDEMPOTENT_WRITE.
    return [
        Grant("agent", who, "TOPIC", raw, "LITERAL", "WRITE", "record runs"),
        Grant("agent", who, "TOPIC", raw, "LITERAL", "DESCRIBE", "find raw's partitions"),
    ]


def _reader(settings: Settings, who: str) -> list[Grant]:
    """Read-only: ``replay show|verify --from topic`` (heads to find a run, sealed to read it)."""
    t = settings.topics
    return [
        *(
            Grant("reader", who, "TOPIC", name, "LITERAL", op, "replay from the topic")
            for name in (t.sealed, t.heads)
            for op in ("READ", "DESCRIBE")
        ),
        *(
            Grant("reader", who, "GROUP", prefix, "PREFIXED", "DESCRIBE", "its readers' groups")
            for prefix in (_REPLAYER_GROUPS, _HEADS_READER_GROUPS)
        ),
    ]


def acl_plan(
    settings: Settings,
    *,
    sequencers: Sequence[str] = (),
    archivers: Sequence[str] = (),
    agents: Sequence[str] = (),
    readers: Sequence[str] = (),
) -> list[Grant]:
    """Every binding the named principals need, and nothing more; duplicates dropped."""
    grants: list[Grant] = []
    for who in sequencers:
        grants += _sequencer(settings, who)
    for who in archivers:
        grants += _archiver(settings, who)
    for who in agents:
        grants += _agent(settings, who)
    for who in readers:
        grants += _reader(settings, who)
    return list(dict.fromkeys(grants))


def _existing(admin: AdminClient, settings: Settings, principals: Iterable[str]) -> set[Any]:
    found: set[Any] = set()
    for who in sorted(set(principals)):
        # None matches any name and host (librdkafka's filter); the stubs only allow str.
        flt = AclBindingFilter(
            ResourceType.ANY,
            None,  # type: ignore[arg-type]
            ResourcePatternType.ANY,
            who,
            None,  # type: ignore[arg-type]
            AclOperation.ANY,
            AclPermissionType.ANY,
        )
        try:
            found.update(admin.describe_acls(flt, request_timeout=15).result(timeout=20))
        except KafkaException as exc:
            raise _refused(settings, exc) from exc
    return found


def _refused(settings: Settings, exc: KafkaException) -> Exception:
    err = exc.args[0]
    code = err.code() if isinstance(err, KafkaError) else None
    if code == KafkaError.SECURITY_DISABLED:
        return ConfigError(
            f"the broker at {settings.bootstrap_servers} has no authorizer, so it enforces no "
            "ACLs; set authorizer.class.name=org.apache.kafka.metadata.authorizer."
            "StandardAuthorizer (dev/kafka start --sasl does)"
        )
    if code == KafkaError.CLUSTER_AUTHORIZATION_FAILED:
        user = settings.sasl_username or "(no TRACEVAULT_SASL_USERNAME: anonymous)"
        return ConfigError(
            f"the broker at {settings.bootstrap_servers} refused to change ACLs for {user}: "
            "grant them as a super user or a principal with ALTER on the cluster "
            "(TRACEVAULT_SASL_USERNAME / TRACEVAULT_SASL_PASSWORD)"
        )
    return ServiceUnavailableError(
        f"Kafka at {settings.bootstrap_servers} failed the ACL request "
        f"({err.str() if isinstance(err, KafkaError) else err})"
    )


def grant_acls(settings: Settings, grants: Sequence[Grant]) -> list[tuple[Grant, bool]]:
    """Create the bindings; each grant is returned with ``True`` when it was new."""
    if not grants:
        return []
    admin = AdminClient(settings.kafka_config(log_level=0))
    try:
        admin.list_topics(timeout=15)
    except KafkaException as exc:
        raise ServiceUnavailableError(
            f"Kafka at {settings.bootstrap_servers} did not answer ({exc}); start it, or check "
            "--bootstrap-servers and TRACEVAULT_SECURITY_PROTOCOL / TRACEVAULT_SASL_*"
        ) from exc
    before = _existing(admin, settings, (g.principal for g in grants))
    futures = admin.create_acls([g.binding() for g in grants], request_timeout=15)
    for fut in futures.values():
        try:
            fut.result(timeout=20)
        except KafkaException as exc:
            raise _refused(settings, exc) from exc
    _wait_in_effect(admin, settings, grants)
    return [(g, g.binding() not in before) for g in grants]


def _wait_in_effect(admin: AdminClient, settings: Settings, grants: Sequence[Grant]) -> None:
    """Return once the broker's authorizer lists every binding (DescribeAcls reads the
    same state it authorizes with): under KRaft a created ACL reaches it through the
    metadata log a moment after CreateAcls answers, and a client that starts right after
    `topics acls` was seen refused in between."""
    wanted = {g.binding() for g in grants}
    deadline = time.monotonic() + _IN_EFFECT_S
    while not wanted <= _existing(admin, settings, (g.principal for g in grants)):
        if time.monotonic() > deadline:
            raise ServiceUnavailableError(
                f"Kafka at {settings.bootstrap_servers} accepted the ACLs but its authorizer "
                f"did not list them within {_IN_EFFECT_S:.0f}s; run the command again"
            )
        time.sleep(0.1)
