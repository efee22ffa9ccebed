"""The run-key store: each run's wrapped data key, where tracevault can delete it.

Crypto-shredding needs the wrapped key of a run somewhere mutable: the topics keep records
30 to 90 days and the archive is under Object Lock, so a key inside a record can only be
erased by destroying the KEK that wraps it, and with it every other run under that KEK.
Here each run has one entry, ``<tenant>/<subject ref or ->/<run id>.json`` (the format-1
attribute: provider, tenant, subject ref, KEK id, wrapped key), written once when the run
starts, before anything of it is published; RUN_STARTED carries only a reference
(docs/confidentiality.md, "Where the keys live").

Erasing deletes the entries (every version of them, on a versioned bucket) and leaves a
tombstone in their place (when, why; no key bytes), so a refused reader is told "erased on
DATE (REASON)". The entry is still wrapped by the tenant's (or subject's) KEK: reading the
store gives nothing without the provider's grant.

- ``file``: a directory on the machine (mode 0700, entries 0600), for the keyring and the
  demo: a file rewritten in place, then unlinked, has no older version to find.
- ``s3://bucket/prefix``: an S3 bucket that must **not** have Object Lock (refused, naming
  the bucket: an entry in it could not be erased); every object version and delete marker of
  an erased entry is deleted.
"""

from __future__ import annotations

import abc
import dataclasses
import json
import os
import stat
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from tracevault.content._wrapped import WrappedKey
from tracevault.errors import ConfigError, ContentKeyError, ServiceUnavailableError

__all__ = ["FileRunKeyStore", "RunKeyStore", "S3RunKeyStore", "entry_name"]


def entry_name(tenant: str, subject: str | None, run_id: str) -> str:
    """The entry of one run (run ids, tenants and subject refs are file- and key-safe)."""
    return f"{tenant}/{subject or '-'}/{run_id}.json"


def _prefix(tenant: str, subject: str | None) -> str:
    return f"{tenant}/" if subject is None else f"{tenant}/{subject}/"


def _tombstone(when: str, reason: str) -> bytes:
    return json.dumps({"v": 1, "erased": when, "reason": reason}, sort_keys=True).encode()


class RunKeyStore(abc.ABC):
    """Where the wrapped data key of every format-2 run lives, and is deleted from."""

    #: where, for messages (a directory or an s3:// URL)
    where: str

    @abc.abstractmethod
    def _put(self, name: str, data: bytes) -> None: ...

    @abc.abstractmethod
    def _get(self, name: str) -> bytes | None: ...

    @abc.abstractmethod
    def _names(self, prefix: str) -> list[str]:
        """Every entry name under ``prefix`` (tombstones included)."""

    @abc.abstractmethod
    def _delete(self, name: str) -> None:
        """Delete ``name`` and every older copy of it."""

    def put(self, run_id: str, wrapped: WrappedKey) -> None:
        """Keep ``run_id``'s wrapped key; ServiceUnavailableError if the store refuses."""
        data = json.dumps({"run": run_id, "key": wrapped.to_attribute()}).encode()
        self._put(entry_name(wrapped.tenant, wrapped.subject, run_id), data)

    def get(self, run_id: str, ref: WrappedKey) -> WrappedKey:
        """The wrapped key a format-2 reference names; ContentKeyError when erased or absent."""
        name = entry_name(ref.tenant, ref.subject, run_id)
        data = self._get(name)
        if data is None:
            raise ContentKeyError(
                f"run {run_id}: the run-key store {self.where} holds no key {name} "
                f"({ref.describe()}): not this run's store, or deleted outside tracevault"
            )
        try:
            o: Any = json.loads(data)
        except ValueError:
            o = None
        if isinstance(o, dict) and "erased" in o:
            raise ContentKeyError(
                f"run {run_id} ({ref.describe()}): its content was erased on "
                f"{o['erased']} ({o.get('reason', 'no reason recorded')})"
            )
        if not isinstance(o, dict) or o.get("run") != run_id or not isinstance(o.get("key"), str):
            raise ContentKeyError(f"run {run_id}: the entry {name} in {self.where} is unreadable")
        wrapped = WrappedKey.from_attribute(o["key"], run_id=run_id)
        if dataclasses.replace(wrapped, blob=b"", stored=True) != ref:
            raise ContentKeyError(
                f"run {run_id}: the entry {name} in {self.where} names another key than the "
                f"run's record ({wrapped.describe()}, not {ref.describe()})"
            )
        return wrapped

    def is_erased(self, run_id: str, ref: WrappedKey) -> bool:
        """True when ``run_id``'s entry is a tombstone (erased before); False otherwise."""
        data = self._get(entry_name(ref.tenant, ref.subject, run_id))
        return data is not None and b'"erased"' in data

    def erase(
        self, tenant: str, subject: str | None, run_id: str | None, *, when: str, reason: str
    ) -> list[str]:
        """Delete the entries of one run, of a subject's runs, or of a tenant's; each gets a
        tombstone. Returns the names deleted (tombstones of earlier erasures are left)."""
        if run_id is not None:
            names = [entry_name(tenant, subject, run_id)]
        else:
            names = self._names(_prefix(tenant, subject))
        gone = []
        for name in names:
            data = self._get(name)
            if data is None or b'"erased"' in data:
                continue
            self._delete(name)
            self._put(name, _tombstone(when, reason))
            gone.append(name)
        return gone


