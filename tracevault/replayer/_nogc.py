"""Pausing Python's cyclic garbage collector while a run's records are read and rebuilt.

Loading and rebuilding a 100,000-event run allocates a few hundred thousand long-lived,
acyclic objects (row dicts, bytes, TraceEvents). Each 700 allocations CPython runs a young
generation collection that walks them again, and older generations follow: ~15-20 % of the
replay's time, finding nothing (none of these objects form cycles). Reference counting still
frees everything as usual; the collector is switched back on (if it was on) when the block
ends, even on an exception.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["gc_paused"]


@contextmanager
def gc_paused() -> Iterator[None]:
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
