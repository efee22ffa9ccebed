"""The AWS KMS API as key provider (boto3): a KMS key per tenant and per data subject.

KEKs never leave KMS. A run's data key comes from ``GenerateDataKey`` (AES_256) under the
key aliased ``alias/tracevault/<tenant>`` (or ``.../<tenant>/<subject ref>``), created on
first use with ``CreateKey`` + ``CreateAlias``; it is unwrapped with ``Decrypt``. The
encryption context names tenant, subject and run, so KMS itself refuses a wrapped key
presented for another run or tenant, and CloudTrail logs every unwrap with those names.
Destroying a KEK disables it at once and schedules its deletion (KMS's minimum wait, 7 days;
disabled, it opens nothing from the first second). Access per tenant is IAM's: grant an
investigator ``kms:Decrypt`` on its tenant's aliases only. The endpoint is configurable
(``kms_endpoint_url``) for a KMS-compatible service; the tests use moto's server over HTTP.

Every call is bounded in time: connect and read timeouts and a number of attempts (settings
``kms_connect_timeout_s``, ``kms_read_timeout_s``, ``kms_max_attempts``), so a KMS that
accepts and never answers fails a run's start within attempts x (connect + read) plus
botocore's backoff, naming the endpoint, instead of botocore's 60 s read timeout per attempt
(docs/confidentiality.md, "Key providers"). A tenant's alias is resolved at
every run's start (one ``DescribeKey``), never kept for the process: a tenant key erased or
re-created by another process is seen by the next run, without a restart, even under a
KMS-compatible service that would still generate under a disabled key (moto does); and a
refusal of ``GenerateDataKey`` (the alias moved between the two calls) resolves it once more.
"""

from __future__ import annotations

from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, EndpointConnectionError

from tracevault.content._provider import DATA_KEY_BYTES, KeyProvider
from tracevault.content._wrapped import WrappedKey
from tracevault.errors import ContentKeyError, ServiceUnavailableError

__all__ = ["KmsProvider"]

_PREFIX = "alias/tracevault/"
#: aliases of each tenant's subject-reference HMAC keys: ``<this><tenant>/v<N>``, newest N
_SUBJECTS = "alias/tracevault-subjects/"
_REFUSED = {
    "AccessDeniedException",
    "DisabledException",
    "IncorrectKeyException",
    "InvalidCiphertextException",
    "KMSInvalidStateException",
    "NotFoundException",
}
#: KMS's shortest deletion window (days); the key is disabled at once before it.
PENDING_DAYS = 7


def _alias(tenant: str, subject: str | None) -> str:
    return _PREFIX + tenant + ("" if subject is None else f"/{subject}")


def _context(tenant: str, subject: str | None, context: str) -> dict[str, str]:
    return {
        "tracevault:tenant": tenant,
        "tracevault:subject": subject or "-",
        "tracevault:run": context,
    }


