"""The per-run hash chain: the one implementation the sequencer and every verifier share.

``genesis = SHA-256("tracevault/v1/genesis\\0" || run_id)`` and
``hash_n = SHA-256("tracevault/v1/event\\0" || hash_{n-1} || raw_n)``, where ``raw_n`` is the
exact Kafka message value the producer wrote. Domain separation keeps a genesis from ever
equalling an event hash; hashing the bytes (not a re-encoding) means a verifier needs no
schema to detect a flipped bit.
"""

from __future__ import annotations

import hashlib

__all__ = ["EVENT_DOMAIN", "GENESIS_DOMAIN", "HASH_SIZE", "genesis", "link"]

GENESIS_DOMAIN = b"tracevault/v1/genesis\x00"
EVENT_DOMAIN = b"tracevault/v1/event\x00"
HASH_SIZE = 32


def genesis(run_id: str) -> bytes:
    """The chain's starting hash for ``run_id`` (the ``prev_hash`` of seq 0)."""
    return hashlib.sha256(GENESIS_DOMAIN + run_id.encode("utf-8")).digest()


#: SHA-256 with the event domain already absorbed: copying it is cheaper than hashing the
#: domain again, and every event of every run (sequencer and verifiers) takes this path.
_EVENT = hashlib.sha256(EVENT_DOMAIN)


def link(prev_hash: bytes, raw: bytes) -> bytes:
    """The hash of the event whose exact value is ``raw``, following ``prev_hash``."""
    h = _EVENT.copy()
    h.update(prev_hash)
    h.update(raw)
    return h.digest()
