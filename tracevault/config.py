"""One settings model for every component, read from flags and ``TRACEVAULT_*`` variables.

Frozen and validated at the boundary; unknown keys are refused so a typo in a setting fails
loudly instead of silently running with a default: a ``TRACEVAULT_*`` variable that is neither
a field nor one of :data:`OTHER_VARIABLES` stops :func:`load_settings` with the nearest valid
name (pydantic-settings itself ignores unknown variables under its prefix). ``kafka_config``
is the single explicit translation to librdkafka's dotted keys. Every field is listed in
docs/design.md ("Configuration"); tests/test_docs.py fails when a field is missing there.
"""

from __future__ import annotations

import difflib
import logging
import os
import re
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from tracevault.errors import ConfigError, NotFoundError

__all__ = [
    "MIN_RETENTION_DAYS",
    "OTHER_VARIABLES",
    "Settings",
    "TopicNames",
    "check_environment",
    "load_settings",
]

#: EU AI Act Art. 19(1): logs kept "for a period ... of at least six months".
MIN_RETENTION_DAYS = 183


@dataclass(frozen=True, slots=True)
class TopicNames:
    """The four topics of one deployment, derived from its prefix."""

    prefix: str

    @property
    def raw(self) -> str:
        return f"{self.prefix}.raw"

    @property
    def sealed(self) -> str:
        return f"{self.prefix}.sealed"

    @property
    def heads(self) -> str:
        return f"{self.prefix}.heads"

    @property
    def dlq(self) -> str:
        return f"{self.prefix}.dlq"

    def all(self) -> tuple[str, str, str, str]:
        return (self.raw, self.sealed, self.heads, self.dlq)


