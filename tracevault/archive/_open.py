"""``open_store``: an archive URL to the backend that serves it.

Apart from :mod:`tracevault.archive._store` so that the backends can import the interface
they implement without an import cycle.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

from tracevault.archive._store import ObjectStore
from tracevault.config import Settings, load_settings
from tracevault.errors import ConfigError, NotFoundError

__all__ = ["open_store"]


def open_store(url: str, settings: Settings | None = None, *, create: bool = True) -> ObjectStore:
    """The store at ``url``: ``file://PATH`` or ``s3://BUCKET[/PREFIX]``.

    ``settings`` supplies the lock mode and, for S3, the endpoint and region (defaults:
    ``Settings()`` from the environment). An S3 bucket without Object Lock is refused, and a
    missing bucket is :class:`NotFoundError`. ``create=False`` is the readers' path: only
    writers (the archiver, hold and purge) make a file store, so a typo in a read command's
    URL is "not found" naming the nearest existing directory, never a new empty archive
    that freshness would read as a rollback (docs/design.md, "Archive").
    """
    if settings is None:
        settings = load_settings()
    parts = urlsplit(url)
    if parts.scheme == "file":
        from tracevault.archive._filestore import FileStore  # noqa: PLC0415 - only what the URL names

        path = parts.netloc + parts.path
        if not path:
            raise ConfigError(f"archive URL {url!r} has no path; use file:///abs/path")
        if not create:
            _must_exist(url, Path(path))
        return FileStore(path, lock_mode=settings.lock_mode, sync=settings.archive_file_sync)
    if parts.scheme == "s3":
        # boto3 is imported only when an s3:// archive is used: it is slow to import.
        from tracevault.archive._s3store import S3Store  # noqa: PLC0415

        if not parts.netloc:
            raise ConfigError(f"archive URL {url!r} names no bucket; use s3://BUCKET/PREFIX")
        return S3Store(
            parts.netloc,
            parts.path.strip("/"),
            endpoint_url=settings.s3_endpoint_url,
            region=settings.s3_region,
            lock_mode=settings.lock_mode,
        )
    raise ConfigError(
        f"archive URL {url!r} has scheme {parts.scheme!r}; use file://PATH or s3://BUCKET/PREFIX"
    )


def _must_exist(url: str, path: Path) -> None:
    """Refuse a file store that is not there: no directory, or one no store was made in."""
    root = path.resolve()
    if (root / "store.json").is_file() or (root / "objects").is_dir():
        return
    ancestor = root
    while not ancestor.is_dir() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    what = "is not an archive" if root.is_dir() else "does not exist"
    near = "" if root.is_dir() else f"; the nearest existing directory is {ancestor}"
    raise NotFoundError(
        f"no archive at {url}: {root} {what}{near}. Check the URL (--archive-url, "
        "TRACEVAULT_ARCHIVE_URL); read commands never create an archive"
    )
