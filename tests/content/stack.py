"""The encrypted pipeline's settings for the content tests: fresh topics on the real broker,
an Object Lock bucket on moto's S3 server, data keys from moto's KMS on the same server."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import boto3

from tests.conftest import unique_name
from tests.content import agents
from tests.replayer.pipeline import record_live
from tracevault.config import Settings
from tracevault.kafka import ensure_topics


def kms_s3_settings(bootstrap: str, endpoint: str, base: Path, stem: str, tenant: str) -> Settings:
    """Settings of a pipeline of its own (topics created), archiving to a new locked bucket."""
    bucket = f"{stem}-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=endpoint).create_bucket(
        Bucket=bucket, ObjectLockEnabledForBucket=True
    )
    settings = Settings(
        bootstrap_servers=bootstrap,
        topic_prefix=unique_name(stem),
        partitions=1,
        archive_url=f"s3://{bucket}/archive",
        s3_endpoint_url=endpoint,
        spool_dir=str(base / "spool"),
        key_provider="kms",
        kms_endpoint_url=endpoint,
        tenant=tenant,
    )
    ensure_topics(settings)
    return settings


def bucket_of(settings: Settings) -> str:
    return settings.archive_url.removeprefix("s3://").split("/")[0]


def record_secret_run(settings: Settings, run_id: str, **recorder: Any) -> None:
    """``agents.secret_agent`` recorded through the real Recorder; it must not raise."""
    out = record_live(
        settings, agents.secret_agent, agents.INPUT, run_id, model=agents.model,
        tools=agents.TOOLS, **recorder,
    )  # fmt: skip
    assert not isinstance(out, BaseException), out
