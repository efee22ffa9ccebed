"""The run-key store's contract, run against both backends: a directory, and an S3 bucket on
moto's server over HTTP (versioned, so erasing must delete every version).

Each must: give back the entry a run's reference names, and refuse one that names another
key or run; erase one run, a subject's runs or a tenant's, leaving a tombstone that says
when and why, and no copy of the wrapped key in any version; refuse (fail closed) a place
where erasure could not work: an S3 bucket under Object Lock, a file others can read.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import uuid
from collections.abc import Callable
from pathlib import Path

import boto3
import pytest

from tests.content.stack import archive_bytes
from tracevault.content import (
    FileRunKeyStore,
    RunKeyStore,
    S3RunKeyStore,
    WrappedKey,
    unkeyed_subject_ref,
)
from tracevault.errors import ConfigError, ContentKeyError

WHEN = "2026-12-01T18:00:00Z"


@dataclasses.dataclass
class Backend:
    store: RunKeyStore
    everything: Callable[[], bytes]  # every byte the backend holds, every version


@pytest.fixture(params=["file", "s3"])
def backend(request: pytest.FixtureRequest, s3_endpoint: str, tmp_path: Path) -> Backend:
    if request.param == "file":
        root = tmp_path / "run-keys"
        return Backend(
            FileRunKeyStore(root),
            lambda: b"\n".join(p.read_bytes() for p in root.rglob("*") if p.is_file()),
        )
    bucket = f"tv-keys-{uuid.uuid4().hex[:12]}"
    s3 = boto3.client("s3", endpoint_url=s3_endpoint)
    s3.create_bucket(Bucket=bucket)
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    store = S3RunKeyStore(f"s3://{bucket}/keys", endpoint_url=s3_endpoint)
    return Backend(store, lambda: archive_bytes(s3_endpoint, bucket))


def _wrapped(tenant: str, subject: str | None = None) -> WrappedKey:
    return WrappedKey("keyring", tenant, subject, f"{tenant}#k", os.urandom(60))


def _ref(w: WrappedKey) -> WrappedKey:
    return dataclasses.replace(w, blob=b"", stored=True)


def test_an_entry_comes_back_for_its_run_only(backend: Backend) -> None:
    store, w = backend.store, _wrapped("t1")
    store.put("run-1", w)
    store.put("run-1", w)  # written again (a retried start): still one usable entry
    assert store.get("run-1", _ref(w)) == w
    with pytest.raises(ContentKeyError, match="holds no key"):
        store.get("run-2", _ref(w))
    with pytest.raises(ContentKeyError, match="names another key"):
        store.get("run-1", dataclasses.replace(_ref(w), kek_id="t1#other"))


def test_erasing_a_run_leaves_a_tombstone_and_no_version_of_the_key(backend: Backend) -> None:
    store, w, kept = backend.store, _wrapped("t2"), _wrapped("t2")
    store.put("gone", w)
    store.put("gone", w)  # two versions on a versioned bucket
    store.put("kept", kept)
    assert store.erase("t2", None, "gone", when=WHEN, reason="card by mistake") == [
        "t2/-/gone.json"
    ]
    with pytest.raises(ContentKeyError, match=rf"erased on {WHEN} \(card by mistake\)"):
        store.get("gone", _ref(w))
    held = backend.everything()
    assert base64.b64encode(w.blob) not in held and w.blob not in held
    assert base64.b64encode(kept.blob) in held  # the search finds what is there
    assert store.get("kept", _ref(kept)) == kept
    # erased before: nothing more to do, the first erasure's date and reason stay
    assert store.erase("t2", None, "gone", when="later", reason="again") == []
    with pytest.raises(ContentKeyError, match=rf"erased on {WHEN}"):
        store.get("gone", _ref(w))


def test_erasing_a_subject_or_a_tenant_takes_all_of_their_runs(backend: Backend) -> None:
    store = backend.store
    ref = unkeyed_subject_ref("t3", "customer-1")
    s1, s2, t, other = _wrapped("t3", ref), _wrapped("t3", ref), _wrapped("t3"), _wrapped("t4")
    for run, w in (("s1", s1), ("s2", s2), ("t", t), ("o", other)):
        store.put(run, w)
    gone = store.erase("t3", ref, None, when=WHEN, reason="Art. 17")
    assert sorted(gone) == [f"t3/{ref}/s1.json", f"t3/{ref}/s2.json"]
    assert store.get("t", _ref(t)) == t
    assert store.erase("t3", None, None, when=WHEN, reason="offboarded") == ["t3/-/t.json"]
    held = backend.everything()
    for w in (s1, s2, t):
        assert base64.b64encode(w.blob) not in held
    assert store.get("o", _ref(other)) == other  # another tenant is untouched


def test_a_bucket_under_object_lock_is_refused(s3_endpoint: str) -> None:
    bucket = f"tv-locked-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=s3_endpoint).create_bucket(
        Bucket=bucket, ObjectLockEnabledForBucket=True
    )
    store = S3RunKeyStore(f"s3://{bucket}/keys", endpoint_url=s3_endpoint)
    with pytest.raises(ConfigError, match=rf"bucket {bucket} has Object Lock"):
        store.put("r", _wrapped("t5"))
    listed = boto3.client("s3", endpoint_url=s3_endpoint).list_objects_v2(Bucket=bucket)
    assert listed.get("KeyCount", 0) == 0  # nothing was written where it could not be erased


def test_a_run_key_file_others_can_read_is_refused(tmp_path: Path) -> None:
    store, w = FileRunKeyStore(tmp_path / "rk"), _wrapped("t6")
    store.put("r", w)
    entry = tmp_path / "rk" / "t6" / "-" / "r.json"
    assert entry.stat().st_mode & 0o077 == 0
    assert json.loads(entry.read_bytes())["run"] == "r"
    entry.chmod(0o644)
    with pytest.raises(ConfigError, match="chmod 600"):
        store.get("r", _ref(w))


def test_the_store_and_every_folder_in_it_are_the_owners_only(tmp_path: Path) -> None:
    # run-keys/, run-keys/<tenant>/ and run-keys/<tenant>/<subject>/ are 0700 (docs say so):
    # mkdir(parents=True) made the parents 0755, listing tenants and subjects to anyone
    old = os.umask(0o022)
    try:
        FileRunKeyStore(tmp_path / "rk").put("r", _wrapped("t7", unkeyed_subject_ref("t7", "s")))
    finally:
        os.umask(old)
    folders = [tmp_path / "rk", *(p for p in (tmp_path / "rk").rglob("*") if p.is_dir())]
    assert len(folders) == 3
    for folder in folders:
        assert folder.stat().st_mode & 0o777 == 0o700, folder
