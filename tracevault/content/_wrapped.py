"""A run's data key wrapped under a key-encryption key, and the reference RUN_STARTED carries.

Since format 2 the wrapped key lives in the **run-key store** (a mutable store tracevault can
delete from: ``tracevault.content.RunKeyStore``), and RUN_STARTED's :data:`KEY_ATTRIBUTE`
holds only a reference to it (``"v":2``, no ``wrapped``): erasing one run deletes its entry,
while the locked archive and the topics keep nothing that opens it. Runs of format 1 carry the
wrapped key inline (``"v":1``): they stay readable, and only destroying the KEK that wraps
them erases them (docs/confidentiality.md, "Erasure: by destroying keys, never evidence").
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from dataclasses import dataclass

from tracevault.errors import ContentKeyError

__all__ = ["KEY_ATTRIBUTE", "WrappedKey", "keyed_subject_ref", "unkeyed_subject_ref"]

#: The RUN_STARTED attribute holding the run's wrapped data key (JSON, see ``to_attribute``).
KEY_ATTRIBUTE = "tracevault.content.key"


def keyed_subject_ref(secret: bytes, tenant: str, subject: str) -> str:
    """The name a data subject goes by in clear: HMAC-SHA256 under the tenant's subject
    secret, which the key provider holds (:meth:`KeyProvider.subject_ref`), never a bare hash.

    Why keyed: subject ids are often personal data (an e-mail, a customer number) and easy to
    guess; an unkeyed hash of one is found by trying candidates, and anyone could compute a
    genuine subject's reference to aim an erasure or a record at it. ``s2-`` + 32 hex digits,
    so it is told apart from an :func:`unkeyed_subject_ref` (docs/confidentiality.md, "Subject
    references are keyed").
    """
    mac = hmac.new(secret, f"tracevault/v2/subject\0{tenant}\0{subject}".encode(), "sha256")
    return "s2-" + mac.hexdigest()[:32]


def unkeyed_subject_ref(tenant: str, subject: str) -> str:
    """The **unkeyed subject reference** runs recorded before keyed references carry: a bare
    SHA-256 of tenant and subject (32 hex digits). Still read (a run names its reference, the
    readers never recompute it) and still erased by ``erase --subject``; never made anew."""
    digest = hashlib.sha256(f"tracevault/v1/subject\0{tenant}\0{subject}".encode())
    return digest.hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class WrappedKey:
    """One run's data key wrapped by ``provider`` under the KEK ``kek_id`` of a tenant/subject.

    ``subject`` is the subject's reference (keyed, or an old unkeyed one), not its id.
    ``blob`` is what the provider returned (a KMS ciphertext blob, or the keyring's nonce and
    AES-GCM output).
    """

    provider: str
    tenant: str
    subject: str | None
    kek_id: str
    blob: bytes
    #: True for a format-2 reference: ``blob`` is empty, the run-key store holds it
    stored: bool = False

    def _fields(self) -> dict[str, object]:
        return {
            "provider": self.provider,
            "tenant": self.tenant,
            "subject": self.subject,
            "kek": self.kek_id,
        }

    def to_attribute(self) -> str:
        """Format 1, the wrapped key inline (what the run-key store keeps per run)."""
        wrapped = base64.b64encode(self.blob).decode("ascii")
        return _dumps({"v": 1, **self._fields(), "wrapped": wrapped})

    def to_reference(self) -> str:
        """Format 2, what RUN_STARTED carries: who wraps the key, never the key."""
        return _dumps({"v": 2, **self._fields(), "store": "run-keys"})

    @classmethod
    def from_attribute(cls, text: str, *, run_id: str) -> WrappedKey:
        try:
            o = json.loads(text)
            if not isinstance(o, dict) or o.get("v") not in (1, 2):
                raise ValueError("not version 1 or 2")
            subject = o["subject"]
            stored = o["v"] == 2
            wk = cls(
                str(o["provider"]),
                str(o["tenant"]),
                None if subject is None else str(subject),
                str(o["kek"]),
                b"" if stored else base64.b64decode(o["wrapped"], validate=True),
                stored,
            )
        except (ValueError, KeyError, TypeError, binascii.Error) as exc:
            raise ContentKeyError(
                f"run {run_id}: the {KEY_ATTRIBUTE} attribute of RUN_STARTED is unreadable "
                f"({exc}); its content cannot be opened"
            ) from None
        return wk

    def describe(self) -> str:
        """Tenant, subject and provider, for error messages (no key material)."""
        who = f"tenant {self.tenant!r}"
        if self.subject is not None:
            who += f", subject ref {self.subject}"
        return f"{who}, provider {self.provider} (key {self.kek_id})"


def _dumps(o: dict[str, object]) -> str:
    return json.dumps(o, sort_keys=True, separators=(",", ":"))
