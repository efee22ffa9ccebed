"""The archiver's one way to refuse a record: a quarantine object, durable before its offset
can be committed, and the counts by reason.

Its own object, held by the per-event path and the checkpoint admission (both refuse
records), so that what a refusal writes and counts is said once.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from confluent_kafka import Message

from tracevault.archive import ObjectStore
from tracevault.services.archiver._quarantine import QuarantineReason as Why
from tracevault.services.archiver._quarantine import quarantine
from tracevault.services.archiver._state import ArchiverStats

__all__ = ["Refusals"]


class Refusals:
    """Quarantines refused records of ``topic`` in ``store``, locked for ``retention``."""

    def __init__(
        self,
        store: ObjectStore,
        topic: str,
        stats: ArchiverStats,
        clock: Callable[[], datetime],
        retention: timedelta,
    ) -> None:
        self._store = store
        self._topic = topic
        self._stats = stats
        self._clock = clock
        self._retention = retention

    def refuse(
        self,
        msg: Message,
        why: Why,
        detail: str,
        run_id: str | None = None,
        seq: int | None = None,
        *,
        offset: int | None = None,
        key: bytes | None = None,
        value: bytes | None = None,
    ) -> str:
        """Quarantine one record (durably, before its offset can be committed) and go on;
        the quarantine object's key. ``offset``, ``key`` and ``value`` name a record read
        before ``msg`` (a pending one a checkpoint does not list)."""
        partition = msg.partition()
        at = msg.offset() if offset is None else offset
        assert partition is not None and at is not None  # a consumed record has both
        qkey = quarantine(
            self._store,
            self._clock() + self._retention,
            why,
            detail,
            self._topic,
            partition,
            at,
            msg.key() if offset is None else key,
            msg.value() if offset is None else value,
            run_id,
            seq,
        )
        st = self._stats
        st.events_quarantined += 1
        st.quarantined[why.value] = st.quarantined.get(why.value, 0) + 1
        return qkey
