"""The archive on S3 (moto's server over HTTP, Object Lock on): load, verify, tamper, replay."""

from __future__ import annotations

import uuid

import boto3
import pytest

from tests.replayer import agents
from tests.replayer.archiving import write_run
from tracevault.archive import open_store
from tracevault.archive.layout import segment_key
from tracevault.config import Settings
from tracevault.errors import ChainError
from tracevault.replayer import load_run, replay, verify


@pytest.fixture
def s3_settings(s3_endpoint: str, sealed) -> Settings:
    bucket = f"tv-replay-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=s3_endpoint).create_bucket(
        Bucket=bucket, ObjectLockEnabledForBucket=True
    )
    settings = Settings(archive_url=f"s3://{bucket}/archive", s3_endpoint_url=s3_endpoint)
    store = open_store(settings.archive_url, settings)
    write_run(store, sealed, per_segment=4)
    store.close()
    return settings


def test_a_run_archived_on_s3_verifies_and_replays(s3_settings: Settings) -> None:
    report = verify(load_run(s3_settings, "run-a", source="archive"))
    assert report.finished and report.count == 11 and not report.warnings
    assert replay(report.events, agents.research_agent).matched


def test_a_shadowing_version_on_s3_is_caught(s3_settings: Settings, s3_endpoint: str) -> None:
    # Object Lock protects each version, not the key: a newer version can shadow a segment.
    key = segment_key("run-a", 4, 7)
    bucket = s3_settings.archive_url.removeprefix("s3://").split("/")[0]
    client = boto3.client("s3", endpoint_url=s3_endpoint)
    body = client.get_object(Bucket=bucket, Key=f"archive/{key}")["Body"].read()
    client.put_object(Bucket=bucket, Key=f"archive/{key}", Body=body[:-30])
    with pytest.raises(ChainError) as info:
        verify(load_run(s3_settings, "run-a", source="archive"))
    assert info.value.obj == key and info.value.seq == 4
