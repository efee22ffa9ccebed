"""The encrypted pipeline's settings for the content tests: fresh topics on the real broker,
an Object Lock bucket on moto's S3 server, data keys from moto's KMS on the same server, and
each run's wrapped key in a versioned bucket without a lock (the run-key store)."""

from __future__ import annotations

import io
import json
import uuid
from pathlib import Path
from typing import Any

import boto3
import fastavro

from tests.conftest import unique_name
from tests.content import agents
from tests.replayer.pipeline import record_live
from tracevault.config import Settings
from tracevault.kafka import ensure_topics


def kms_s3_settings(bootstrap: str, endpoint: str, base: Path, stem: str, tenant: str) -> Settings:
    """Settings of a pipeline of its own (topics created), archiving to a new locked bucket."""
    bucket = f"{stem}-{uuid.uuid4().hex[:12]}"
    s3 = boto3.client("s3", endpoint_url=endpoint)
    s3.create_bucket(Bucket=bucket, ObjectLockEnabledForBucket=True)
    keys = f"{stem}-keys-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=keys)
    s3.put_bucket_versioning(Bucket=keys, VersioningConfiguration={"Status": "Enabled"})
    settings = Settings(
        bootstrap_servers=bootstrap,
        topic_prefix=unique_name(stem),
        partitions=1,
        archive_url=f"s3://{bucket}/archive",
        s3_endpoint_url=endpoint,
        spool_dir=str(base / "spool"),
        key_provider="kms",
        kms_endpoint_url=endpoint,
        run_key_store=f"s3://{keys}/run-keys",
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


def archive_bytes(endpoint: str, bucket: str) -> bytes:
    """Every version of every object of ``bucket``, with each Avro segment's deflated blocks
    read out too: what a search of the bytes must look through."""
    s3 = boto3.client("s3", endpoint_url=endpoint)
    out = []
    for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket):
        for v in page.get("Versions", []):
            body = s3.get_object(Bucket=bucket, Key=v["Key"], VersionId=v["VersionId"])
            data = body["Body"].read()
            out.append(data)
            if data.startswith(b"Obj\x01"):  # an Avro container: its records, inflated
                for rec in fastavro.reader(io.BytesIO(data)):
                    out.append(json.dumps(rec, default=repr).encode())
                    out += [v for v in rec.values() if isinstance(v, bytes)]
    return b"\n".join(out)


def cli_env(settings: Settings) -> dict[str, str | None]:
    """The CLI's environment for the deployment ``settings`` describe, its keys included."""
    return {
        "TRACEVAULT_BOOTSTRAP_SERVERS": settings.bootstrap_servers,
        "TRACEVAULT_TOPIC_PREFIX": settings.topic_prefix,
        "TRACEVAULT_ARCHIVE_URL": settings.archive_url,
        "TRACEVAULT_S3_ENDPOINT_URL": settings.s3_endpoint_url,
        "TRACEVAULT_SPOOL_DIR": settings.spool_dir,
        "TRACEVAULT_KEY_PROVIDER": settings.key_provider,
        "TRACEVAULT_KEYRING_PATH": settings.keyring_path,
        "TRACEVAULT_KMS_ENDPOINT_URL": settings.kms_endpoint_url,
        "TRACEVAULT_RUN_KEY_STORE": settings.run_key_store,
        "TRACEVAULT_TENANT": settings.tenant,
    }
