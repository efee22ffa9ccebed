"""The archiver's per-event path: a consumed batch sorted into pending leaves and checkpoint
records (docs/log.md, "Archive", steps 1 and 2).

A sealed event is parsed and its leaf hash computed; it is *pending* in its partition until a
checkpoint record resolves it (:class:`CheckpointAdmission`, which this hands every checkpoint
record to). The common case (a v1 sealed event of a run already admitted) goes through the C
path (``_ctake.c``) when it is built: it returns the pending records of a stretch of one
partition's messages and this appends them; it stops at the first message that is not that
case, which the Python path (``_take_one``, the reference for the C path) handles.
"""

from __future__ import annotations

import hashlib
import logging
import struct
from collections.abc import Callable
from types import ModuleType

from confluent_kafka import KafkaError, Message

from tracevault import native
from tracevault.errors import LogError, SchemaError
from tracevault.schemas import EventKind
from tracevault.schemas.fast import armed_walks
from tracevault.services.archiver._admission import CheckpointAdmission
from tracevault.services.archiver._logwriter import LeafRecord
from tracevault.services.archiver._quarantine import MAX_SEALED_AT as _MAX_AT
from tracevault.services.archiver._quarantine import MIN_SEALED_AT as _MIN_AT
from tracevault.services.archiver._quarantine import QuarantineReason as Why
from tracevault.services.archiver._quarantine import unarchivable
from tracevault.services.archiver._refusals import Refusals
from tracevault.services.archiver._sealed import leaf_fields
from tracevault.services.archiver._state import Part, Partitions, Pending
from tracevault.transparency import HASH_SIZE, is_checkpoint_record, leaf_data, leaf_prefix

# the per-event path in C: optional (pyproject.toml), and off under TRACEVAULT_NO_C=1
_ctake: ModuleType | None = native.load("tracevault.services.archiver._ctake")

__all__ = ["Intake"]

# the archiver logs under one name wherever its code sits (log filters)
log = logging.getLogger("tracevault.services.archiver._archiver")

_RUN_IDS = 100_000  # run ids remembered as storable (then each new one is checked again)
_U64 = struct.Struct(">Q")
_U64_MAX = (1 << 64) - 1
_new_tuple = tuple.__new__  # a NamedTuple without its Python-level __new__ (once per event)
_sha256 = hashlib.sha256


