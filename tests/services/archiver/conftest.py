"""Archive fixtures: buckets on the session's moto S3 endpoint (``s3_endpoint`` in
tests/conftest.py) and both stores. Every store test runs against both ``file://`` and
``s3://`` through the parametrized ``store`` fixture (one contract suite).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import boto3
import pytest

from tracevault.archive import ObjectStore, open_store
from tracevault.config import Settings


@pytest.fixture
def s3_bucket_factory(s3_endpoint: str) -> Callable[..., str]:
    """Create a uniquely named bucket (Object Lock on unless ``lock=False``)."""
    client = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1")

    def make(lock: bool = True) -> str:
        name = f"tv-{uuid.uuid4().hex[:16]}"
        if lock:
            client.create_bucket(Bucket=name, ObjectLockEnabledForBucket=True)
        else:
            client.create_bucket(Bucket=name)
        return name

    return make


@pytest.fixture
def archive_settings(s3_endpoint: str) -> Settings:
    return Settings(s3_endpoint_url=s3_endpoint)


@pytest.fixture(params=["file", "s3"])
def store(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    s3_bucket_factory: Callable[..., str],
    archive_settings: Settings,
) -> Iterator[ObjectStore]:
    """The same contract, once per backend."""
    if request.param == "file":
        url = f"file://{tmp_path / 'archive'}"
    else:
        url = f"s3://{s3_bucket_factory()}/archive"
    s = open_store(url, archive_settings)
    yield s
    s.close()


@pytest.fixture
def future() -> datetime:
    """183 days from when the test starts: a lock in force, taken per test rather than at
    import, since a suite under load runs a module's tests many minutes after importing it."""
    return datetime.now(UTC) + timedelta(days=183)
