"""Archive fixtures: a real S3 endpoint over HTTP (moto's server mode) and both stores.

The moto server is started by the tests themselves on a free loopback port; S3 tests talk to
it through boto3 exactly as they would to AWS or MinIO. Every store test runs against both
``file://`` and ``s3://`` through the parametrized ``store`` fixture (one contract suite).
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import boto3
import pytest

from tracevault.config import Settings
from tracevault.consumer.archive import ObjectStore, open_store

_CREDS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """``http://127.0.0.1:<port>`` of a moto S3 server for this session."""
    from moto.server import ThreadedMotoServer

    for k, v in _CREDS.items():
        os.environ.setdefault(k, v)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


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
