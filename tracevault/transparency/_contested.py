"""The names of the sequencer's contested records, shared by the sequencer and verify.

When a run's provenance fails at the sequencer (docs/identity.md) it seals a record of its
own into the log: a two-event run whose RUN_STARTED request names the contested run, the seq
and why. Its id is ``tracevault.contested:<24 hex of SHA-256 of the run id>:<n>``, each ``n``
one whose id maps to the contested run's partition (the record is sealed beside the run), so
a verifier finds every record naming a run from the run's id alone: one listing of the
archive, or one read of the run's heads partition. Producers may not use the prefix.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator

__all__ = ["CONTESTED_PREFIX", "contested_ids", "contested_prefix"]

#: Run ids of the sequencer's contested records; a producer's event for one is refused.
CONTESTED_PREFIX = "tracevault.contested:"
_MAX_N = 100_000


def contested_prefix(run_id: str) -> str:
    """What the ids of every contested record naming ``run_id`` start with."""
    return f"{CONTESTED_PREFIX}{hashlib.sha256(run_id.encode('utf-8')).hexdigest()[:24]}:"


def contested_ids(run_id: str, beside: Callable[[str], bool]) -> Iterator[str]:
    """The ids the sequencer gives records naming ``run_id``, in the order it takes them:
    those ``beside`` accepts (the ones on the run's own partition)."""
    base = contested_prefix(run_id)
    for n in range(_MAX_N):
        cid = f"{base}{n}"
        if beside(cid):
            yield cid
