"""The key providers behind one interface: moto's KMS server over HTTP, and the keyring file.

Each provider must: hand out a fresh data key per run and unwrap it again for that run only;
keep tenants (and subjects) apart; refuse after its KEK is destroyed, for reading and for
recording; and (the keyring) refuse a file others can read.
"""

from __future__ import annotations

import dataclasses
import json
import os
import uuid
from collections.abc import Callable
from pathlib import Path

import boto3
import pytest

from tracevault.content import KeyProvider, KeyringProvider, KmsProvider, unkeyed_subject_ref
from tracevault.errors import ConfigError, ContentKeyError

MakeProvider = Callable[[], KeyProvider]
WHEN = "2026-12-01T18:00:00Z"


@pytest.fixture(params=["kms", "keyring"])
def make_provider(request: pytest.FixtureRequest, s3_endpoint: str, tmp_path: Path) -> MakeProvider:
    """A factory of providers sharing one store: one moto server, or one keyring file."""
    if request.param == "kms":
        return lambda: KmsProvider(endpoint_url=s3_endpoint)
    path = tmp_path / "keys" / "keyring.json"
    return lambda: KeyringProvider(path)


def _tenant() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


def test_a_data_key_round_trips_for_its_run_only(make_provider: MakeProvider) -> None:
    p, tenant = make_provider(), _tenant()
    key, wrapped = p.generate(tenant, None, "run-1")
    assert len(key) == 32 and wrapped.tenant == tenant and wrapped.provider == p.name
    key2, wrapped2 = p.generate(tenant, None, "run-2")
    assert key2 != key and wrapped2.kek_id == wrapped.kek_id  # one KEK, a data key per run
    assert make_provider().unwrap(wrapped, "run-1") == key  # a fresh client: state is stored
    with pytest.raises(ContentKeyError):
        p.unwrap(wrapped, "run-2")  # the wrapping is bound to its run


def test_tenants_and_subjects_have_their_own_keks(make_provider: MakeProvider) -> None:
    p, a, b = make_provider(), _tenant(), _tenant()
    _, wa = p.generate(a, None, "r")
    _, wb = p.generate(b, None, "r")
    _, ws = p.generate(a, unkeyed_subject_ref(a, "customer-1"), "r")
    assert len({wa.kek_id, wb.kek_id, ws.kek_id}) == 3
    # tenant B's key claimed for tenant A's wrapped key: refused by the provider itself
    forged = dataclasses.replace(wa, tenant=b, kek_id=wb.kek_id)
    with pytest.raises(ContentKeyError):
        p.unwrap(forged, "r")


def test_destroying_a_subject_erases_its_runs_only(make_provider: MakeProvider) -> None:
    p, tenant = make_provider(), _tenant()
    ref = unkeyed_subject_ref(tenant, "customer-7")
    k_subject, w_subject = p.generate(tenant, ref, "r1")
    k_tenant, w_tenant = p.generate(tenant, None, "r2")
    assert p.unwrap(w_subject, "r1") == k_subject
    gone = p.destroy(tenant, ref, when=WHEN, reason="customer asked")
    assert gone == [w_subject.kek_id]
    with pytest.raises(ContentKeyError, match=rf"erased on {WHEN} \(customer asked\)"):
        make_provider().unwrap(w_subject, "r1")
    with pytest.raises(ContentKeyError):
        make_provider().generate(tenant, ref, "r3")  # an erased subject records nothing new
    assert make_provider().unwrap(w_tenant, "r2") == k_tenant


def test_destroying_a_tenant_erases_its_subjects_too(make_provider: MakeProvider) -> None:
    p, tenant, other = make_provider(), _tenant(), _tenant()
    _, w1 = p.generate(tenant, None, "r1")
    _, w2 = p.generate(tenant, unkeyed_subject_ref(tenant, "s"), "r2")
    k3, w3 = p.generate(other, None, "r3")
    gone = p.destroy(tenant, None, when=WHEN, reason="tenant left")
    assert sorted(gone) == sorted([w1.kek_id, w2.kek_id])
    for w, ctx in ((w1, "r1"), (w2, "r2")):
        with pytest.raises(ContentKeyError):
            make_provider().unwrap(w, ctx)
    assert make_provider().unwrap(w3, "r3") == k3


def test_kms_keys_are_per_tenant_aliases_with_context(s3_endpoint: str) -> None:
    tenant = _tenant()
    _, wrapped = KmsProvider(endpoint_url=s3_endpoint).generate(tenant, None, "run-x")
    kms = boto3.client("kms", endpoint_url=s3_endpoint)
    meta = kms.describe_key(KeyId=f"alias/tracevault/{tenant}")["KeyMetadata"]
    assert meta["KeyId"] == wrapped.kek_id
    # the encryption context names the run: KMS itself refuses the blob without it
    with pytest.raises(kms.exceptions.InvalidCiphertextException):
        kms.decrypt(CiphertextBlob=wrapped.blob)


def test_an_unreachable_kms_is_service_unavailable() -> None:
    from tracevault.errors import ServiceUnavailableError

    p = KmsProvider(endpoint_url="http://127.0.0.1:9")  # nothing listens on the discard port
    with pytest.raises(ServiceUnavailableError, match="did not answer"):
        p.generate("t", None, "r")


def test_the_keyring_file_is_0600_and_a_wider_mode_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "keyring.json"
    p = KeyringProvider(path)
    key, wrapped = p.generate("t", None, "r")
    assert path.stat().st_mode & 0o777 == 0o600
    assert key.hex() not in path.read_text()  # the data key is never stored, only KEKs
    os.chmod(path, 0o644)
    with pytest.raises(ConfigError, match=r"mode 0644.*chmod 600"):
        KeyringProvider(path).unwrap(wrapped, "r")


def test_a_destroyed_keyring_kek_leaves_the_file(tmp_path: Path) -> None:
    path = tmp_path / "keyring.json"
    p = KeyringProvider(path)
    p.generate("t", None, "r")
    kek = json.loads(path.read_text())["keks"]["t/-"]["key"]
    p.destroy("t", None, when=WHEN, reason="test")
    text = path.read_text()
    assert kek not in text and "destroyed" in text
    assert not list(path.parent.glob(".keyring.json.*.tmp"))


def test_a_keyring_without_the_tenant_refuses_naming_it(tmp_path: Path) -> None:
    _, wrapped = KeyringProvider(tmp_path / "a.json").generate("tenant-a", None, "r")
    with pytest.raises(ContentKeyError, match=r"tenant 'tenant-a'.*provider keyring"):
        KeyringProvider(tmp_path / "b.json").unwrap(wrapped, "r")
