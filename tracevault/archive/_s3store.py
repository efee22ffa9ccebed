"""``s3://BUCKET/PREFIX``: S3 (or MinIO, or any S3-compatible store) with Object Lock.

Every PUT carries ``ObjectLockMode`` and ``ObjectLockRetainUntilDate`` plus ``Content-MD5``
(S3 requires an integrity header on lock PUTs) and ``If-None-Match: *``, so the store itself
refuses to replace an existing object. Deleting removes the object's versions by version id:
a delete without one would only add a delete marker and leave the locked version in place.
Lock state is read through ``head_object`` (``get_object_retention`` is broken in moto).
"""

from __future__ import annotations

import base64
import hashlib
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import boto3
import botocore
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, ParamValidationError

from tracevault.archive._store import (
    LockMode,
    ObjectInfo,
    ObjectVersion,
    check_deletable,
    check_key,
    utc_now,
)
from tracevault.errors import (
    ArchiveError,
    ConfigError,
    NotFoundError,
    RetentionError,
    ServiceUnavailableError,
)

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

__all__ = ["S3Store"]

log = logging.getLogger(__name__)

_NOT_FOUND = {"404", "NoSuchKey", "NotFound", "NoSuchVersion"}
# entries a page of ``versions``: a key has one version unless tampered with, so the page
# holds it and shows where the next key starts; layers over it take more pages
_VERSIONS_PAGE = 2


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _refused_params(what: str, key: str, exc: ParamValidationError) -> ConfigError:
    """The installed botocore does not know a parameter we send: an install problem.

    Not "did not answer": the request never left this process. Typically an old botocore
    without PutObject's ``IfNoneMatch`` (added in 1.35.2; pyproject.toml sets the floor).
    """
    return ConfigError(
        f"{what} {key}: the installed botocore {botocore.__version__} refused the request "
        f"before sending it ({exc}); tracevault needs boto3/botocore >= 1.35.2 "
        "(pip install -U 'boto3>=1.35.2')"
    )