class Settings(BaseSettings):
    """Deployment settings. Every field can be set as ``TRACEVAULT_<FIELD>`` or by a CLI flag."""

    model_config = SettingsConfigDict(
        env_prefix="TRACEVAULT_", frozen=True, extra="forbid", validate_default=True
    )

    bootstrap_servers: str = Field(
        default="127.0.0.1:9092", min_length=1, description="Kafka bootstrap servers"
    )
    topic_prefix: str = Field(
        default="agent-traces",
        pattern=r"^[A-Za-z0-9._-]+$",
        description="topics are <prefix>.raw, .sealed, .heads, .dlq",
    )
    partitions: int = Field(default=6, ge=1, le=10_000)
    replication_factor: int = Field(default=1, ge=1, le=32)
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None
    client_id: str = "tracevault"

    archive_url: str = Field(
        default="file://./.tracevault/archive", description="file://PATH or s3://BUCKET/PREFIX"
    )
    s3_endpoint_url: str | None = Field(default=None, description="for MinIO or another S3 store")
    s3_region: str = "us-east-1"
    retention_days: int = Field(default=MIN_RETENTION_DAYS)
    lock_mode: Literal["COMPLIANCE", "GOVERNANCE"] = "COMPLIANCE"
    archive_file_sync: Literal["batch", "object"] = Field(
        default="batch",
        description="file:// only: make a flush's objects durable together with syncfs "
        "(batch), or fsync each object and its name (object: for a file system shared with "
        "heavy writers, whose dirty data a syncfs would wait for too)",
    )
    # The archiver: a segment is closed at run end or when any of these bounds is reached.
    archive_segment_max_events: int = Field(default=10_000, ge=1, le=10_000_000)
    archive_segment_max_bytes: int = Field(
        default=64 * 1024 * 1024, ge=1024, description="uncompressed sealed bytes per segment"
    )
    archive_segment_max_age_s: float = Field(
        default=60.0, gt=0, description="seconds a segment stays open before it is written"
    )
    archive_index: bool = Field(
        default=True,
        description="the archiver writes the investigator's index (index/ in the archive) "
        "with each flush; off: run `tracevault index update` instead (docs/index.md)",
    )
    archive_index_worker: bool = Field(
        default=True,
        description="the index step runs in a child process of the archiver, off its GIL; "
        'off: on the archiver\'s own flush threads (docs/index.md, "Writing")',
    )
    archive_group_id: str | None = Field(
        default=None, description="archiver consumer group [tracevault-archiver.<prefix>]"
    )
    archive_instance_id: str | None = Field(
        default=None,
        description="static group membership: a restarted archiver gets its partitions back "
        "at once instead of after the session timeout",
    )

    archive_session_timeout_ms: int = Field(
        default=10_000,
        ge=1_000,
        le=1_800_000,
        description="archiver consumer group session timeout (as the sequencer's)",
    )
    archive_metrics_port: int | None = Field(
        default=None, ge=0, le=65_535, description="archiver /metrics and /healthz port (off)"
    )
    # Both services (docs/liveness.md): /healthz says 503 after this long without progress
    # while there is work, or without a reachable broker.
    health_stall_s: float = Field(default=60.0, gt=0)

    spool_dir: str = Field(
        default="./.tracevault/spool", description="where the Recorder keeps undelivered events"
    )
    producer_linger_ms: int = Field(
        default=5, ge=0, le=1000, description="how long the Recorder's producer batches events"
    )
    spool_after_ms: int = Field(
        default=5000,
        ge=100,
        description="events the broker has not acknowledged for this long go to the local spool",
    )
    spool_max_age_s: float = Field(
        default=86_400.0,
        gt=0,
        description="a spooled event older than this is refused when the spool drains (moved "
        "to the spool's rejected/ folder and reported): the sequencer forgets finished runs "
        "after a bounded horizon, so a resend may not come later than this",
    )
    model_allow: str = Field(
        default="",
        description="comma-separated model ids a Recorder records although they name no dated "
        "or versioned build (e.g. a local model); see tracevault.model_ids",
    )
    max_payload_bytes: int = Field(
        default=450_000,
        ge=64,
        le=900_000,
        description="largest request or response (canonical JSON bytes) a Recorder accepts; "
        "two must fit Kafka's 1 MB message limit",
    )

    # The signed log (docs/log.md): the sequencer signs a checkpoint per partition per
    # transaction with the log key; the archiver and verify trust only the vkeys listed here.
    log_origin: str = Field(
        default="tracevault",
        pattern=r"^[A-Za-z0-9._/:-]+$",
        description="log name base; each partition's log is <origin>/<prefix>/<partition>",
    )
    log_key: SecretStr | None = Field(
        default=None, description="the log's private key (PRIVATE+KEY+...), for secret managers"
    )
    log_key_file: str | None = Field(
        default=None, description="file (mode 0600) holding the log's private key"
    )
    log_vkeys: str = Field(
        default="",
        description="trusted log verifier keys (name+id+key), comma-separated, or @FILE",
    )

    # Erasure records (docs/confidentiality.md, "Erasure records are signed"): `erase` signs
    # its record with the operator key; verify holds a tracevault-erase run to these vkeys.
    operator_key: SecretStr | None = Field(
        default=None, description="the operator's private key (PRIVATE+KEY+...), signs erasures"
    )
    operator_key_file: str | None = Field(
        default=None, description="file (mode 0600) holding the operator's private key"
    )
    operator_vkeys: str = Field(
        default="",
        description="operator verifier keys trusted to sign erasure records (name+id+key), "
        "comma-separated, or @FILE",
    )

    # Agent identity (docs/identity.md): an agent's Recorder signs its run's chain with the
    # agent key; the sequencer and verify accept only the vkeys listed for the run's agent_id.
    agent_key: SecretStr | None = Field(
        default=None, description="the agent's private key (PRIVATE+KEY+...), for secret managers"
    )
    agent_key_file: str | None = Field(
        default=None, description="file (mode 0600) holding the agent's private key"
    )
    agent_vkeys: str = Field(
        default="",
        description='which agent vkeys may record under which agent_id: JSON {"agent_id": '
        '["name+id+key", ...]}, or @FILE holding it',
    )
    agent_attest_every: int = Field(
        default=64,
        ge=1,
        le=10_000,
        description="a Recorder with an agent key signs its chain at least every this many events",
    )
    agent_attest_interval_s: float = Field(
        default=5.0,
        gt=0,
        description="... and at the first event after this many seconds without a signature",
    )

    # The witness (docs/log.md, "Witness"): its own cosignature/v1 key and its own store.
    witness_key: SecretStr | None = Field(
        default=None, description="the witness's private key (PRIVATE+KEY+...), for secret managers"
    )
    witness_key_file: str | None = Field(
        default=None, description="file (mode 0600) holding the witness's private key"
    )
    witness_store_url: str | None = Field(
        default=None, description="the witness's own store: file:///DIR or s3://BUCKET/PREFIX"
    )
    witness_metrics_port: int | None = Field(
        default=None, ge=0, le=65_535, description="witness /metrics and /healthz port (off)"
    )
    # Read only to prove consistency across a gap in the topic; nothing in it is trusted.
    witness_archive_url: str | None = Field(
        default=None,
        description="archive whose tiles the witness reads to prove across a gap (off)",
    )
    # What a verifier reads: the stores of the witnesses whose cosignatures it wants to count.
    witness_stores: str = Field(
        default="",
        description="witness stores replay verify/export read cosignatures from, comma-separated",
    )

    # Sequencer (tracevault.services.sequencer): one Kafka transaction per batch.
    sequencer_instance_id: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z0-9._-]+$",
        description="stable per instance: transactional id and static group member (host name)",
    )
    sequencer_batch_size: int = Field(default=500, ge=1, le=100_000)
    sequencer_batch_wait_ms: int = Field(
        default=50, ge=1, le=60_000, description="longest wait for a batch to fill"
    )
    sequencer_gap_timeout_s: float = Field(
        default=30.0, gt=0, description="a gap not filled in this time is sealed as GAP markers"
    )
    sequencer_max_gap: int = Field(
        default=10_000, ge=1, description="a seq further than this past the head goes to the DLQ"
    )
    sequencer_transaction_timeout_ms: int = Field(default=60_000, ge=1_000, le=900_000)
    sequencer_session_timeout_ms: int = Field(default=10_000, ge=1_000, le=1_800_000)
    sequencer_metrics_port: int | None = Field(
        default=None, ge=0, le=65_535, description="Prometheus /metrics port (off when unset)"
    )
    # A fleet over six months (docs/fleet.md): state bounded by open runs plus a horizon.
    sequencer_finished_horizon_s: float = Field(
        default=172_800.0,
        gt=0,
        description="a finished run is remembered (resends dropped exactly) this long, then "
        "forgotten; must cover spool_max_age_s plus sequencer_clock_skew_s",
    )
    sequencer_idle_close_s: float = Field(
        default=86_400.0,
        gt=0,
        description="an open run with no event for this long is closed with a sequencer-"
        "written RUN_FINISHED marker (its agent is taken to have died)",
    )
    sequencer_clock_skew_s: float = Field(
        default=300.0,
        ge=0,
        description="tolerance for producers' clocks: an event stamped further in the future "
        "is refused, and the horizon check allows this much",
    )
    # Confidentiality (docs/confidentiality.md): content is encrypted in the Recorder under a
    # data key per run whenever a key provider is set; readers unwrap it through the same.
    key_provider: Literal["none", "keyring", "kms"] = Field(
        default="none",
        description="where the tenants' key-encryption keys live: none (content in clear), "
        "keyring (a 0600 file) or kms (the AWS KMS API)",
    )
    keyring_path: str = Field(
        default="./.tracevault/keyring.json", description="the keyring file (mode 0600)"
    )
    kms_endpoint_url: str | None = Field(
        default=None, description="for a KMS-compatible endpoint other than AWS's"
    )
    kms_region: str = "us-east-1"
    # Bounded KMS calls (docs/confidentiality.md, "Key providers"): a KMS that
    # accepts and never answers fails a run's start within attempts x (connect + read) + backoff.
    kms_connect_timeout_s: float = Field(
        default=2.0, gt=0, le=60, description="seconds to connect to KMS, per attempt"
    )
    kms_read_timeout_s: float = Field(
        default=5.0, gt=0, le=120, description="seconds to wait for KMS's answer, per attempt"
    )
    kms_max_attempts: int = Field(
        default=2, ge=1, le=10, description="attempts per KMS call, the first one included"
    )
    run_key_store: str | None = Field(
        default=None,
        description="where each run's wrapped data key lives, deletable so that one run can "
        "be erased: a directory, or s3://bucket/prefix of a bucket without Object Lock "
        "[the directory run-keys beside the keyring file]",
    )
    redaction_key: SecretStr | None = Field(
        default=None,
        description="the HMAC key of redaction fingerprints: Recorder(redact=...) needs it, "
        "and replay of a redacted run",
    )
    # The desk (docs/desk.md, "Access"): the secret every request to `tracevault ui` carries;
    # required to bind any non-loopback address.
    ui_token: SecretStr | None = Field(
        default=None, description="the bearer token of `tracevault ui` (a long random secret)"
    )
    tenant: str = Field(
        default="default",
        pattern=r"^[A-Za-z0-9_-]{1,64}$",
        description="the tenant whose key wraps the runs recorded here, and whose runs a "
        "reader may open",
    )
    # The C extensions (tracevault/native.py): read from the variable when the modules that
    # use them are imported; a field so that the variable is known and validated.
    no_c: bool = Field(
        default=False,
        description="run the Python paths even where the C extensions are built",
    )

    @model_validator(mode="after")
    def _horizon_covers_spool(self) -> Settings:
        need = self.spool_max_age_s + self.sequencer_clock_skew_s
        if self.sequencer_finished_horizon_s < need:
            raise ValueError(
                f"sequencer_finished_horizon_s={self.sequencer_finished_horizon_s:g} must cover "
                f"spool_max_age_s + sequencer_clock_skew_s = {need:g}: a resend from a spool "
                "must reach the sequencer while it still remembers the finished run"
            )
        return self

    @field_validator("retention_days")
    @classmethod
    def _retention_floor(cls, v: int) -> int:
        if v < MIN_RETENTION_DAYS:
            raise ValueError(
                f"retention_days={v} is under {MIN_RETENTION_DAYS} days; EU AI Act Art. 19 "
                "requires automatically generated logs to be kept for at least six months"
            )
        return v

    @field_validator("model_allow")
    @classmethod
    def _model_ids(cls, v: str) -> str:
        for model in v.split(","):
            if model.strip() and any(c.isspace() for c in model.strip()):
                raise ValueError(f"model id {model.strip()!r} contains white space")
        return v

    @property
    def allowed_models(self) -> frozenset[str]:
        """``model_allow`` as a set of ids (white space around the commas ignored)."""
        return frozenset(m.strip() for m in self.model_allow.split(",") if m.strip())

    @property
    def topics(self) -> TopicNames:
        return TopicNames(self.topic_prefix)

    @property
    def sequencer_group_id(self) -> str:
        """The consumer group every ``tracevault sequencer`` of this deployment joins."""
        return f"{self.topic_prefix}.sequencer"

    @property
    def archiver_group_id(self) -> str:
        """The archiver's consumer group: ``archive_group_id`` or one derived from the prefix."""
        return self.archive_group_id or f"tracevault-archiver.{self.topic_prefix}"

    def missing_topic(self, topic: str) -> NotFoundError:
        """The error for ``topic`` absent from the cluster, naming the bootstrap servers asked:
        a forgotten --bootstrap-servers reaching another broker reads as a missing topic."""
        return NotFoundError(
            f"topic {topic} does not exist on the Kafka cluster at {self.bootstrap_servers} "
            "(the bootstrap servers asked: --bootstrap-servers, TRACEVAULT_BOOTSTRAP_SERVERS); "
            "if that is the wrong cluster, name yours; if not, create the topics with "
            "`tracevault topics create`"
        )

    def kafka_config(self, **overrides: Any) -> dict[str, Any]:
        """librdkafka configuration for any client of this deployment, plus ``overrides``."""
        conf: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap_servers,
            "client.id": self.client_id,
            "security.protocol": self.security_protocol,
        }
        if self.sasl_mechanism:
            conf["sasl.mechanism"] = self.sasl_mechanism
        if self.sasl_username is not None:
            conf["sasl.username"] = self.sasl_username
        if self.sasl_password is not None:
            conf["sasl.password"] = self.sasl_password.get_secret_value()
        # librdkafka's own lines go through logging, deduplicated (KafkaLogDedup), instead of
        # hundreds of raw "%3|...|FAIL|" lines on stderr while a broker is away
        conf["logger"] = KAFKA_LOG
        conf.update(overrides)
        return conf


