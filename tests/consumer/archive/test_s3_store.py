"""S3 specifics: Object Lock on every PUT, enforced by the server itself, and refused buckets."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import boto3
import pytest
from botocore.exceptions import ClientError

from tracevault.archive import open_store
from tracevault.config import Settings
from tracevault.errors import ConfigError, NotFoundError

FUTURE = datetime.now(UTC) + timedelta(days=183)


def test_a_bucket_without_object_lock_is_refused(
    s3_bucket_factory: Callable[..., str], archive_settings: Settings
) -> None:
    bucket = s3_bucket_factory(lock=False)
    with pytest.raises(ConfigError, match=f"bucket {bucket} has no Object Lock"):
        open_store(f"s3://{bucket}/p", archive_settings)


def test_a_missing_bucket_is_not_found(archive_settings: Settings) -> None:
    with pytest.raises(NotFoundError, match="bucket tv-does-not-exist-0 does not exist"):
        open_store("s3://tv-does-not-exist-0/p", archive_settings)


def test_every_put_is_locked_and_the_server_refuses_deletion(
    s3_bucket_factory: Callable[..., str], archive_settings: Settings, s3_endpoint: str
) -> None:
    bucket = s3_bucket_factory()
    store = open_store(f"s3://{bucket}/deep/prefix", archive_settings)
    store.put("runs/r/seg", b"segment", retain_until=FUTURE)
    raw = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1")
    head = raw.head_object(Bucket=bucket, Key="deep/prefix/runs/r/seg")
    assert head["ObjectLockMode"] == "COMPLIANCE"
    assert abs(head["ObjectLockRetainUntilDate"] - FUTURE) < timedelta(seconds=1)
    # Past our client-side check, straight at the server: Object Lock itself says no.
    with pytest.raises(ClientError, match="AccessDenied"):
        raw.delete_object(Bucket=bucket, Key="deep/prefix/runs/r/seg", VersionId=head["VersionId"])
    assert store.get("runs/r/seg") == b"segment"


def test_governance_mode_is_configurable(
    s3_bucket_factory: Callable[..., str], s3_endpoint: str
) -> None:
    settings = Settings(s3_endpoint_url=s3_endpoint, lock_mode="GOVERNANCE")
    store = open_store(f"s3://{s3_bucket_factory()}", settings)
    store.put("k", b"v", retain_until=FUTURE)
    assert store.head("k").lock_mode == "GOVERNANCE"
    assert store.url.startswith("s3://")
