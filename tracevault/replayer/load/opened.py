"""A loaded run's events opened for reading, through the key provider the settings name.

Every reading command (show, run, diff, export --otel, batch, the sub-agent loaders) passes
its events through :func:`opened` after loading and verifying them: verification reads the
ciphertext, and only what is shown or re-run needs the content (docs/confidentiality.md).
"""

from __future__ import annotations

from collections.abc import Sequence

from tracevault.config import Settings
from tracevault.content import data_key_of, open_key_store, open_provider, readable
from tracevault.replayer.load._nogc import gc_paused
from tracevault.schemas import TraceEvent

__all__ = ["opened", "run_data_key"]


def opened(settings: Settings, events: Sequence[TraceEvent]) -> Sequence[TraceEvent]:
    """``events`` with content in clear; ContentKeyError (exit 7) naming the run's tenant and
    provider when this reader holds no key that opens them. A run in clear is returned as is.

    The collector is paused as for verify's rebuild (``_nogc``): opening a run makes a new
    TraceEvent an event, long-lived and acyclic, which young collections would walk again."""
    provider = open_provider(settings)
    store = None if provider is None else open_key_store(settings)
    with gc_paused():
        return readable(events, provider, settings.tenant, store)


def run_data_key(settings: Settings, events: Sequence[TraceEvent]) -> bytes | None:
    """The run's data key through the configured provider (for ``export --reveal-to``), None
    for a run in clear; refused (exit 7) as :func:`opened` is."""
    provider = open_provider(settings)
    store = None if provider is None else open_key_store(settings)
    return data_key_of(events, provider, settings.tenant, store)
