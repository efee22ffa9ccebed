"""A loaded run's events opened for reading, through the key provider the settings name.

Every reading command (show, run, diff, export --otel, batch, the sub-agent loaders) passes
its events through :func:`opened` after loading and verifying them: verification reads the
ciphertext, and only what is shown or re-run needs the content (docs/confidentiality.md).
"""

from __future__ import annotations

from collections.abc import Sequence

from tracevault.config import Settings
from tracevault.content import open_run
from tracevault.replayer.load._nogc import gc_paused
from tracevault.schemas import TraceEvent

__all__ = ["opened"]


def opened(settings: Settings, events: Sequence[TraceEvent]) -> Sequence[TraceEvent]:
    """``events`` with content in clear (``content.open_run``); ContentKeyError (exit 7)
    naming the run's tenant and provider when this reader holds no key that opens them.

    The collector is paused as for verify's rebuild (``_nogc``): opening a run makes a new
    TraceEvent an event, long-lived and acyclic, which young collections would walk again."""
    with gc_paused():
        return open_run(settings, events)
