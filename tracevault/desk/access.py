"""Reads of evidence are evidence: every opening of content in the desk is an access event.

Why through the Recorder: an access must be as hard to hide as any crossing, so it takes
the same path (docs/desk.md, "Access events"): a short run of its own, recorded by a
``Recorder`` on the desk's ``Publisher``, so it is spooled when Kafka is away and never
dropped, then sealed, chained and put in the signed log by the sequencer like any run. The
run's input says who opened what, when; its attributes name the run read, so a search for
``tracevault.access.run`` finds every read of one run. The content is shown only after its
access was handed to the Publisher: an access that cannot be recorded opens nothing.
"""

from __future__ import annotations

import getpass
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from tracevault import __version__
from tracevault.producer import Publisher, Recorder
from tracevault.schemas import micros_to_datetime

__all__ = ["ACCESS_AGENT", "ACCESS_RUN_ATTR", "Access", "AccessLog", "Reader"]

#: The agent id access runs are recorded under.
ACCESS_AGENT = "tracevault-desk"
#: The attribute of an access run naming the run that was read.
ACCESS_RUN_ATTR = "tracevault.access.run"


@dataclass(frozen=True, slots=True)
class Reader:
    """Who opened content: ``name`` as the desk knows it and how it knows it (``via``:
    ``proxy-header`` when an SSO proxy named the person, ``token`` when only the shared token
    vouches for the request, ``loopback`` when the desk's own OS user served it locally),
    and the client's address."""

    name: str
    via: str
    address: str


@dataclass(frozen=True, slots=True)
class Access:
    """One recorded opening: the access run's id, the run read and its seqs, by whom, when
    (UTC µs)."""

    access_run: str
    run_id: str
    seqs: tuple[int, ...]
    reader: str
    at: int


class AccessLog:
    """Records accesses on ``publisher`` (owned by the caller, who closes it: ``close``
    delivers or spools what is left)."""

    def __init__(self, publisher: Publisher) -> None:
        self._publisher = publisher
        self._user = getpass.getuser()

    @property
    def local_user(self) -> str:
        """The OS user the desk runs as: who reads on loopback when no proxy names anyone."""
        return self._user

    def record(self, reader: Reader, run_id: str, seqs: Sequence[int], what: str) -> Access:
        """Record that ``reader`` opened ``what`` (``payload``) of ``run_id``'s ``seqs``.

        Returns once the events are handed to the Publisher (queued for Kafka or the spool);
        raises if they cannot be, and then the caller shows nothing."""
        at = time.time_ns() // 1000
        access_run = f"access.{uuid.uuid4()}"
        wanted = tuple(sorted(set(seqs)))
        entry = {
            "access": what,
            "run_id": run_id,
            "seqs": list(wanted),
            "reader": reader.name,
            "via": reader.via,
            "address": reader.address,
            "at": micros_to_datetime(at).isoformat(timespec="microseconds"),
        }
        recorder = Recorder(
            publisher=self._publisher,
            agent_id=ACCESS_AGENT,
            agent_version=__version__,
            run_id=access_run,
            harness="tracevault-ui",
            attributes={ACCESS_RUN_ATTR: run_id, "tracevault.access": what},
            input=entry,
        )
        with recorder:
            recorder.finish({"opened": list(wanted)})
        return Access(access_run, run_id, wanted, reader.name, at)
