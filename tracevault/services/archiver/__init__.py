"""The archiver: sealed records from Kafka into immutable segments under a retention lock.

Import from here::

    from tracevault.services.archiver import Archiver

What it writes (layout, receipts, stores) and how to read it back live in
:mod:`tracevault.archive`, beneath both the archiver and the replayer.
"""

from tracevault.services.archiver._archiver import Archiver, ArchiverStats
from tracevault.services.archiver._writer import ArchiveWriter, RunCursor

__all__ = [
    "Archiver",
    "ArchiverStats",
    "ArchiveWriter",
    "RunCursor",
]
