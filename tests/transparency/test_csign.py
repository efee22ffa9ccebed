"""The C Ed25519 signer (``tracevault/transparency/_csign.c``) is ``cryptography``'s, and
keeps the GIL.

Ed25519 (RFC 8032) is deterministic: one seed and one message have one signature, so the C
path is pinned byte for byte to the Python reference it replaces, on generated seeds and
messages (``FUZZ_SCALE`` times more in the fuzz step of ``.ci/native``) and on RFC 8032's
own test vector. Keeping the GIL is the reason it exists (docs/identity.md, "What identity
costs"); ``bench/producer_overhead.py --agent-identity`` measures what that is worth.
"""

from __future__ import annotations

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.native import examples, extension
from tracevault.transparency import Ed25519Signer

_csign = extension("tracevault.transparency._csign")


@settings(max_examples=examples(300), deadline=None)
@given(seed=st.binary(min_size=32, max_size=32), message=st.binary(max_size=5000))
def test_the_c_signature_is_cryptographys(seed: bytes, message: bytes) -> None:
    want = Ed25519PrivateKey.from_private_bytes(seed).sign(message)
    assert _csign.sign(_csign.key(seed), message) == want
    assert Ed25519Signer("agent.example", seed).sign(message) == want


def test_rfc_8032_test_1() -> None:
    """RFC 8032 section 7.1, TEST 1: the empty message."""
    seed = bytes.fromhex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
    sig = bytes.fromhex(
        "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"
    )
    assert _csign.sign(_csign.key(seed), b"") == sig
