"""A loaded run's events opened for reading, through the key provider the settings name.

Every reading command (show, run, diff, export --otel, batch, the sub-agent loaders) passes
its events through :func:`opened` after loading and verifying them: verification reads the
ciphertext, and only what is shown or re-run needs the content (docs/confidentiality.md).
"""

from __future__ import annotations

from collections.abc import Sequence

from tracevault.config import Settings
from tracevault.content import open_provider, readable
from tracevault.schemas import TraceEvent

__all__ = ["opened"]


def opened(settings: Settings, events: Sequence[TraceEvent]) -> Sequence[TraceEvent]:
    """``events`` with content in clear; ContentKeyError (exit 7) naming the run's tenant and
    provider when this reader holds no key that opens them. A run in clear is returned as is."""
    return readable(events, open_provider(settings), settings.tenant)
