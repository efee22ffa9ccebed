"""S3 specifics: Object Lock on every PUT, enforced by the server itself, and refused buckets."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

import boto3
import pytest
from botocore.exceptions import ClientError

from tracevault.archive import open_store
from tracevault.config import Settings
from tracevault.errors import ConfigError, NotFoundError


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
    future: datetime,
    s3_bucket_factory: Callable[..., str],
    archive_settings: Settings,
    s3_endpoint: str,
) -> None:
    bucket = s3_bucket_factory()
    store = open_store(f"s3://{bucket}/deep/prefix", archive_settings)
    store.put("runs/r/seg", b"segment", retain_until=future)
    raw = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1")
    head = raw.head_object(Bucket=bucket, Key="deep/prefix/runs/r/seg")
    assert head["ObjectLockMode"] == "COMPLIANCE"
    assert abs(head["ObjectLockRetainUntilDate"] - future) < timedelta(seconds=1)
    # Past our client-side check, straight at the server: Object Lock itself says no.
    with pytest.raises(ClientError, match="AccessDenied"):
        raw.delete_object(Bucket=bucket, Key="deep/prefix/runs/r/seg", VersionId=head["VersionId"])
    assert store.get("runs/r/seg") == b"segment"


def test_a_hold_covers_the_original_under_a_layered_version(
    future: datetime,
    s3_bucket_factory: Callable[..., str],
    archive_settings: Settings,
    s3_endpoint: str,
) -> None:
    bucket = s3_bucket_factory()
    store = open_store(f"s3://{bucket}/p", archive_settings)
    store.put("runs/r/log-0-1.json", b"original", retain_until=future)
    raw = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1")
    raw.put_object(Bucket=bucket, Key="p/runs/r/log-0-1.json", Body=b"layered over it")
    versions = raw.list_object_versions(Bucket=bucket, Prefix="p/runs/r/log-0-1.json")
    ids = {v["VersionId"]: v["IsLatest"] for v in versions["Versions"]}
    assert len(ids) == 2

    store.set_legal_hold("runs/r/log-0-1.json", True)

    def held(vid: str) -> str:
        got = raw.get_object_legal_hold(Bucket=bucket, Key="p/runs/r/log-0-1.json", VersionId=vid)
        return str(got["LegalHold"]["Status"])

    assert {held(vid) for vid in ids} == {"ON"}  # the original too, not only the latest
    store.set_legal_hold("runs/r/log-0-1.json", False)
    assert {held(vid) for vid in ids} == {"OFF"}


def test_governance_mode_is_configurable(
    future: datetime, s3_bucket_factory: Callable[..., str], s3_endpoint: str
) -> None:
    settings = Settings(s3_endpoint_url=s3_endpoint, lock_mode="GOVERNANCE")
    store = open_store(f"s3://{s3_bucket_factory()}", settings)
    store.put("k", b"v", retain_until=future)
    assert store.head("k").lock_mode == "GOVERNANCE"
    assert store.url.startswith("s3://")


def test_a_botocore_that_does_not_know_a_parameter_is_a_config_error_not_did_not_answer(
    future: datetime, s3_bucket_factory: Callable[..., str], s3_endpoint: str
) -> None:
    # botocore < 1.35.2 has no IfNoneMatch on PutObject: its client refuses the PUT before
    # sending it. Reproduce that with this botocore by taking the member out of the model.
    from tracevault.archive._s3store import S3Store

    client = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1")
    members = client.meta.service_model.operation_model("PutObject").input_shape.members
    saved = members.pop("IfNoneMatch")
    try:
        store = S3Store(s3_bucket_factory(), "p", client=client)
        refused = r"(?s)botocore .* refused .*IfNoneMatch.*>= 1\.35\.2"
        with pytest.raises(ConfigError, match=refused):
            store.put("k", b"v", retain_until=future)
    finally:
        members["IfNoneMatch"] = saved  # the model may be shared with other clients
        client.close()


def test_the_declared_boto3_floor_knows_if_none_match() -> None:
    # IfNoneMatch on PutObject first appears in botocore 1.35.2 (boto3 1.35.2 requires it);
    # checked by installing 1.35.1 and 1.35.2 and reading the PutObject input shape.
    import re
    import tomllib
    from pathlib import Path

    pyproject = tomllib.loads((Path(__file__).parents[3] / "pyproject.toml").read_text())
    (spec,) = [d for d in pyproject["project"]["dependencies"] if d.startswith("boto3")]
    match = re.search(r">=\s*([0-9.]+)", spec)
    assert match is not None, spec
    floor = tuple(int(p) for p in match.group(1).split("."))
    assert floor >= (1, 35, 2), spec


def test_history_puts_the_locked_original_first_then_what_was_layered_over_it(
    future: datetime,
    s3_bucket_factory: Callable[..., str],
    archive_settings: Settings,
    s3_endpoint: str,
) -> None:
    bucket = s3_bucket_factory()
    store = open_store(f"s3://{bucket}/p", archive_settings)
    store.put("runs/r/seg", b"original", retain_until=future)
    raw = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1")
    raw.put_object(Bucket=bucket, Key="p/runs/r/seg", Body=b"forged")  # bypasses IfNoneMatch
    raw.delete_object(Bucket=bucket, Key="p/runs/r/seg")  # no version id: a delete marker
    assert store.list("runs/") == []  # what a plain reader sees
    first, later, marker = store.history("runs/")
    assert (first.key, first.delete_marker, later.delete_marker, marker.delete_marker) == (
        "runs/r/seg",
        False,
        False,
        True,
    )
    assert store.get("runs/r/seg", version_id=first.version_id) == b"original"
    assert store.get("runs/r/seg", version_id=later.version_id) == b"forged"
    # the same, for exactly that key, also when its layers span pages of the listing
    for n in range(10):
        raw.put_object(Bucket=bucket, Key="p/runs/r/seg", Body=b"again %d" % n)
    store.put("runs/r/seg.p/1", b"a sibling key", retain_until=future)
    versions = store.versions("runs/r/seg")
    assert len(versions) == 13 and {v.key for v in versions} == {"runs/r/seg"}
    assert store.get("runs/r/seg", version_id=versions[0].version_id) == b"original"
