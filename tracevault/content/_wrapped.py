"""A run's data key as it travels: wrapped under a key-encryption key, named in clear.

The wrapped key rides in the run's ``RUN_STARTED`` attributes (:data:`KEY_ATTRIBUTE`), so a
reader needs nothing but the record and a grant from the provider. It is safe there: only
the provider can unwrap it, and erasing the run's content means destroying the KEK that
wraps it, which works while the archive stays locked (docs/confidentiality.md, "Erasure: by
destroying keys, never evidence").
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from dataclasses import dataclass

from tracevault.errors import ContentKeyError

__all__ = ["KEY_ATTRIBUTE", "WrappedKey", "subject_ref"]

#: The RUN_STARTED attribute holding the run's wrapped data key (JSON, see ``to_attribute``).
KEY_ATTRIBUTE = "tracevault.content.key"


def subject_ref(tenant: str, subject: str | None) -> str | None:
    """The name a data subject goes by in clear: a hash, never the subject id itself.

    Subject ids are often personal data (an e-mail, a customer number); the record, the KMS
    alias and the keyring name the subject by this reference only. An unkeyed hash of a
    guessable id can be found by trying candidates: give opaque subject ids where that matters.
    """
    if subject is None:
        return None
    digest = hashlib.sha256(f"tracevault/v1/subject\0{tenant}\0{subject}".encode())
    return digest.hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class WrappedKey:
    """One run's data key wrapped by ``provider`` under the KEK ``kek_id`` of a tenant/subject.

    ``subject`` is the :func:`subject_ref`, not the subject's id. ``blob`` is what the
    provider returned (a KMS ciphertext blob, or the keyring's nonce and AES-GCM output).
    """

    provider: str
    tenant: str
    subject: str | None
    kek_id: str
    blob: bytes

    def to_attribute(self) -> str:
        return json.dumps(
            {
                "v": 1,
                "provider": self.provider,
                "tenant": self.tenant,
                "subject": self.subject,
                "kek": self.kek_id,
                "wrapped": base64.b64encode(self.blob).decode("ascii"),
            },
            sort_keys=True,
            separators=(",", ":"),
        )

    @classmethod
    def from_attribute(cls, text: str, *, run_id: str) -> WrappedKey:
        try:
            o = json.loads(text)
            if not isinstance(o, dict) or o.get("v") != 1:
                raise ValueError("not version 1")
            subject = o["subject"]
            wk = cls(
                str(o["provider"]),
                str(o["tenant"]),
                None if subject is None else str(subject),
                str(o["kek"]),
                base64.b64decode(o["wrapped"], validate=True),
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
