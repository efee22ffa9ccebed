"""The key provider the settings name (``key_provider``), or None: content stays in clear;
the run-key store (``run_key_store``) where each run's wrapped data key lives; and a loaded
run opened through both (:func:`open_run`), the one call every reader makes."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

from tracevault.config import Settings
from tracevault.content._events import data_key_of, readable
from tracevault.content._keyring import KeyringProvider
from tracevault.content._keystore import FileRunKeyStore, RunKeyStore, S3RunKeyStore
from tracevault.content._kms import KmsProvider
from tracevault.content._provider import KeyProvider
from tracevault.schemas import TraceEvent

__all__ = ["open_key_store", "open_provider", "open_run", "run_data_key"]

# One provider per configuration and process: a KMS client costs tens of ms to build and
# keeps its connections, and every Recorder (every sub-agent) of a process asks for one.
_OPEN: dict[tuple[object, ...], KeyProvider] = {}
_STORES: dict[tuple[str, str | None], RunKeyStore] = {}
_LOCK = threading.Lock()


def open_provider(settings: Settings) -> KeyProvider | None:
    """``keyring``: the 0600 file ``keyring_path``; ``kms``: the KMS API at
    ``kms_endpoint_url`` (AWS's by default) in ``kms_region``; ``none``: None."""
    kind = settings.key_provider
    if kind == "none":
        return None
    where = settings.keyring_path if kind == "keyring" else settings.kms_endpoint_url
    key = (
        kind,
        where,
        settings.kms_region,
        settings.kms_connect_timeout_s,
        settings.kms_read_timeout_s,
        settings.kms_max_attempts,
    )
    with _LOCK:
        provider = _OPEN.get(key)
        if provider is None:
            if kind == "keyring":
                provider = KeyringProvider(settings.keyring_path)
            else:
                provider = KmsProvider(
                    endpoint_url=settings.kms_endpoint_url,
                    region=settings.kms_region,
                    connect_timeout=settings.kms_connect_timeout_s,
                    read_timeout=settings.kms_read_timeout_s,
                    max_attempts=settings.kms_max_attempts,
                )
            _OPEN[key] = provider
    return provider


def open_key_store(settings: Settings) -> RunKeyStore:
    """``run_key_store``: ``s3://bucket/prefix`` (through ``s3_endpoint_url``) or a directory;
    unset, the directory ``run-keys`` beside ``keyring_path`` (the keyring's machine)."""
    url = settings.run_key_store or str(Path(settings.keyring_path).parent / "run-keys")
    key = (url, settings.s3_endpoint_url if url.startswith("s3://") else None)
    with _LOCK:
        store = _STORES.get(key)
        if store is None:
            if url.startswith("s3://"):
                store = S3RunKeyStore(url, endpoint_url=settings.s3_endpoint_url)
            else:
                store = FileRunKeyStore(url.removeprefix("file://"))
            _STORES[key] = store
    return store


def open_run(settings: Settings, events: Sequence[TraceEvent]) -> Sequence[TraceEvent]:
    """``events`` with content in clear, through the provider and run-key store the settings
    name (:func:`readable`); a run in clear is returned as is; ContentKeyError (exit 7), naming
    the run's tenant and provider, when this reader may not open it."""
    provider = open_provider(settings)
    store = None if provider is None else open_key_store(settings)
    return readable(events, provider, settings.tenant, store)


def run_data_key(settings: Settings, events: Sequence[TraceEvent]) -> bytes | None:
    """The run's data key through the configured provider (``export --reveal-to``), None for a
    run in clear; refused (exit 7) as :func:`open_run` is."""
    provider = open_provider(settings)
    store = None if provider is None else open_key_store(settings)
    return data_key_of(events, provider, settings.tenant, store)
