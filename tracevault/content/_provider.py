"""The one interface every key provider implements: wrap, unwrap, destroy.

Callers (the Recorder's hook, the readers, ``erase``) see only :class:`KeyProvider` and
:class:`~tracevault.content.WrappedKey`; a provider keeps its key-encryption keys (KEKs)
wherever it likes. Adding one (Vault Transit: ``datakey/plaintext`` + ``decrypt`` + key
deletion; GCP KMS: a local data key wrapped with ``encrypt`` / ``decrypt``, and destroying the
key versions) means a new subclass and a name in ``open_provider``: nothing else changes
(docs/confidentiality.md, "Key providers").
"""

from __future__ import annotations

import abc

from tracevault.content._wrapped import WrappedKey, keyed_subject_ref, unkeyed_subject_ref

__all__ = ["DATA_KEY_BYTES", "KeyProvider"]

#: AES-256: the data key of a run.
DATA_KEY_BYTES = 32


class KeyProvider(abc.ABC):
    """Holds KEKs per tenant (and per data subject); wraps and unwraps runs' data keys.

    ``subject`` is always the subject's reference (:meth:`subject_ref`), never a subject's id.
    ``context`` is bound into the wrapping (KMS encryption context, keyring AAD): a wrapped
    key opens only for the run it was made for.
    """

    #: the name a WrappedKey records (``keyring``, ``kms``)
    name: str

    @abc.abstractmethod
    def generate(self, tenant: str, subject: str | None, context: str) -> tuple[bytes, WrappedKey]:
        """A fresh data key and its wrapped form; creates the tenant's/subject's KEK if new.

        Raises ServiceUnavailableError when the provider does not answer, ContentKeyError
        when the KEK was destroyed (an erased tenant or subject records nothing new).
        """

    @abc.abstractmethod
    def unwrap(self, wrapped: WrappedKey, context: str) -> bytes:
        """The data key, or ContentKeyError naming tenant and provider when not granted."""

    @abc.abstractmethod
    def destroy(self, tenant: str, subject: str | None, *, when: str, reason: str) -> list[str]:
        """Destroy the KEK of ``tenant`` (all of its subjects' too when ``subject`` is None)
        or of one subject; returns the ids of the KEKs destroyed.

        ``when`` (ISO 8601 UTC) and ``reason`` are kept beside the dead key where the provider
        can (a keyring tombstone, KMS tags), so a refused reader is told "erased on WHEN
        (REASON)"; the erasure's evidence is the record ``tracevault erase`` writes.
        """

    # -- subject references (docs/confidentiality.md, "Subject references are keyed") -----
    @abc.abstractmethod
    def subject_secrets(self, tenant: str, *, create: bool) -> list[bytes]:
        """The tenant's subject secrets, newest first (created when ``create`` and none).

        The newest names new runs' subjects; the older ones (rotated out) are kept so that
        ``erase --subject`` still finds the runs recorded under them."""

    @abc.abstractmethod
    def rotate_subject_secret(self, tenant: str) -> None:
        """Make a new newest subject secret for ``tenant``, keeping the older ones."""

    def subject_ref(self, tenant: str, subject: str) -> str:
        """The keyed reference new runs of ``subject`` are recorded under."""
        return keyed_subject_ref(self.subject_secrets(tenant, create=True)[0], tenant, subject)

    def subject_refs(self, tenant: str, subject: str) -> list[str]:
        """Every reference ``subject``'s runs may carry: keyed under each secret, newest
        first, then the old unkeyed one."""
        keyed = [
            keyed_subject_ref(k, tenant, subject)
            for k in self.subject_secrets(tenant, create=False)
        ]
        return [*keyed, unkeyed_subject_ref(tenant, subject)]
