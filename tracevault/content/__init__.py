"""Confidential content: key providers, a run's AES-256-GCM fields, and opening them to read.

Beneath the producer and the replayer (docs/design.md, "Layout"): the Recorder seals a run's
content fields through :class:`RunCipher` under a data key a :class:`KeyProvider` wraps per
tenant (and per data subject); readers open them with :func:`readable`. Integrity needs none
of this: the chain covers the ciphertext bytes (docs/confidentiality.md).
"""

from tracevault.content._cipher import FIELDS, RunCipher, is_envelope
from tracevault.content._events import (
    is_encrypted,
    metadata_only,
    open_event,
    readable,
    wrapped_key_of,
)
from tracevault.content._keyring import KeyringProvider
from tracevault.content._kms import KmsProvider
from tracevault.content._open import open_provider
from tracevault.content._provider import DATA_KEY_BYTES, KeyProvider
from tracevault.content._redact import REDACT_ATTRIBUTE, Redactor
from tracevault.content._wrapped import KEY_ATTRIBUTE, WrappedKey, subject_ref

__all__ = [
    # providers
    "KeyProvider",
    "KeyringProvider",
    "KmsProvider",
    "open_provider",
    "DATA_KEY_BYTES",
    # the wrapped key in RUN_STARTED
    "KEY_ATTRIBUTE",
    "WrappedKey",
    "subject_ref",
    # fields
    "FIELDS",
    "RunCipher",
    "is_envelope",
    # redaction
    "REDACT_ATTRIBUTE",
    "Redactor",
    # reading
    "is_encrypted",
    "metadata_only",
    "open_event",
    "readable",
    "wrapped_key_of",
]
