"""`verify --from archive` on S3 checks the versions of what it reads, not of the whole log.

Counted on the wire: a boto3 event hook sees every ListObjectVersions request the store sends
to moto's server over HTTP. With many more other runs in the partition's log (archived before
and after, each in its own flush, all in one 256-leaf bundle), verifying one run sends the
same requests: one per object it reads. (A finished run is not tail-scanned; for a run no
index says finished, a log longer by more bundles after it adds one entry bundle per 256
leaves to what verify reads, for the unindexed-tail scan, A4.)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import boto3
import pytest

from tests.services.archiver.sealed_factory import s3_log_among_others
from tracevault.archive._holes import holes_prefix
from tracevault.archive._s3store import S3Store
from tracevault.archive.layout import run_prefix
from tracevault.archive.tlog import checkpoint_prefix, log_prefix
from tracevault.config import Settings
from tracevault.errors import ChainError
from tracevault.replayer.load.archive import load_from_archive
from tracevault.replayer.load.verify import verify
from tracevault.replayer.load.witnessed import _reanchor


@dataclass
class _Wire:
    """What the store asked S3: version listings (prefix, key marker) and the keys it read."""

    listings: list[tuple[str, str]] = field(default_factory=list)
    gets: set[str] = field(default_factory=set)

    def on_params(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        if model.name == "ListObjectVersions":
            self.listings.append((params["Prefix"], params.get("KeyMarker", "")))
        elif model.name == "GetObject":
            self.gets.add(params["Key"])


def _verify_counting(endpoint: str, others: int) -> tuple[_Wire, str]:
    bucket, signer = s3_log_among_others(endpoint, "target", 4, others)
    wire = _Wire()
    counted = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    counted.meta.events.register("provide-client-params.s3.*", wire.on_params)
    store = S3Store(bucket, "archive", client=counted)
    assert verify(load_from_archive(store, "target"), keys=[signer.verifier]).finished
    return wire, "archive/"


def test_version_listings_cover_only_what_verify_reads_and_do_not_grow_with_the_log(
    s3_endpoint: str,
) -> None:
    short, base = _verify_counting(s3_endpoint, 3)
    long, _ = _verify_counting(s3_endpoint, 40)
    log = base + log_prefix("pfx", 0)
    for wire in (short, long):
        prefixes = {p for p, _ in wire.listings}
        assert log not in prefixes  # no listing of the whole partition log
        for prefix, marker in wire.listings:
            if prefix == base + run_prefix("target"):
                continue  # the run's own objects, one listing
            if prefix == base + holes_prefix(log_prefix("pfx", 0)):
                continue  # the partition's holes, one listing (docs/log.md, "Holes")
            if prefix == base + checkpoint_prefix(log_prefix("pfx", 0)):
                assert marker  # only the keys past the newest checkpoint listed
                continue
            assert prefix in wire.gets, prefix  # exactly one object verify reads
    assert len(long.listings) == len(short.listings)


def test_a_newer_checkpoint_hidden_by_a_delete_marker_is_named(s3_endpoint: str) -> None:
    # A listing no longer shows it, and verify no longer lists every version of the log:
    # the listing of the keys past the newest listed checkpoint still finds the marker.
    bucket, _ = s3_log_among_others(s3_endpoint, "target", 4, 2)
    client = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1")
    store = S3Store(bucket, "archive", client=client)
    newest = store.list(checkpoint_prefix(log_prefix("pfx", 0)))[-1].key
    client.delete_object(Bucket=bucket, Key=f"archive/{newest}")  # no version id: a marker
    assert store.list(checkpoint_prefix(log_prefix("pfx", 0)))[-1].key != newest
    with pytest.raises(ChainError, match="A0 versions") as info:
        load_from_archive(store, "target")
    assert info.value.obj == newest


def test_reanchoring_to_a_witnessed_size_reads_the_locked_originals(s3_endpoint: str) -> None:
    # verify --witness-store re-proves the run against the (smaller) size a witness
    # cosigned, reading the log's tiles again: a version layered over one is named as such
    bucket, _ = s3_log_among_others(s3_endpoint, "target", 4, 6)
    raw = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1")
    store = S3Store(bucket, "archive", client=raw)
    run = load_from_archive(store, "target")
    (size,) = {int(k.rsplit("-", 1)[1].split(".")[0]) for k in run.log_index_keys}
    cps = checkpoint_prefix(log_prefix("pfx", 0))
    note = store.get(f"{cps}{size:020d}").decode()
    tiles = [i.key for i in store.list(log_prefix("pfx", 0) + "tile/") if "/entries/" not in i.key]
    for key in tiles:
        raw.put_object(Bucket=bucket, Key="archive/" + key, Body=bytes(32 * 256))
    settings = Settings(s3_endpoint_url=s3_endpoint, archive_url=f"s3://{bucket}/archive")
    with pytest.raises(ChainError, match="A0 versions") as caught:
        _reanchor(settings, run)(size, note)
    assert any(t in str(caught.value) for t in tiles)