class KafkaLogDedup(logging.Filter):
    """Passes a librdkafka line once per ``window_s`` per kind of line (its text with the
    numbers taken out: the same refused connection, retried every second, is one line), and
    with the next one that passes says how many like it were held back."""

    def __init__(self, window_s: float = 60.0) -> None:
        super().__init__()
        self.window_s = window_s
        self._seen: dict[str, tuple[float, int]] = {}  # kind -> (last passed, held since)
        self._lock = threading.Lock()  # librdkafka logs from its own threads too

    def filter(self, record: logging.LogRecord) -> bool:
        kind = re.sub(r"\d+", "#", record.getMessage())
        now = time.monotonic()
        with self._lock:
            last, held = self._seen.get(kind, (-self.window_s, 0))
            if now - last < self.window_s:
                self._seen[kind] = (last, held + 1)
                return False
            self._seen[kind] = (now, 0)
            if len(self._seen) > 1000:  # bounded: forget kinds not seen for a window
                self._seen = {k: v for k, v in self._seen.items() if now - v[0] < self.window_s}
        if held:
            record.msg = f"{record.msg} (and {held} more like it in the last %.0fs)"
            record.args = (*(record.args or ()), now - last)
        return True


def kafka_log(name: str) -> logging.Logger:
    """The logger ``name``, for a Kafka client's librdkafka lines: deduplicated by its own
    :class:`KafkaLogDedup` (added once), as every client's must be."""
    log = logging.getLogger(name)
    if not any(isinstance(f, KafkaLogDedup) for f in log.filters):
        log.addFilter(KafkaLogDedup())
    return log


