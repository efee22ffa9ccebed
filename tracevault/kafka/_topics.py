"""Create and check the four topics of a deployment.

Creation is idempotent, but an existing topic is compared with what tracevault needs, and
every difference is reported: a ``heads`` topic that is not compacted loses sequencer state,
and ``raw``/``sealed``/``heads`` with different partition counts break co-partitioning.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic  # type: ignore[attr-defined]

from tracevault.config import Settings
from tracevault.errors import ServiceUnavailableError, TopicMismatchError

__all__ = ["TopicReport", "describe_topics", "ensure_topics", "topic_specs"]

_DAY_MS = 24 * 3600 * 1000

# (role, config) per topic. Only the keys listed here are compared on existing topics.
_ROLE_CONFIGS: dict[str, dict[str, str]] = {
    # raw events only need to live until the sequencer has sealed them; a week covers outages.
    "raw": {"cleanup.policy": "delete", "retention.ms": str(7 * _DAY_MS)},
    # sealed is the replayable hot copy; the archive is the six-month record.
    "sealed": {"cleanup.policy": "delete", "retention.ms": str(30 * _DAY_MS)},
    # heads is sequencer state: one record per open run plus chunks of finished runs;
    # compaction keeps the newest and removes tombstones a day later, and no record waits
    # more than six hours to be compacted, so a restart reads little more than live state
    # (docs/fleet.md, "Restart").
    "heads": {
        "cleanup.policy": "compact",
        "min.cleanable.dirty.ratio": "0.1",
        "segment.ms": str(3600 * 1000),
        "delete.retention.ms": str(_DAY_MS),
        "max.compaction.lag.ms": str(6 * 3600 * 1000),
    },
    # refused events wait for a person; keep them longer than anything else on Kafka.
    "dlq": {"cleanup.policy": "delete", "retention.ms": str(90 * _DAY_MS)},
}
# A difference in these breaks a guarantee; other differences are reported as warnings.
_CRITICAL = {"cleanup.policy"}
_SHOWN_CONFIGS = {
    "cleanup.policy",
    "retention.ms",
    "min.cleanable.dirty.ratio",
    "segment.ms",
    "delete.retention.ms",
    "max.compaction.lag.ms",
    "max.message.bytes",
    "min.insync.replicas",
}


@dataclass(frozen=True)
class TopicSpec:
    role: str
    name: str
    partitions: int
    replication_factor: int
    config: dict[str, str]


@dataclass
class TopicReport:
    """What ``ensure_topics``/``describe_topics`` found for one topic."""

    role: str
    name: str
    status: Literal["created", "exists", "missing", "mismatch"]
    partitions: int | None = None
    config: dict[str, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def topic_specs(settings: Settings, partitions: int | None = None) -> list[TopicSpec]:
    names = settings.topics
    n = partitions or settings.partitions
    by_role = {"raw": names.raw, "sealed": names.sealed, "heads": names.heads, "dlq": names.dlq}
    return [
        TopicSpec(role, by_role[role], n, settings.replication_factor, dict(cfg))
        for role, cfg in _ROLE_CONFIGS.items()
    ]


def _admin(settings: Settings) -> AdminClient:
    return AdminClient(settings.kafka_config(log_level=0))


def _unreachable(settings: Settings, exc: Exception) -> ServiceUnavailableError:
    return ServiceUnavailableError(
        f"Kafka at {settings.bootstrap_servers} did not answer ({exc}); start it "
        "(dev/kafka start) or set --bootstrap-servers / TRACEVAULT_BOOTSTRAP_SERVERS"
    )


def _metadata(admin: AdminClient, settings: Settings, timeout: float) -> Any:
    try:
        return admin.list_topics(timeout=timeout)
    except KafkaException as exc:
        raise _unreachable(settings, exc) from exc


def partition_counts(
    settings: Settings, names: list[str], timeout: float = 15.0, **conf: Any
) -> dict[str, int | None]:
    """Each topic's partition count, None where it is missing (one metadata request; a
    broker that does not answer within ``timeout`` is :class:`ServiceUnavailableError`).
    ``conf``: more client settings (a service's error and stats callbacks)."""
    admin = AdminClient(settings.kafka_config(**{"log_level": 0, **conf}))
    md = _metadata(admin, settings, timeout)
    out: dict[str, int | None] = {}
    for name in names:
        t = md.topics.get(name)
        out[name] = None if t is None or t.error is not None else len(t.partitions)
    return out


def describe_topics(
    settings: Settings, partitions: int | None = None, timeout: float = 15.0
) -> list[TopicReport]:
    """Each topic's partitions and config, compared with what tracevault needs."""
    admin = _admin(settings)
    specs = topic_specs(settings, partitions)
    md = _metadata(admin, settings, timeout)
    present = [s for s in specs if s.name in md.topics and md.topics[s.name].error is None]
    configs: dict[str, dict[str, str]] = {}
    if present:
        futures = admin.describe_configs(
            [ConfigResource(ConfigResource.Type.TOPIC, s.name) for s in present],
            request_timeout=timeout,
        )
        for res, fut in futures.items():
            try:
                entries = fut.result(timeout=timeout)
            except KafkaException as exc:
                raise _unreachable(settings, exc) from exc
            configs[res.name] = {k: str(v.value) for k, v in entries.items() if k in _SHOWN_CONFIGS}
    expected_partitions = partitions
    if expected_partitions is None:
        # Without an explicit count, the existing raw topic defines it (co-partitioning).
        raw = specs[0]
        expected_partitions = (
            len(md.topics[raw.name].partitions) if raw.name in md.topics else settings.partitions
        )
    reports = []
    for s in specs:
        if s not in present:
            reports.append(TopicReport(s.role, s.name, "missing"))
            continue
        actual_parts = len(md.topics[s.name].partitions)
        cfg = configs.get(s.name, {})
        rep = TopicReport(s.role, s.name, "exists", actual_parts, cfg)
        if actual_parts != expected_partitions:
            rep.problems.append(
                f"has {actual_parts} partitions, expected {expected_partitions}: raw, sealed "
                "and heads must be co-partitioned; recreate it or use a new --prefix"
            )
        for key, want in s.config.items():
            got = cfg.get(key)
            if got != want:
                msg = f"{key}={got}, expected {want}"
                if key in _CRITICAL:
                    rep.problems.append(
                        msg + f"; fix with: kafka-configs --alter --topic {s.name} "
                        f"--add-config {key}={want}"
                    )
                else:
                    rep.warnings.append(msg)
        if rep.problems:
            rep.status = "mismatch"
        reports.append(rep)
    return reports


def ensure_topics(
    settings: Settings, partitions: int | None = None, timeout: float = 30.0
) -> list[TopicReport]:
    """Create whichever of the four topics are missing; raise if an existing one mismatches."""
    admin = _admin(settings)
    specs = topic_specs(settings, partitions)
    md = _metadata(admin, settings, timeout)
    missing = [s for s in specs if s.name not in md.topics]
    created: set[str] = set()
    if missing:
        futures = admin.create_topics(
            [
                NewTopic(s.name, s.partitions, s.replication_factor, config=s.config)
                for s in missing
            ],
            request_timeout=timeout,
        )
        for name, fut in futures.items():
            try:
                fut.result(timeout=timeout)
                created.add(name)
            except KafkaException as exc:
                err = exc.args[0]
                if isinstance(err, KafkaError) and err.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                    continue  # created concurrently by another instance: compared below
                raise _unreachable(settings, exc) from exc
    want = partitions or settings.partitions
    reports = describe_topics(settings, partitions=want, timeout=timeout)
    # Metadata can lag right after creation; a just-created topic is ours by construction.
    for r in reports:
        if r.name in created:
            r.status = "created"
    bad = [r for r in reports if r.status in ("mismatch", "missing") and r.name not in created]
    if bad:
        detail = "; ".join(f"{r.name}: {', '.join(r.problems) or r.status}" for r in bad)
        raise TopicMismatchError(f"existing topics do not match what tracevault needs: {detail}")
    return reports
