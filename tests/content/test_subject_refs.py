"""Subject references are keyed (docs/confidentiality.md, "Subject references are keyed").

A subject's reference is HMAC-SHA256 under the tenant's subject secret, which the key
provider holds (the keyring file; an HMAC_256 key in moto's KMS server over HTTP): nobody
without the provider can compute bob's reference from his id, as they could from the bare
hash runs carried before. Rotating the secret names new runs differently and keeps the old
secrets, so ``erase --subject`` still reaches runs recorded under each, and the old unkeyed
reference too.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from tracevault.content import (
    KeyProvider,
    KeyringProvider,
    KmsProvider,
    keyed_subject_ref,
    unkeyed_subject_ref,
)

MakeProvider = Callable[[], KeyProvider]


@pytest.fixture(params=["kms", "keyring"])
def make_provider(request: pytest.FixtureRequest, s3_endpoint: str, tmp_path: Path) -> MakeProvider:
    if request.param == "kms":
        return lambda: KmsProvider(endpoint_url=s3_endpoint)
    return lambda: KeyringProvider(tmp_path / "keys" / "keyring.json")


def test_a_reference_is_keyed_stable_and_not_a_bare_hash(make_provider: MakeProvider) -> None:
    tenant = f"t-{uuid.uuid4().hex[:10]}"
    p = make_provider()
    ref = p.subject_ref(tenant, "bob@example.com")
    assert ref.startswith("s2-") and len(ref) == 35
    assert make_provider().subject_ref(tenant, "bob@example.com") == ref  # another process
    assert p.subject_ref(tenant, "alice@example.com") != ref
    # not computable from the id alone: neither the old unkeyed hash nor any plain SHA-256
    assert ref != "s2-" + unkeyed_subject_ref(tenant, "bob@example.com")
    for text in ("bob@example.com", f"{tenant}\0bob@example.com"):
        assert hashlib.sha256(text.encode()).hexdigest()[:32] not in ref
    # another tenant's secret gives another reference for the same id
    assert p.subject_ref(f"t-{uuid.uuid4().hex[:10]}", "bob@example.com") != ref
    assert ref == keyed_subject_ref(p.subject_secrets(tenant, create=False)[0], tenant,
                                    "bob@example.com")  # fmt: skip


def test_rotation_keeps_every_reference_erase_must_reach(make_provider: MakeProvider) -> None:
    tenant = f"t-{uuid.uuid4().hex[:10]}"
    p = make_provider()
    before = p.subject_ref(tenant, "bob")
    p.rotate_subject_secret(tenant)
    after = p.subject_ref(tenant, "bob")
    assert after != before
    # newest first, then the rotated one, then the unkeyed reference of runs recorded before
    assert p.subject_refs(tenant, "bob") == [after, before, unkeyed_subject_ref(tenant, "bob")]


def test_an_old_unkeyed_reference_still_opens(make_provider: MakeProvider) -> None:
    tenant = f"t-{uuid.uuid4().hex[:10]}"
    p = make_provider()
    old = unkeyed_subject_ref(tenant, "carol")  # what a run recorded before carries
    data_key, wrapped = p.generate(tenant, old, "old-run")
    assert make_provider().unwrap(wrapped, "old-run") == data_key
    assert old in p.subject_refs(tenant, "carol")
