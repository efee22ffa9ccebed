"""The object-store interface every archive backend implements, and ``open_store``.

The archive's guarantees live in this contract, not in the archiver: an object, once written,
is never overwritten (the same bytes again is a no-op, different bytes an error), and nothing
is deleted before its retain-until or while it is under legal hold. ``file://`` enforces this
itself; ``s3://`` lets S3 Object Lock enforce it and checks the same rules client-side first,
so both backends refuse with the same errors (one contract test suite runs against both).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal, Protocol, runtime_checkable

from tracevault.errors import ConfigError, RetentionError

__all__ = [
    "LockMode",
    "ObjectInfo",
    "ObjectStore",
    "ObjectVersion",
    "check_deletable",
    "check_key",
    "utc_now",
]

LockMode = Literal["COMPLIANCE", "GOVERNANCE"]

#: ``=`` is allowed for the index's Hive partitions (``index/runs/day=2026-01-31/``; docs/index.md)
_KEY_PART = re.compile(r"^[A-Za-z0-9%._~=-]+$")


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    """What a store knows about one object.

    ``list`` fills ``key`` and ``size`` only (a listing does not carry lock state on S3);
    ``head`` fills everything, ``last_modified`` being when the object was written.
    ``lock_mode``/``retain_until`` None after ``head`` mean the object is *not* locked, which
    the retention report flags.
    """

    key: str
    size: int
    lock_mode: str | None = None
    retain_until: datetime | None = None
    legal_hold: bool | None = None
    last_modified: datetime | None = None

    def expired(self, now: datetime) -> bool:
        """True when retain-until has passed at ``now`` (an unlocked object is expired)."""
        return self.retain_until is None or now >= self.retain_until


@dataclass(frozen=True, slots=True)
class ObjectVersion:
    """One version of one key, as ``history`` lists it.

    On S3 (versioned, as Object Lock requires) a key can gain versions after it was written:
    a later PUT that bypassed our client, or a delete marker from a delete without a version
    id. The *first* version is the original the archiver wrote and Object Lock protects;
    anything after it is tampering (docs/design.md, "Archive"). ``file://`` has exactly one
    version per object (``version_id`` None).
    """

    key: str
    version_id: str | None
    delete_marker: bool
    size: int
    last_modified: datetime | None = None


@runtime_checkable
class ObjectStore(Protocol):
    """A write-once, retention-enforcing object store. Keys are ``/``-separated paths."""

    @property
    def url(self) -> str:
        """Where the store lives (``file:///...`` or ``s3://bucket/prefix``)."""
        ...

    @property
    def lock_mode(self) -> LockMode:
        """The lock mode every ``put`` applies."""
        ...

    def put(self, key: str, data: bytes, *, retain_until: datetime) -> None:
        """Write ``data`` under ``key``, locked until ``retain_until``, durably.

        The object appears whole or not at all. If ``key`` already holds the same bytes this
        is a no-op (the existing lock is kept); different bytes raise ``ArchiveError``.
        """
        ...

    def get(self, key: str, *, version_id: str | None = None) -> bytes:
        """The object's bytes (of ``version_id`` if given); ``NotFoundError`` naming ``key``."""
        ...

    @property
    def keeps_versions(self) -> bool:
        """True when a key can gain versions after it is written (S3 with versioning).

        A reader checks for later versions (check A0) only where there can be any: on a
        store that keeps one version per key the check costs reads and finds nothing."""
        ...

    def history(self, prefix: str, *, start_after: str = "") -> list[ObjectVersion]:
        """Every version and delete marker under ``prefix``: by key, each key's original first.

        ``list`` shows what a reader sees now; ``history`` shows what was ever written, so a
        verifier can read the locked original and name what was layered over it.
        ``start_after``: only keys after it (a reader that listed a prefix asks only whether
        a key beyond the newest it saw hides under a delete marker).
        """
        ...

    def versions(self, key: str) -> list[ObjectVersion]:
        """Every version and delete marker of exactly ``key``, its original first ([] if none).

        One small listing per key: a verifier checks the objects it reads, so its cost does
        not grow with everything else under the same prefix (docs/log.md, "Archive").
        """
        ...

    def list(self, prefix: str) -> list[ObjectInfo]:
        """Every object whose key starts with ``prefix``, sorted by key (one listing)."""
        ...

    def head(self, key: str) -> ObjectInfo:
        """Size, lock mode, retain-until and legal hold of ``key``; ``NotFoundError`` if none."""
        ...

    def delete(self, key: str, *, now: datetime | None = None) -> None:
        """Remove ``key`` for good; ``RetentionError`` before retain-until or under hold.

        ``now`` (default: the wall clock) is injectable so purge after expiry is testable;
        on S3 the store's own clock still has the last word.
        """
        ...

    def set_legal_hold(self, key: str, on: bool) -> None:
        """Place (``on=True``) or clear a legal hold: a held object cannot be deleted."""
        ...

    def close(self) -> None:
        """Release connections; the store is unusable afterwards."""
        ...


def check_key(key: str) -> str:
    """``key`` if it is a safe relative ``/`` path; ``ConfigError`` otherwise.

    The same rule on both backends keeps an archive portable between them.
    """
    parts = key.split("/")
    if not key or any(not p or p in (".", "..") or not _KEY_PART.match(p) for p in parts):
        raise ConfigError(
            f"object key {key!r} is not a relative path of [A-Za-z0-9%._~=-] segments; "
            "derive keys with tracevault.archive.layout"
        )
    return key


def utc_now() -> datetime:
    return datetime.now(UTC)


def check_deletable(info: ObjectInfo, now: datetime | None) -> None:
    """Raise ``RetentionError`` unless ``info`` may be deleted at ``now``."""
    at = now or utc_now()
    if info.legal_hold:
        raise RetentionError(
            f"object {info.key} is under legal hold and cannot be deleted; release the hold "
            "first (tracevault archive release RUN_ID) if the matter is closed"
        )
    if info.retain_until is not None and at < info.retain_until:
        raise RetentionError(
            f"object {info.key} is retained until {info.retain_until.isoformat()} "
            f"({info.lock_mode or 'locked'}); it cannot be deleted at {at.isoformat()}"
        )
