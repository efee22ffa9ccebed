"""Pausing Python's cyclic garbage collector while a run's records are read and rebuilt.

Loading and rebuilding a 100,000-event run allocates a few hundred thousand long-lived,
acyclic objects (row dicts, bytes, TraceEvents). Each 700 allocations CPython runs a young
generation collection that walks them again, and older generations follow: ~15-20 % of the
replay's time, finding nothing (none of these objects form cycles). Reference counting still
frees everything as usual; the collector is switched back on (if it was on) when the block
ends, even on an exception.

Switching it back on alone would only defer that work: every object allocated in the block is
still in the young generation, and the first allocation after the block walks all of them
(a 100,000-event rebuild: ~0.6 µs an event). So the block's survivors are moved straight to
the oldest generation (``gc.freeze()`` then ``gc.unfreeze()``: two list splices, no walk),
where long-lived objects belong and the collector looks at them in its next full pass. Not
when something else in the process froze objects (``gc.get_freeze_count()``): unfreezing
would release those too.
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
            if not gc.get_freeze_count():
                gc.freeze()  # every tracked object to the permanent generation ...
                gc.unfreeze()  # ... and from there to the oldest one: no young walk of them
            gc.enable()