#: The logger every Kafka client of ours hands librdkafka's lines to (kafka_config).
KAFKA_LOG = kafka_log("tracevault.librdkafka")


ENV_PREFIX = "TRACEVAULT_"

#: ``TRACEVAULT_*`` variables that are read, but not as Settings fields. The one list of them:
#: tests/test_settings_env.py fails when the code, dev/, .ci/, bench/ or tests/ read another.
OTHER_VARIABLES = frozenset(
    {
        "TRACEVAULT_KAFKA_HOME",  # dev/kafka: where the broker's jars and run dirs live
        "TRACEVAULT_ARTEFACTS",  # tests/desk: where the browser tests keep their screenshots
        "TRACEVAULT_CHROMIUM",  # tests/desk: the chromium binary (default: chromium on PATH)
        "TRACEVAULT_CI_REPORTS",  # .ci/run: the folder its pytest processes' JUnit reports go to
    }
)


def _known_variables() -> frozenset[str]:
    return frozenset(ENV_PREFIX + name.upper() for name in Settings.model_fields) | OTHER_VARIABLES


def check_environment(environ: Mapping[str, str] | None = None) -> None:
    """Refuse a ``TRACEVAULT_*`` variable no one reads, naming the nearest valid one.

    A typo (``RETENTON_DAYS`` for ``RETENTION_DAYS``) would otherwise leave retention at its
    default without a word.
    """
    env = os.environ if environ is None else environ
    known = _known_variables()
    for name in sorted(env):
        upper = name.upper()
        if not upper.startswith(ENV_PREFIX) or upper in known:
            continue
        # Compared without the prefix they all share, which would make anything look near.
        tails = sorted(k.removeprefix(ENV_PREFIX) for k in known)
        near = difflib.get_close_matches(upper.removeprefix(ENV_PREFIX), tails, n=1, cutoff=0.6)
        hint = (
            f"; did you mean {ENV_PREFIX}{near[0]}?"
            if near
            else " (every setting is listed in docs/design.md, 'Configuration')"
        )
        raise ConfigError(f"unknown setting {name}{hint}")


def load_settings(**values: Any) -> Settings:
    """Settings from the environment, overridden by ``values`` that are not None.

    Refuses unknown ``TRACEVAULT_*`` variables (:func:`check_environment`) and turns
    pydantic's ValidationError into a :class:`ConfigError` naming each bad setting.
    """
    check_environment()
    given = {k: v for k, v in values.items() if v is not None}
    try:
        return Settings(**given)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'settings'}: {e['msg']}" for e in exc.errors()
        )
        raise ConfigError(f"invalid settings: {problems}") from None