class Intake:
    """Takes consumed batches into the partitions' pending records; remembers, per
    partition, the offset after what it read (``consumed``)."""

    def __init__(
        self,
        partitions: Partitions,
        admission: CheckpointAdmission,
        refusals: Refusals,
        kafka_error: Callable[[KafkaError], None],
    ) -> None:
        self._partitions = partitions
        self._admission = admission
        self._refuse = refusals.refuse
        self._kafka_error = kafka_error
        self.consumed: dict[int, int] = {}  # partition -> next offset after what was read
        # run id -> its leaf prefix, once its archive path was checked (bounded: _RUN_IDS)
        self.prefixes: dict[str, bytes] = {}
        self.ctx = self._native_context()

    def _native_context(self) -> tuple[object, ...] | None:
        """What the C path reads, or None when it is not built or the fast walks are off (a
        newer schema: only Python reads it)."""
        walks = armed_walks()
        if _ctake is None or walks is None:
            log.info("archiver: the per-event path runs in Python (no C path here)")
            return None
        sealed, trace, kinds = walks
        return (
            self.prefixes,
            _MIN_AT,
            _MAX_AT,
            LeafRecord,
            Pending,
            sealed,
            trace,
            kinds.index(EventKind.RUN_FINISHED),
            len(kinds),
        )

    def forget(self, partition: int) -> None:
        self.consumed.pop(partition, None)

    def take(self, msgs: list[Message]) -> None:
        """Sort one consumed batch into pending events and checkpoint records."""
        ctx = self.ctx
        if ctx is None:
            for msg in msgs:
                self._take_one(msg)
            return
        assert _ctake is not None  # a context is made only when it is built
        i, n, take, get = 0, len(msgs), _ctake.take, self._partitions.get
        while i < n:
            i, partition, taken = take(msgs, i, ctx)
            if partition is not None:
                get(partition).pending.extend(taken)
                self.consumed[partition] = taken[-1].offset + 1
            elif i < n and not self._admitted(msgs[i], ctx):
                self._take_one(msgs[i])
                i += 1

    def _admitted(self, msg: Message, ctx: tuple[object, ...]) -> bool:
        """True when ``msg`` is the common case but for its run, now admitted: the C path
        then takes it (a run's first record is not walked in Python)."""
        value, partition = msg.value(), msg.partition()
        if value is None or partition is None or msg.headers() or msg.error() is not None:
            return False
        assert _ctake is not None
        fields = _ctake.leaf_fields(value, ctx)
        if fields is None:
            return False
        run_id, _seq, _h, _fin, sealed_at = fields
        if run_id in self.prefixes or not _MIN_AT <= sealed_at <= _MAX_AT:
            return False  # declined for another reason: the Python path says which
        # remembered only while the cache has room; otherwise the Python path takes it
        return isinstance(self._admit(run_id, sealed_at), bytes) and run_id in self.prefixes

    def _take_one(self, msg: Message) -> None:
        """One consumed message, in Python: every case, the reference for the C path.

        The per-event path is flat on purpose (without the C path it bounds the archiver's
        throughput): the value is read by the v1 fast path without building a ``Sealed``,
        and the leaf hash appends ``u64 seq ‖ hash`` to the run's leaf prefix, built once
        per run."""
        err = msg.error()
        if err is not None:
            self._kafka_error(err)
            log.warning("Kafka consumer: %s", err.str())
            return
        partition, offset, value = msg.partition(), msg.offset(), msg.value()
        if partition is None or offset is None:
            return  # only error events lack a position
        self.consumed[partition] = offset + 1
        part = self._partitions.get(partition)
        headers = msg.headers()
        if headers and is_checkpoint_record(headers):
            self._admission.checkpoint(part, msg)
            return
        if value is None:
            qkey = self._refuse(msg, Why.UNDECODABLE, "the record has no value (a tombstone)")
            part.opaque.append((offset, Why.UNDECODABLE.value, qkey))
            return
        try:
            run_id, seq, h, fin, sealed_at = leaf_fields(value)
        except Exception as exc:  # SchemaError, or whatever the parser did not foresee
            why = Why.UNDECODABLE if isinstance(exc, SchemaError) else Why.INTERNAL
            qkey = self._refuse(msg, why, f"{type(exc).__name__}: {exc}")  # names where it was
            part.opaque.append((offset, why.value, qkey))
            return
        pfx = self.prefixes.get(run_id)
        if pfx is None or not _MIN_AT <= sealed_at <= _MAX_AT:
            got = self._admit(run_id, sealed_at)
            if isinstance(got, str):
                self._unarchivable(part, msg, got, run_id, seq, h, fin, sealed_at)
                return
            pfx = got
        if len(h) != HASH_SIZE or not 0 <= seq <= _U64_MAX:
            try:
                leaf_data(run_id, seq, h)  # names what does not fit
                problem = f"run {run_id!r} seq {seq} does not fit a leaf"
            except LogError as exc:
                problem = str(exc)
            qkey = self._refuse(msg, Why.INVALID, problem, run_id, seq)
            part.opaque.append((offset, Why.INVALID.value, qkey))
            return
        hashed = pfx + _U64.pack(seq) + h  # 0x00 ‖ leaf data: RFC 6962's leaf hash input
        rec = _new_tuple(
            LeafRecord,
            (run_id, seq, h, fin, sealed_at, hashed[1:], _sha256(hashed).digest(), value),
        )
        part.pending.append(_new_tuple(Pending, (offset, msg.key(), rec)))

    def _unarchivable(  # noqa: PLR0917 - the fields leaf_fields read, as read
        self,
        part: Part,
        msg: Message,
        problem: str,
        run_id: str,
        seq: int,
        h: bytes,
        fin: bool,
        sealed_at: int,
    ) -> None:
        """Quarantine a record that reads but is no run history the archive can hold, and
        keep it pending: when a checkpoint lists its leaf, the leaf still enters the
        archived tree (the signed root includes it) as a ``quarantined`` hole."""
        qkey = self._refuse(msg, Why.INVALID, problem, run_id, seq)
        offset = msg.offset()
        assert offset is not None  # a consumed record has one
        try:
            leaf = leaf_data(run_id, seq, h)
        except LogError:
            part.opaque.append((offset, Why.INVALID.value, qkey))
            return
        rec = LeafRecord(
            run_id, seq, h, fin, sealed_at, leaf, _sha256(b"\x00" + leaf).digest(), b""
        )
        part.pending.append(Pending(offset, msg.key(), rec))
        part.marked[offset] = (Why.INVALID.value, qkey)

    def _admit(self, run_id: str, sealed_at: int) -> bytes | str:
        """The run's leaf prefix (remembered) if the record can be archived, else why not."""
        problem = unarchivable(run_id, sealed_at)
        if problem is not None:
            return problem
        try:
            pfx = leaf_prefix(run_id)
        except LogError as exc:  # a run id too long for a leaf
            return str(exc)
        if len(self.prefixes) < _RUN_IDS:
            self.prefixes[run_id] = pfx
        return pfx