class FileRunKeyStore(RunKeyStore):
    """Entries as files under a directory of the owner's only (0700/0600)."""

    def __init__(self, path: str | Path) -> None:
        self.root = Path(path)
        self.where = str(self.root)

    def _put(self, name: str, data: bytes) -> None:
        target = self.root / name
        try:
            self._private_dirs(target.parent)
            tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, target)
        except OSError as exc:
            raise ServiceUnavailableError(f"run-key store {self.where}: {exc}") from None

    def _private_dirs(self, folder: Path) -> None:
        """``folder`` and every folder between it and the root (the root too), each made
        0700: ``mkdir(parents=True)`` would give the parents the umask's 0755, and the
        tenant and subject names are the store's to hide (docs/confidentiality.md)."""
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        path = self.root
        for part in folder.relative_to(self.root).parts:
            path = path / part
            path.mkdir(mode=0o700, exist_ok=True)

    def _get(self, name: str) -> bytes | None:
        path = self.root / name
        try:
            if stat.S_IMODE(path.stat().st_mode) & 0o077:
                raise ConfigError(f"run-key file {path} is readable by others (chmod 600)")
            return path.read_bytes()
        except FileNotFoundError:
            return None

    def _names(self, prefix: str) -> list[str]:
        base = self.root / prefix
        if not base.is_dir():
            return []
        return sorted(p.relative_to(self.root).as_posix() for p in base.rglob("*.json"))

    def _delete(self, name: str) -> None:
        path = self.root / name
        size = path.stat().st_size
        with open(path, "r+b") as f:  # overwrite first: the unlinked blocks hold no key
            f.write(b"\0" * size)
            f.flush()
            os.fsync(f.fileno())
        path.unlink()


class S3RunKeyStore(RunKeyStore):
    """Entries as objects under ``s3://bucket/prefix`` of a bucket without Object Lock."""

    def __init__(self, url: str, *, endpoint_url: str | None = None) -> None:
        bucket, _, prefix = url.removeprefix("s3://").partition("/")
        self.bucket, self.prefix, self.where = bucket, prefix.strip("/"), url
        self._s3: Any = boto3.client(
            "s3",
            endpoint_url=endpoint_url,
            config=Config(retries={"max_attempts": 3, "mode": "standard"}, connect_timeout=5),
        )
        self._checked = False

    def _key(self, name: str) -> str:
        return f"{self.prefix}/{name}" if self.prefix else name

    def _call(self, what: str, fn: Any, **kw: Any) -> Any:
        try:
            return fn(Bucket=self.bucket, **kw)
        except (BotoCoreError, ClientError) as exc:
            raise ServiceUnavailableError(f"run-key store {self.where}: {what}: {exc}") from None

    def _unlocked(self) -> None:
        """Refuse a bucket with Object Lock: an entry in it could not be erased."""
        if self._checked:
            return
        try:
            self._s3.get_object_lock_configuration(Bucket=self.bucket)
        except ClientError as exc:
            if "ObjectLockConfigurationNotFound" not in exc.response["Error"]["Code"]:
                raise ServiceUnavailableError(f"run-key store {self.where}: {exc}") from None
        except BotoCoreError as exc:
            raise ServiceUnavailableError(f"run-key store {self.where}: {exc}") from None
        else:
            raise ConfigError(
                f"run-key store {self.where}: bucket {self.bucket} has Object Lock, so its keys "
                "could never be erased; give TRACEVAULT_RUN_KEY_STORE a bucket without it"
            )
        self._checked = True

    def _put(self, name: str, data: bytes) -> None:
        self._unlocked()
        self._call("PutObject", self._s3.put_object, Key=self._key(name), Body=data)

    def _get(self, name: str) -> bytes | None:
        try:
            out = self._s3.get_object(Bucket=self.bucket, Key=self._key(name))
        except ClientError as exc:
            if exc.response["Error"]["Code"] in ("NoSuchKey", "404"):
                return None
            raise ServiceUnavailableError(f"run-key store {self.where}: {exc}") from None
        except BotoCoreError as exc:
            raise ServiceUnavailableError(f"run-key store {self.where}: {exc}") from None
        return bytes(out["Body"].read())

    def _names(self, prefix: str) -> list[str]:
        full = self._key(prefix)
        names = []
        for page in self._s3.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=full
        ):
            for o in page.get("Contents", []):
                key = str(o["Key"])
                names.append(key[len(self.prefix) + 1 :] if self.prefix else key)
        return names

    def _delete(self, name: str) -> None:
        key = self._key(name)
        out = self._call("ListObjectVersions", self._s3.list_object_versions, Prefix=key)
        versions = [
            {"Key": v["Key"], "VersionId": v["VersionId"]}
            for group in ("Versions", "DeleteMarkers")
            for v in out.get(group, [])
            if v["Key"] == key
        ]
        for v in versions:  # every version: a versioned bucket keeps the old ones otherwise
            self._call("DeleteObject", self._s3.delete_object, **v)
        if not versions:
            self._call("DeleteObject", self._s3.delete_object, Key=key)