class S3Store:
    """An S3 bucket (optionally under a key prefix) whose Object Lock enforces retention."""

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint_url: str | None = None,
        region: str = "us-east-1",
        lock_mode: LockMode = "COMPLIANCE",
        client: S3Client | None = None,
    ) -> None:
        self.bucket = bucket
        self.prefix = f"{prefix.strip('/')}/" if prefix.strip("/") else ""
        self._lock_mode: LockMode = lock_mode
        self._client: S3Client = client or boto3.client(
            "s3",
            endpoint_url=endpoint_url,
            region_name=region,
            config=Config(retries={"max_attempts": 5, "mode": "standard"}),
        )
        self._check_bucket()

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"

    @property
    def lock_mode(self) -> LockMode:
        return self._lock_mode

    @contextmanager
    def _transport(self, what: str, key: str) -> Iterator[None]:
        """botocore's own failures (not the store's answers, which are ``ClientError``s and
        differ per call): parameters this botocore refuses, and no answer at all."""
        try:
            yield
        except ParamValidationError as exc:
            raise _refused_params(what, key, exc) from exc
        except BotoCoreError as exc:
            raise ServiceUnavailableError(
                f"object store {self.url} did not answer ({what} {key}): {exc}"
            ) from exc

    def _call(self, what: str, key: str, fn: Any, **kwargs: Any) -> Any:
        with self._transport(what, key):
            try:
                return fn(Bucket=self.bucket, **kwargs)
            except ClientError as exc:
                if _code(exc) in _NOT_FOUND:
                    raise NotFoundError(f"object {key} does not exist in {self.url}") from None
                if _code(exc) in ("AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch"):
                    raise ServiceUnavailableError(
                        f"{what} {key} in {self.url} was refused ({_code(exc)}): check the "
                        "credentials and the bucket policy"
                    ) from exc
                raise ArchiveError(f"{what} {key} in {self.url} failed: {exc}") from exc

    def _check_bucket(self) -> None:
        try:
            conf = self._client.get_object_lock_configuration(Bucket=self.bucket)
        except ClientError as exc:
            code = _code(exc)
            if code == "ObjectLockConfigurationNotFoundError":
                raise ConfigError(
                    f"bucket {self.bucket} has no Object Lock, so retention could not be "
                    "enforced; create the bucket with Object Lock enabled (aws s3api "
                    "create-bucket --object-lock-enabled-for-bucket, or mc mb --with-lock)"
                ) from None
            if code in ("NoSuchBucket", "404"):
                raise NotFoundError(
                    f"bucket {self.bucket} does not exist (archive {self.url}); create it "
                    "with Object Lock enabled, or fix the URL"
                ) from None
            raise ServiceUnavailableError(
                f"cannot read the Object Lock configuration of bucket {self.bucket}: {exc}"
            ) from exc
        except BotoCoreError as exc:
            raise ServiceUnavailableError(
                f"object store for bucket {self.bucket} did not answer: {exc}"
            ) from exc
        if conf.get("ObjectLockConfiguration", {}).get("ObjectLockEnabled") != "Enabled":
            raise ConfigError(
                f"bucket {self.bucket} does not have Object Lock enabled; retention could not "
                "be enforced. Use a bucket created with Object Lock"
            )

    def _k(self, key: str) -> str:
        return self.prefix + check_key(key)

    def put(self, key: str, data: bytes, *, retain_until: datetime) -> None:
        md5 = base64.b64encode(hashlib.md5(data, usedforsecurity=False).digest()).decode()
        # A retain-until not in the future puts the object unlocked: derived objects (the
        # index, docs/index.md "Retention") are rebuildable and may be compacted or replaced.
        lock: dict[str, Any] = {}
        if retain_until > utc_now():
            lock = {
                "ObjectLockMode": self._lock_mode,
                "ObjectLockRetainUntilDate": retain_until.astimezone(UTC),
            }
        with self._transport("PUT", key):
            try:
                self._client.put_object(
                    Bucket=self.bucket,
                    Key=self._k(key),
                    Body=data,
                    ContentMD5=md5,
                    IfNoneMatch="*",
                    Metadata={"sha256": hashlib.sha256(data).hexdigest()},
                    **lock,
                )
            except ClientError as exc:
                if _code(exc) in ("PreconditionFailed", "ConditionalRequestConflict"):
                    existing = self.get(key)
                    if existing != data:
                        raise ArchiveError(
                            f"object {key} already exists in {self.url} with different content "
                            f"({len(existing)} bytes, refused {len(data)} bytes); archive objects "
                            "are never overwritten: investigate which writer produced it"
                        ) from None
                    return
                if _code(exc) == "InvalidRequest":
                    raise ConfigError(
                        f"{self.url} refused a locked PUT of {key} ({exc}); the bucket needs "
                        "Object Lock enabled"
                    ) from exc
                raise ArchiveError(f"PUT {key} to {self.url} failed: {exc}") from exc

    def get(self, key: str, *, version_id: str | None = None) -> bytes:
        extra: dict[str, Any] = {} if version_id is None else {"VersionId": version_id}
        resp = self._call("GET", key, self._client.get_object, Key=self._k(key), **extra)
        body: bytes = resp["Body"].read()
        return body

    @property
    def keeps_versions(self) -> bool:
        return True  # Object Lock requires versioning: a PUT over a key adds a version

    def history(self, prefix: str, *, start_after: str = "") -> list[ObjectVersion]:
        """Every version and delete marker under ``prefix``, each key's original first.

        S3 lists a key's versions newest first, so the original is the last listed version;
        delete markers are listed apart and always follow it. Sorting by Last-Modified would
        not do: it has whole-second resolution, and tampering can land in the same second.
        """
        kwargs: dict[str, Any] = {"Prefix": self.prefix + prefix}
        if start_after:
            kwargs["KeyMarker"] = self.prefix + start_after
        out = self._list_versions(prefix or "(all)", kwargs)
        return [v for v in out if v.key > start_after] if start_after else out

    def versions(self, key: str) -> list[ObjectVersion]:
        """The versions of exactly ``key``: a listing with the key as prefix, a few entries a
        page, stopped at the first other key (``tile/0/000`` is also the prefix of its
        partial tiles ``tile/0/000.p/<W>``, which sort after it)."""
        kwargs: dict[str, Any] = {"Prefix": self._k(key), "MaxKeys": _VERSIONS_PAGE}
        return [v for v in self._list_versions(key, kwargs, only=key) if v.key == key]

    def _list_versions(
        self, what: str, kwargs: dict[str, Any], only: str | None = None
    ) -> list[ObjectVersion]:
        cut = len(self.prefix)
        versions: dict[str, list[ObjectVersion]] = {}
        markers: dict[str, list[ObjectVersion]] = {}
        while True:
            resp = self._call("LIST VERSIONS", what, self._client.list_object_versions, **kwargs)
            seen: set[str] = set()
            for v in resp.get("Versions", []):
                key = v["Key"][cut:]
                seen.add(key)
                versions.setdefault(key, []).append(
                    ObjectVersion(key, v["VersionId"], False, int(v["Size"]), v["LastModified"])
                )
            for m in resp.get("DeleteMarkers", []):
                key = m["Key"][cut:]
                seen.add(key)
                markers.setdefault(key, []).append(
                    ObjectVersion(key, m["VersionId"], True, 0, m["LastModified"])
                )
            if not resp.get("IsTruncated") or (only is not None and seen - {only}):
                break  # keys come sorted: once another key shows, ``only`` is complete
            kwargs["KeyMarker"] = resp.get("NextKeyMarker")
            kwargs["VersionIdMarker"] = resp.get("NextVersionIdMarker")
        out: list[ObjectVersion] = []
        for key in sorted(versions.keys() | markers.keys()):
            out.extend(reversed(versions.get(key, [])))
            out.extend(sorted(markers.get(key, []), key=lambda m: m.last_modified or 0))
        return out

    def list(self, prefix: str) -> list[ObjectInfo]:
        out: list[ObjectInfo] = []
        token: str | None = None
        cut = len(self.prefix)
        while True:
            kwargs: dict[str, Any] = {"Prefix": self.prefix + prefix}
            if token:
                kwargs["ContinuationToken"] = token
            resp = self._call("LIST", prefix or "(all)", self._client.list_objects_v2, **kwargs)
            out.extend(ObjectInfo(o["Key"][cut:], int(o["Size"])) for o in resp.get("Contents", []))
            if not resp.get("IsTruncated"):
                break
            token = resp.get("NextContinuationToken")
        out.sort(key=lambda i: i.key)
        return out

    def head(self, key: str) -> ObjectInfo:
        resp = self._call("HEAD", key, self._client.head_object, Key=self._k(key))
        until = resp.get("ObjectLockRetainUntilDate")
        return ObjectInfo(
            key,
            int(resp["ContentLength"]),
            resp.get("ObjectLockMode"),
            until.astimezone(UTC) if until is not None else None,
            resp.get("ObjectLockLegalHoldStatus") == "ON",
            resp["LastModified"].astimezone(UTC) if "LastModified" in resp else None,
        )

    def delete(self, key: str, *, now: datetime | None = None) -> None:
        check_deletable(self.head(key), now)
        full = self._k(key)
        resp = self._call("LIST VERSIONS", key, self._client.list_object_versions, Prefix=full)
        versions = [
            v["VersionId"]
            for v in [*resp.get("Versions", []), *resp.get("DeleteMarkers", [])]
            if v["Key"] == full
        ]
        for vid in versions:
            with self._transport("DELETE", key):
                try:
                    self._client.delete_object(Bucket=self.bucket, Key=full, VersionId=vid)
                except ClientError as exc:
                    if _code(exc) == "AccessDenied":
                        raise RetentionError(
                            f"{self.url} refused to delete {key} (version {vid}): its Object "
                            "Lock is still in force by the store's clock"
                        ) from None
                    raise ArchiveError(f"DELETE {key} from {self.url} failed: {exc}") from exc
        log.info("deleted %s (%d versions) from %s", key, len(versions), self.url)

    def set_legal_hold(self, key: str, on: bool) -> None:
        """Hold (or release) every version of ``key``, the locked original first.

        A hold by key alone lands on the latest version: where someone layered a new
        version over an archived object, the original (the evidence) would stay unheld.
        The layered version is held too, as evidence of the tampering."""
        found = [v for v in self.versions(key) if not v.delete_marker]
        if not found:  # a clear NotFoundError (moto answers 500 for a missing key)
            raise NotFoundError(f"object {key} does not exist in {self.url}")
        for v in found:
            self._call(
                "LEGAL HOLD",
                key,
                self._client.put_object_legal_hold,
                Key=self._k(key),
                VersionId=v.version_id,
                LegalHold={"Status": "ON" if on else "OFF"},
            )

    def close(self) -> None:
        self._client.close()
