"""``open_store``: an archive URL to the backend that serves it.

Apart from :mod:`tracevault.archive._store` so that the backends can import the interface
they implement without an import cycle.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from tracevault.archive._store import ObjectStore
from tracevault.config import Settings, load_settings
from tracevault.errors import ConfigError

__all__ = ["open_store"]


def open_store(url: str, settings: Settings | None = None) -> ObjectStore:
    """The store at ``url``: ``file://PATH`` or ``s3://BUCKET[/PREFIX]``.

    ``settings`` supplies the lock mode and, for S3, the endpoint and region (defaults:
    ``Settings()`` from the environment). An S3 bucket without Object Lock is refused.
    """
    if settings is None:
        settings = load_settings()
    parts = urlsplit(url)
    if parts.scheme == "file":
        from tracevault.archive._filestore import FileStore  # noqa: PLC0415 - only what the URL names

        path = parts.netloc + parts.path
        if not path:
            raise ConfigError(f"archive URL {url!r} has no path; use file:///abs/path")
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
