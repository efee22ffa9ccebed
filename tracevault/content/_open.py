"""The key provider the settings name (``key_provider``), or None: content stays in clear."""

from __future__ import annotations

import threading

from tracevault.config import Settings
from tracevault.content._keyring import KeyringProvider
from tracevault.content._kms import KmsProvider
from tracevault.content._provider import KeyProvider

__all__ = ["open_provider"]

# One provider per configuration and process: a KMS client costs tens of ms to build and
# keeps its connections, and every Recorder (every sub-agent) of a process asks for one.
_OPEN: dict[tuple[str, str | None, str], KeyProvider] = {}
_LOCK = threading.Lock()


def open_provider(settings: Settings) -> KeyProvider | None:
    """``keyring``: the 0600 file ``keyring_path``; ``kms``: the KMS API at
    ``kms_endpoint_url`` (AWS's by default) in ``kms_region``; ``none``: None."""
    kind = settings.key_provider
    if kind == "none":
        return None
    where = settings.keyring_path if kind == "keyring" else settings.kms_endpoint_url
    key = (kind, where, settings.kms_region)
    with _LOCK:
        provider = _OPEN.get(key)
        if provider is None:
            if kind == "keyring":
                provider = KeyringProvider(settings.keyring_path)
            else:
                provider = KmsProvider(
                    endpoint_url=settings.kms_endpoint_url, region=settings.kms_region
                )
            _OPEN[key] = provider
    return provider
