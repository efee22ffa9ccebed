"""The archive on S3 (moto's server over HTTP, Object Lock on): load, verify, tamper, replay."""

from __future__ import annotations

import uuid

import boto3
import pytest

from tests.conftest import trusted_agents
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
    report = verify(load_run(s3_settings, "run-a", source="archive"), agents=trusted_agents())
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


def _bucket(settings: Settings) -> str:
    return settings.archive_url.removeprefix("s3://").split("/")[0]


def test_a_delete_marker_over_a_locked_segment_is_named_as_tampering(
    s3_settings: Settings, s3_endpoint: str
) -> None:
    # A delete without a version id only hides the locked version: the listing loses the
    # segment, verify reads the original and names the marker.
    key = segment_key("run-a", 4, 7)
    client = boto3.client("s3", endpoint_url=s3_endpoint)
    client.delete_object(Bucket=_bucket(s3_settings), Key=f"archive/{key}")
    with pytest.raises(ChainError, match=r"1 delete marker\(s\).*tampering") as info:
        verify(load_run(s3_settings, "run-a", source="archive"))
    assert info.value.obj == key and info.value.seq == 4
    assert "A0 versions" in str(info.value)


def test_an_identical_later_version_is_still_tampering(
    s3_settings: Settings, s3_endpoint: str
) -> None:
    # Same bytes, new version: nothing in the chain changed, but the lock was side-stepped.
    key = segment_key("run-a", 0, 3)
    client = boto3.client("s3", endpoint_url=s3_endpoint)
    body = client.get_object(Bucket=_bucket(s3_settings), Key=f"archive/{key}")["Body"].read()
    client.put_object(Bucket=_bucket(s3_settings), Key=f"archive/{key}", Body=body)
    with pytest.raises(ChainError, match=r"1 later version\(s\).*tampering") as info:
        verify(load_run(s3_settings, "run-a", source="archive"))
    assert info.value.obj == key


def test_every_run_object_is_read_at_its_original_version(
    s3_settings: Settings, s3_endpoint: str
) -> None:
    store = open_store(s3_settings.archive_url, s3_settings)
    history = store.history("runs/run-a/")
    assert history and all(not v.delete_marker for v in history)
    assert len({v.key for v in history}) == len(history)  # one version each: nothing layered
    store.close()
