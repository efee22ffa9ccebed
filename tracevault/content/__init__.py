"""Confidential content: key providers, a run's AES-256-GCM fields, and opening them to read.

Beneath the producer and the replayer (docs/design.md, "Layout"): the Recorder seals a run's
content fields through :class:`RunCipher` under a data key a :class:`KeyProvider` wraps per
tenant (and per data subject), the wrapped key kept per run in a :class:`RunKeyStore`, where
erasure deletes it; readers open them with :func:`readable`. Integrity needs none of this:
the chain covers the ciphertext bytes (docs/confidentiality.md).
"""

from tracevault.content._cipher import FIELDS, RunCipher, is_envelope
from tracevault.content._events import (
    data_key_of,
    is_encrypted,
    metadata_only,
    open_event,
    opened_with,
    readable,
    wrapped_key_of,
)
from tracevault.content._keyring import KeyringProvider
from tracevault.content._keystore import FileRunKeyStore, RunKeyStore, S3RunKeyStore, entry_name
from tracevault.content._kms import KmsProvider
from tracevault.content._open import open_key_store, open_provider, open_run, run_data_key
from tracevault.content._provider import DATA_KEY_BYTES, KeyProvider
from tracevault.content._recipient import (
    REVEAL_SUITE,
    Recipient,
    RecipientKey,
    RevealedRun,
    open_for,
    seal_for,
)
from tracevault.content._redact import REDACT_ATTRIBUTE, Redactor
from tracevault.content._wrapped import (
    KEY_ATTRIBUTE,
    WrappedKey,
    keyed_subject_ref,
    unkeyed_subject_ref,
)

__all__ = [
    # providers
    "KeyProvider",
    "KeyringProvider",
    "KmsProvider",
    "open_provider",
    "DATA_KEY_BYTES",
    # the run-key store (each run's wrapped key, deletable)
    "RunKeyStore",
    "FileRunKeyStore",
    "S3RunKeyStore",
    "entry_name",
    "open_key_store",
    # the wrapped key in RUN_STARTED
    "KEY_ATTRIBUTE",
    "WrappedKey",
    "keyed_subject_ref",
    "unkeyed_subject_ref",
    # fields
    "FIELDS",
    "RunCipher",
    "is_envelope",
    # redaction
    "REDACT_ATTRIBUTE",
    "Redactor",
    # reading
    "open_run",
    "run_data_key",
    "data_key_of",
    "is_encrypted",
    "metadata_only",
    "open_event",
    "readable",
    "opened_with",
    "wrapped_key_of",
    # a bundle's data keys revealed to one recipient (HPKE)
    "REVEAL_SUITE",
    "Recipient",
    "RecipientKey",
    "RevealedRun",
    "open_for",
    "seal_for",
]