class KmsProvider(KeyProvider):
    """KEKs as KMS keys reached through boto3 (``endpoint_url`` for moto or a compatible KMS)."""

    name = "kms"

    def __init__(
        self,
        *,
        endpoint_url: str | None = None,
        region: str = "us-east-1",
        connect_timeout: float = 2.0,
        read_timeout: float = 5.0,
        max_attempts: int = 2,
    ) -> None:
        self.endpoint_url = endpoint_url
        self._client: Any = boto3.client(
            "kms",
            endpoint_url=endpoint_url,
            region_name=region,
            config=Config(
                retries={"total_max_attempts": max_attempts, "mode": "standard"},
                connect_timeout=connect_timeout,
                read_timeout=read_timeout,
                tcp_keepalive=True,
            ),
        )

    def _where(self) -> str:
        return self.endpoint_url or "AWS KMS"

    def _call(self, what: str, fn: Any, **kw: Any) -> Any:
        try:
            return fn(**kw)
        except (EndpointConnectionError, BotoCoreError) as exc:
            raise ServiceUnavailableError(
                f"KMS at {self._where()} did not answer {what}: {exc}"
            ) from None

    def _key_id(self, tenant: str, subject: str | None, *, create: bool) -> str | None:
        alias = _alias(tenant, subject)
        try:
            meta = self._call("DescribeKey", self._client.describe_key, KeyId=alias)["KeyMetadata"]
            key_id = str(meta["KeyId"])
            if meta.get("KeyState", "Enabled") != "Enabled":
                raise ContentKeyError(
                    f"the KMS key {alias} ({key_id}) is {meta['KeyState']}: tenant "
                    f"{tenant!r} or its subject was erased, and records nothing new under it"
                )
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "NotFoundException":
                raise self._refused(exc, f"alias {alias}") from None
            if not create:
                return None
            key_id = self._create(alias, tenant, subject)
        return key_id

    def _create(self, alias: str, tenant: str, subject: str | None) -> str:
        tags = [{"TagKey": "tracevault:tenant", "TagValue": tenant}]
        if subject is not None:
            tags.append({"TagKey": "tracevault:subject", "TagValue": subject})
        meta = self._call(
            "CreateKey",
            self._client.create_key,
            Description=f"tracevault KEK of {alias.removeprefix(_PREFIX)}",
            KeyUsage="ENCRYPT_DECRYPT",
            KeySpec="SYMMETRIC_DEFAULT",
            Tags=tags,
        )["KeyMetadata"]
        try:
            self._call(
                "CreateAlias", self._client.create_alias, AliasName=alias, TargetKeyId=meta["KeyId"]
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "AlreadyExistsException":
                raise self._refused(exc, f"alias {alias}") from None
            # Another Recorder created it first: use theirs, retire ours.
            self._call("ScheduleKeyDeletion", self._client.schedule_key_deletion,
                       KeyId=meta["KeyId"], PendingWindowInDays=PENDING_DAYS)  # fmt: skip
            return str(
                self._call("DescribeKey", self._client.describe_key, KeyId=alias)["KeyMetadata"][
                    "KeyId"
                ]
            )
        return str(meta["KeyId"])

    def _refused(self, exc: ClientError, what: str) -> ContentKeyError:
        code = exc.response["Error"]["Code"]
        msg = exc.response["Error"].get("Message", "")
        return ContentKeyError(f"KMS at {self._where()} refused {what}: {code} {msg}".rstrip())

    # -- KeyProvider ------------------------------------------------------------------------
    def generate(self, tenant: str, subject: str | None, context: str) -> tuple[bytes, WrappedKey]:
        try:
            return self._generate(tenant, subject, context)
        except ClientError as exc:
            if exc.response["Error"]["Code"] not in _REFUSED:
                raise self._refused(exc, f"a data key of tenant {tenant!r}") from None
        # the alias moved to a re-created key between DescribeKey and GenerateDataKey: once more
        try:
            return self._generate(tenant, subject, context)
        except ClientError as exc:
            raise self._refused(exc, f"a data key of tenant {tenant!r}") from None

    def _generate(self, tenant: str, subject: str | None, context: str) -> tuple[bytes, WrappedKey]:
        key_id = self._key_id(tenant, subject, create=True)
        assert key_id is not None
        out = self._call(
            "GenerateDataKey",
            self._client.generate_data_key,
            KeyId=key_id,
            NumberOfBytes=DATA_KEY_BYTES,
            EncryptionContext=_context(tenant, subject, context),
        )
        return bytes(out["Plaintext"]), WrappedKey(
            self.name, tenant, subject, key_id, bytes(out["CiphertextBlob"])
        )

    def unwrap(self, wrapped: WrappedKey, context: str) -> bytes:
        self._require_enabled(wrapped)
        try:
            out = self._call(
                "Decrypt",
                self._client.decrypt,
                CiphertextBlob=wrapped.blob,
                KeyId=wrapped.kek_id,
                EncryptionContext=_context(wrapped.tenant, wrapped.subject, context),
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] in _REFUSED:
                raise ContentKeyError(
                    f"KMS at {self._where()} will not unwrap the data key of "
                    f"{wrapped.describe()}: {exc.response['Error']['Code']} (no grant for this "
                    "tenant, or its key was destroyed)"
                ) from None
            raise self._refused(exc, f"the data key of {wrapped.describe()}") from None
        return bytes(out["Plaintext"])

    def _require_enabled(self, wrapped: WrappedKey) -> None:
        """Refuse a disabled or deleted KEK before asking KMS to decrypt under it.

        AWS refuses such a Decrypt itself; a KMS-compatible service may not (moto does not),
        and an erased key must open nothing anywhere: fail closed here too.
        """
        try:
            meta = self._call("DescribeKey", self._client.describe_key, KeyId=wrapped.kek_id)[
                "KeyMetadata"
            ]
        except ClientError as exc:
            raise ContentKeyError(
                f"KMS at {self._where()} does not know the key of {wrapped.describe()}: "
                f"{exc.response['Error']['Code']} (no grant for this tenant, or it was deleted)"
            ) from None
        state = meta.get("KeyState", "Enabled" if meta.get("Enabled") else "Disabled")
        if state != "Enabled":
            raise ContentKeyError(
                f"the key of {wrapped.describe()} is {state} in KMS at {self._where()}: its "
                f"content was {self._erasure(wrapped.kek_id)}"
            )

    def _erasure(self, key_id: str) -> str:
        """``erased on WHEN (REASON)`` from the dead key's tags, as far as they are known."""
        try:
            out = self._client.list_resource_tags(KeyId=key_id)
        except (ClientError, BotoCoreError):
            return "erased (the key destroyed)"
        tags = {t["TagKey"]: t["TagValue"] for t in out.get("Tags", [])}
        when = tags.get("tracevault:erased", "an unknown date")
        return f"erased on {when} ({tags.get('tracevault:erased-reason', 'no reason recorded')})"

    # -- subject references: an HMAC_256 KMS key per tenant and version ----------------------
    def _secret_aliases(self, tenant: str) -> list[str]:
        """``alias/tracevault-subjects/<tenant>/v<N>``, newest first."""
        prefix = f"{_SUBJECTS}{tenant}/v"
        try:
            pages = self._client.get_paginator("list_aliases").paginate()
            names = [a["AliasName"] for page in pages for a in page["Aliases"]]
        except (ClientError, BotoCoreError) as exc:
            raise ServiceUnavailableError(
                f"KMS at {self._where()} did not list aliases: {exc}"
            ) from None
        found = [(int(n[len(prefix) :]), n) for n in names if n.startswith(prefix)
                 and n[len(prefix) :].isdigit()]  # fmt: skip
        return [n for _, n in sorted(found, reverse=True)]

    def _new_secret(self, tenant: str, version: int) -> None:
        meta = self._call(
            "CreateKey",
            self._client.create_key,
            Description=f"tracevault subject references of {tenant} (v{version})",
            KeyUsage="GENERATE_VERIFY_MAC",
            KeySpec="HMAC_256",
            Tags=[{"TagKey": "tracevault:tenant", "TagValue": tenant}],
        )["KeyMetadata"]
        try:
            alias = f"{_SUBJECTS}{tenant}/v{version}"
            self._call("CreateAlias", self._client.create_alias,
                       AliasName=alias, TargetKeyId=meta["KeyId"])  # fmt: skip
        except ClientError as exc:  # another process made this version first: use theirs
            if exc.response["Error"]["Code"] != "AlreadyExistsException":
                raise self._refused(exc, f"subject secret v{version} of {tenant!r}") from None
            self._call("ScheduleKeyDeletion", self._client.schedule_key_deletion,
                       KeyId=meta["KeyId"], PendingWindowInDays=PENDING_DAYS)  # fmt: skip

    def subject_secrets(self, tenant: str, *, create: bool) -> list[bytes]:
        """The secrets stay in KMS: what is returned is each HMAC key's MAC of the tenant
        name, a per-version secret derived inside KMS (one GenerateMac per version)."""
        aliases = self._secret_aliases(tenant)
        if not aliases and create:
            self._new_secret(tenant, 1)
            aliases = self._secret_aliases(tenant)
        out = []
        for alias in aliases:
            try:
                mac = self._call("GenerateMac", self._client.generate_mac, KeyId=alias,
                                 Message=f"tracevault/v2/subjects\0{tenant}".encode(),
                                 MacAlgorithm="HMAC_SHA_256")["Mac"]  # fmt: skip
            except ClientError as exc:
                raise self._refused(exc, f"the subject secret {alias}") from None
            out.append(bytes(mac))
        return out

    def rotate_subject_secret(self, tenant: str) -> None:
        aliases = self._secret_aliases(tenant)
        newest = int(aliases[0].rsplit("/v", 1)[1]) if aliases else 0
        self._new_secret(tenant, newest + 1)

    def destroy(self, tenant: str, subject: str | None, *, when: str, reason: str) -> list[str]:
        aliases = [_alias(tenant, subject)]
        if subject is None:  # the tenant and every subject under it
            prefix = _alias(tenant, None) + "/"
            pages = self._client.get_paginator("list_aliases").paginate()
            aliases += [
                a["AliasName"]
                for page in pages
                for a in page["Aliases"]
                if a["AliasName"].startswith(prefix)
            ]
        gone = []
        for alias in aliases:
            try:
                meta = self._call("DescribeKey", self._client.describe_key, KeyId=alias)
            except ClientError:
                continue  # never created: nothing to destroy
            key_id = str(meta["KeyMetadata"]["KeyId"])
            if meta["KeyMetadata"].get("KeyState", "Enabled") != "Enabled":
                continue  # erased before: its tags keep the first erasure's date and reason
            tags = [
                {"TagKey": "tracevault:erased", "TagValue": when},
                {"TagKey": "tracevault:erased-reason", "TagValue": reason[:256] or "-"},
            ]
            self._call("TagResource", self._client.tag_resource, KeyId=key_id, Tags=tags)
            self._call("DisableKey", self._client.disable_key, KeyId=key_id)
            try:
                self._call("ScheduleKeyDeletion", self._client.schedule_key_deletion,
                           KeyId=key_id, PendingWindowInDays=PENDING_DAYS)  # fmt: skip
            except ClientError as exc:
                if exc.response["Error"]["Code"] != "KMSInvalidStateException":  # already pending
                    raise self._refused(exc, f"deleting key {key_id}") from None
            gone.append(key_id)
        return gone
