"""The deployment checks, in the order an operator would debug them.

1. settings: the retention policy is at least the legal minimum (EU AI Act Art. 19), and the
   archiver's C path is built (without it the archiver runs at about half its speed);
2. broker: Kafka answers at the bootstrap servers;
3. topics: all four exist, co-partitioned, heads compacted;
4. archive: the object store answers, Object Lock is on, every archived object is locked for
   at least the minimum (the same evidence ``archive retention-report`` gives an auditor);
5. sequencer and archiver lag: how far each consumer group is behind its input topic, and
   whether anyone in the group runs (a service that runs and stays behind is stuck, not
   stopped);
6. Kafka retention: ``raw`` and ``sealed`` keep records longer than the service reading them
   is behind, plus a margin; otherwise records expire unread and the archive gets a hole;
7. holes: the archive's record of leaves whose sealed records were gone before archiving;
8. index: how far the investigator's index is behind the archive (docs/index.md).

Each check yields a :class:`Check` with a status and, for anything not ok, the fix.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from tracevault import native
from tracevault.archive import LOST, ObjectStore, open_store, parse_hole_key, retention_report
from tracevault.config import MIN_RETENTION_DAYS, Settings, load_settings
from tracevault.errors import ConfigError, NotFoundError, TraceVaultError
from tracevault.index import index_keys, index_lag
from tracevault.kafka import TopicReport, describe_topics, new_reader, watermarks
from tracevault.transparency import is_checkpoint_record

__all__ = ["Check", "run_checks"]

Status = Literal["ok", "warn", "fail"]


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    status: Status
    detail: str
    fix: str = ""

    def to_json(self) -> dict[str, str]:
        return {"check": self.name, "status": self.status, "detail": self.detail, "fix": self.fix}


def _settings(overrides: dict[str, object]) -> tuple[Settings, list[Check]]:
    try:
        return load_settings(**overrides), [
            Check("retention policy", "ok", "retention_days is at least 183")
        ]
    except ConfigError as exc:
        if "retention_days" not in str(exc):
            raise
        # Keep checking everything else with the legal minimum; report the bad setting.
        settings = load_settings(**{**overrides, "retention_days": MIN_RETENTION_DAYS})
        return settings, [
            Check(
                "retention policy",
                "fail",
                str(exc),
                f"set TRACEVAULT_RETENTION_DAYS (or --retention-days) to {MIN_RETENTION_DAYS} "
                "or more",
            )
        ]


def _broker(settings: Settings) -> Check:
    try:
        from confluent_kafka.admin import AdminClient  # noqa: PLC0415 - keeps imports light

        md = AdminClient(settings.kafka_config(log_level=0)).list_topics(timeout=5)
    except KafkaException as exc:
        return Check(
            "broker",
            "fail",
            f"no answer from {settings.bootstrap_servers}: {exc}",
            "start Kafka (dev/kafka start) or fix --bootstrap-servers",
        )
    return Check("broker", "ok", f"{len(md.brokers)} broker(s) at {settings.bootstrap_servers}")


def _topics(reports: list[TopicReport]) -> Iterator[Check]:
    for r in reports:
        if r.status == "missing":
            yield Check(f"topic {r.role}", "fail", f"{r.name} does not exist",
                        "tracevault topics create")  # fmt: skip
        elif r.problems:
            yield Check(f"topic {r.role}", "fail", f"{r.name}: " + "; ".join(r.problems),
                        "; ".join(p.split("; ", 1)[-1] for p in r.problems))  # fmt: skip
        elif r.warnings:
            yield Check(f"topic {r.role}", "warn", f"{r.name}: " + "; ".join(r.warnings))
        else:
            yield Check(f"topic {r.role}", "ok", f"{r.name}, {r.partitions} partitions")


_ARCHIVE_FIX = "create the bucket with Object Lock, or fix --archive / TRACEVAULT_ARCHIVE_URL"


def _archive(settings: Settings) -> Iterator[Check]:
    try:
        # doctor reads: a typo in the URL must not leave a new empty archive behind
        store = open_store(settings.archive_url, settings, create=False)
    except NotFoundError as exc:
        if not settings.archive_url.startswith("file:"):
            yield Check("archive", "fail", str(exc), _ARCHIVE_FIX)
            return
        # a file archive the archiver has not made yet: nothing in it can be wrong
        yield Check("archive", "warn", str(exc), "start the archiver (it makes the archive), "
                    "or fix --archive / TRACEVAULT_ARCHIVE_URL")  # fmt: skip
        yield Check("archive retention", "ok", "0 runs: no archive yet")
        yield Check("archive holes", "ok", "no archive yet")
        return
    except TraceVaultError as exc:
        yield Check("archive", "fail", str(exc), _ARCHIVE_FIX)
        return
    try:
        yield Check("archive", "ok", f"{settings.archive_url} answers ({settings.lock_mode} locks)")
        runs = retention_report(store, min_days=MIN_RETENTION_DAYS)
        bad = [r for r in runs if r.problems]
        if bad:
            first = bad[0]
            yield Check(
                "archive retention",
                "fail",
                f"{len(bad)} of {len(runs)} runs are flagged (unlocked, retained under "
                f"{MIN_RETENTION_DAYS} days, locks disagreeing with receipts, or objects "
                f"missing); first: run {first.run_id}: {first.problems[0]}",
                "see `tracevault archive retention-report`; extend the objects' retention "
                "(S3: put-object-retention) and find the writer that used a short policy",
            )
        else:
            detail = f"{len(runs)} runs, every object locked >= {MIN_RETENTION_DAYS} days"
            yield Check("archive retention", "ok", detail)
        yield _holes(store)
        yield _index(store)
    except TraceVaultError as exc:
        yield Check("archive", "fail", str(exc), "check the store's credentials and endpoint")
    finally:
        store.close()


def _holes(store: ObjectStore) -> Check:
    """Holes where records were lost before archiving (docs/log.md, "Holes")."""
    lost = [h for i in store.list("holes/") if (h := parse_hole_key(i.key)) and h.kind in LOST]
    if not lost:
        return Check("archive holes", "ok", "no sealed records were lost before archiving")
    leaves = sum(h.end - h.first for h in lost)
    return Check(
        "archive holes",
        "warn",
        f"{len(lost)} hole(s), {leaves} leaves whose sealed records were gone from Kafka before "
        f"the archiver read them; first: {lost[0].key}",
        "read the hole objects (which runs, when, why) and `replay verify` the runs they "
        "name; then keep raw/sealed retention above the archiver's lag (check `kafka "
        "retention`)",
    )


def _index(store: ObjectStore) -> Check:
    """The investigator's index against the archive (docs/index.md): optional, so no index
    is ok; one behind the archive is named with how far."""
    if not index_keys(store, ("runs",)):
        return Check("index", "ok", "no investigator's index (optional: `tracevault index "
                     "rebuild` builds one from the archive)")  # fmt: skip
    lag = index_lag(store)
    if not lag.behind:
        return Check("index", "ok", str(lag))
    return Check(
        "index",
        "warn",
        str(lag),
        "run `tracevault index update` (incremental; e.g. every minute beside the archiver)",
    )


_LAG_CAP = 100_000
#: A topic must keep records this much longer than its reader is behind (a day: an outage
#: of the reader over a weekend night is caught before records expire).
RETENTION_MARGIN_MS = 24 * 3600 * 1000


@dataclass(frozen=True, slots=True)
class Lag:
    check: Check
    behind_ms: int  # age of the oldest record the group has not consumed (0: caught up)


def _members(settings: Settings, group: str) -> int | None:
    """How many consumers the group has now (None: the broker did not say)."""
    try:
        admin = AdminClient(settings.kafka_config(log_level=0))
        (desc,) = [f.result(10) for f in admin.describe_consumer_groups([group]).values()]
        return len(desc.members)
    except (KafkaException, ValueError):
        return None


def _lag(settings: Settings, name: str, group: str, topic: str, partitions: int) -> Lag:
    """Records the group has not consumed yet, counted by reading them (read_committed), and
    the age of the oldest one.

    Offsets alone overstate lag on a transactional topic: every commit leaves a marker that
    takes an offset but is never delivered, so a caught-up archiver would look behind.
    """
    # the group's own id: its committed offsets are what is read (it commits nothing)
    consumer = new_reader(
        settings, "doctor", **{"group.id": group,
                               "client.id": f"tracevault-doctor-{uuid.uuid4().hex[:6]}"}
    )  # fmt: skip
    never = 0
    lag = 0
    oldest: int | None = None  # ms timestamp of the first unconsumed record
    try:
        committed = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], 10)
        start = []
        for tp in committed:
            tpart = TopicPartition(topic, tp.partition)
            low, high = watermarks(consumer, tpart, time.monotonic() + 10)
            if tp.offset < 0:
                never += 1 if high > low else 0
            start.append(TopicPartition(topic, tp.partition, max(tp.offset, low)))
        consumer.assign(start)  # assign, not subscribe: the doctor never joins the group
        open_parts = {tp.partition for tp in start}
        deadline = time.monotonic() + 30
        while open_parts and lag < _LAG_CAP and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    open_parts.discard(msg.partition())
                continue
            if not is_checkpoint_record(msg.headers()):  # the signed log's, not an event
                lag += 1
                _kind, ts = msg.timestamp()
                if ts > 0 and (oldest is None or ts < oldest):
                    oldest = ts
    except KafkaException as exc:
        return Lag(Check(f"{name} lag", "fail", f"cannot read group {group}: {exc}"), 0)
    finally:
        consumer.close()
    behind_ms = 0 if oldest is None else max(0, int(time.time() * 1000) - oldest)
    if lag == 0:
        return Lag(Check(f"{name} lag", "ok", f"group {group} is caught up on {topic}"), 0)
    behind = f"at least {lag}" if lag >= _LAG_CAP or open_parts else str(lag)
    detail = f"group {group} is {behind} records ({behind_ms / 1000:.0f}s) behind on {topic}"
    members = _members(settings, group)
    if members:
        # it runs: behind and running is slow or stuck, and starting another will not help
        return Lag(
            Check(
                f"{name} lag",
                "warn",
                f"{detail}, with {members} consumer(s) in the group: `tracevault {name}` runs "
                "but has not caught up (stuck if this does not fall)",
                f"read its log for ALERT lines (refused checkpoints, holes) and its metrics "
                f"(tracevault_{name}_* on --metrics-port, /healthz); scale it out if it is only "
                "slow",
            ),
            behind_ms,
        )
    fix = (
        f"start `tracevault {name}`"
        if never or members == 0
        else f"check that `tracevault {name}` runs (its log), or scale it out"
    )
    return Lag(
        Check(f"{name} lag", "warn", f"{detail}; no consumer runs in the group", fix), behind_ms
    )


def _retention(report: TopicReport, reader: str, behind_ms: int) -> Check:
    """``retention.ms`` of a topic against how far its reader is behind, plus a margin."""
    name = f"kafka retention {report.role}"
    try:
        keep = int(report.config.get("retention.ms", "-1"))
    except ValueError:
        return Check(
            name, "warn", f"{report.name} has retention.ms={report.config['retention.ms']!r}"
        )
    need = behind_ms + RETENTION_MARGIN_MS
    if keep < 0 or keep >= need:
        kept = "forever" if keep < 0 else f"{keep / 3_600_000:.1f}h"
        return Check(name, "ok", f"{report.name} keeps records {kept}; the {reader} is "
                     f"{behind_ms / 1000:.0f}s behind")  # fmt: skip
    return Check(
        name,
        "fail",
        f"{report.name} keeps records {keep} ms, less than the {reader}'s lag "
        f"({behind_ms} ms) plus a margin of {RETENTION_MARGIN_MS} ms: records expire before "
        f"the {reader} reads them, and the archive gets a hole (lost evidence)",
        f"raise retention.ms of topic {report.name} to at least {need} (e.g. kafka-configs "
        f"--alter --entity-type topics --entity-name {report.name} --add-config "
        f"retention.ms={max(need, 7 * 86_400_000)}), and get the {reader} to catch up",
    )


def _native() -> Check:
    """The C extensions are optional at install time (no compiler, no OpenSSL headers: they
    are skipped) and can be turned off (TRACEVAULT_NO_C), so a slow sequencer or archiver is
    named here rather than found by its lag, and so is the library that computes the C paths'
    SHA-256 (docs/design.md, "Sequencer speed"; docs/log.md, "Archiver speed")."""
    if native.disabled():
        return Check(
            "C paths",
            "warn",
            f"off ({native.NO_C_ENV} is set): the sequencer and archiver run their per-event "
            "paths in Python, at about half their speed",
            f"unset {native.NO_C_ENV} unless you mean to compare the two paths",
        )
    missing = {m: native.status(m) for m in native.EXTENSIONS}
    missing = {m: why for m, why in missing.items() if why != "loaded"}
    if not missing:
        sha = {getattr(native.load(m), "sha256_impl", None) for m in native.EXTENSIONS}
        libs = ", ".join(sorted(s for s in sha if s))
        return Check(
            "C paths",
            "ok",
            f"built: the sequencer's and archiver's per-event paths run in C (SHA-256 from {libs})",
        )
    return Check(
        "C paths",
        "warn",
        f"{'; '.join(f'{m} {why}' for m, why in missing.items())}: the sequencer and archiver "
        "run those paths in Python, at about half their speed",
        "install a C compiler, the Python headers and OpenSSL's (libssl-dev), then reinstall "
        "tracevault",
    )


def run_checks(overrides: dict[str, object]) -> list[Check]:
    """Every check, in order; Kafka checks stop at an unreachable broker."""
    settings, checks = _settings(overrides)
    checks.append(_native())
    broker = _broker(settings)
    checks.append(broker)
    if broker.status == "ok":
        reports = describe_topics(settings)
        checks.extend(_topics(reports))
        by_role = {r.role: r for r in reports}
        groups = {
            "sequencer": (settings.sequencer_group_id, "raw"),
            "archiver": (settings.archiver_group_id, "sealed"),
        }
        for service, (group, role) in groups.items():
            topic = by_role[role]
            if topic.partitions:
                lag = _lag(settings, service, group, topic.name, topic.partitions)
                checks.append(lag.check)
                checks.append(_retention(topic, service, lag.behind_ms))
    checks.extend(_archive(settings))
    return checks
