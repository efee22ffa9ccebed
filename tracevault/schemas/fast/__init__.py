"""Every hand-written reader of the published records (TraceEvent v2, SealedEvent v1), in one place.

fastavro's generic reader costs more per record than everything else the sequencer, the
archiver and the replayer do with it, so their hot paths walk the bytes directly:

==========================  =========================================  =====================
reader                      used by                                    module
==========================  =========================================  =====================
:func:`peek_event`          the sequencer's rules, once per raw event   ``_peek.py``
:func:`fast_decode_event`   ``decode_event`` and the replayer's rebuild ``_event.py``
:func:`event_kind`          the archiver (does a value finish its run)  ``_peek.py``
:func:`sealed_fields`       the archiver, once per sealed event         ``_sealed.py``
:func:`sealed_rows`         the replayer, per data bundle of the log    ``_sealed.py``
:func:`sealed_columns`      the replayer's verify + rebuild: one walk   ``_columns.py``
:func:`segment_rows`        the replayer, per archived segment          ``_sealed.py``
==========================  =========================================  =====================

The archiver's C walk (``tracevault/services/archiver/_ctake.c``) mirrors ``sealed_fields`` and
``event_kind`` and runs only under the same guard: :func:`armed_walks` gives it the headers.

They share one varint reader (``_varint.py``) and one guard (``_guard.py``): a walk runs only
on values written with exactly the schema version it mirrors (by fingerprint, and only while
that version is the newest published one), and it must end exactly at the end of the value.
On anything else it returns None and the caller reads the value with fastavro, which decides
what is readable and names the problem; a fast path never gives a different answer.
``tests/schemas/test_fast_pinned.py`` pins every reader to ``fastavro.schemaless_reader`` with
the published schema, and ``tests/schemas/test_fast_pins.py`` fails when a new schema version
turns a fast path off.
"""

from tracevault.schemas._events import EventKind
from tracevault.schemas.fast import _event, _sealed
from tracevault.schemas.fast._columns import SealedColumns, sealed_columns
from tracevault.schemas.fast._event import fast_decode_event, with_content
from tracevault.schemas.fast._guard import PINS, SEALED_EVENT_V1, TRACE_EVENT_V2, Pin, stale
from tracevault.schemas.fast._peek import Peeked, event_kind, event_time, peek_event
from tracevault.schemas.fast._sealed import sealed_fields, sealed_rows, segment_rows
from tracevault.schemas.fast._varint import VarintError, read_long


def armed_walks() -> tuple[bytes, bytes, tuple[EventKind, ...]] | None:
    """``(SealedEvent v1 header, TraceEvent v2 header, kinds by index)`` while both walks
    are armed, else None: what a walk written in another language needs to run under the
    same guard (and to decline whenever the Python walks would)."""
    sealed, trace = _sealed._arm(), _event._arm()
    if sealed is None or trace is None:
        return None
    return sealed, trace, _event._kinds


__all__ = [
    "armed_walks",
    # readers
    "Peeked",
    "event_kind",
    "event_time",
    "fast_decode_event",
    "peek_event",
    "SealedColumns",
    "sealed_columns",
    "sealed_fields",
    "sealed_rows",
    "segment_rows",
    "with_content",
    # the guard
    "PINS",
    "SEALED_EVENT_V1",
    "TRACE_EVENT_V2",
    "Pin",
    "stale",
    # the varint
    "VarintError",
    "read_long",
]
