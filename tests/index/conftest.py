"""Index fixtures: an archive of the test fleet on file:// and on moto's S3 server."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.index.fleet import archive_fleet
from tests.services.archiver.conftest import archive_settings, s3_bucket_factory  # noqa: F401
from tracevault.archive import ObjectStore, open_store
from tracevault.config import Settings


@pytest.fixture(params=["file", "s3"])
def fleet_store(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    s3_bucket_factory: Callable[..., str],  # noqa: F811
    archive_settings: Settings,  # noqa: F811
) -> Iterator[ObjectStore]:
    """The fleet archived as the archiver archives it, once per backend."""
    if request.param == "file":
        url = f"file://{tmp_path / 'archive'}"
    else:
        url = f"s3://{s3_bucket_factory()}/archive"
    store = open_store(url, archive_settings)
    archive_fleet(store)
    yield store
    store.close()
