"""The witness's decision: cosign a checkpoint only if it extends what this witness cosigned.

Shaped as C2SP tlog-witness ``add-checkpoint``: the input is a signed checkpoint note, the
size the caller believes the witness is at (``old_size``) and a consistency proof from there.
The witness cosigns (c2sp.org/tlog-cosignature) only when the note is signed by a trusted log
key and the proof shows the new tree extends the last one it cosigned for that origin. It
never signs two roots for one size and never goes back: a fork or a rollback is refused, and
the refusal is logged as an ALERT, counted, and kept as an object in the witness's own store,
because it is proof that the holder of the log key showed two histories (docs/log.md,
"Witness"). A genuine checkpoint older than the witness's own (a late joiner re-reading the
log, a client behind) is neither: it gets the spec's 409 with the witness's size, no alert.

Store layout (every object immutable, written once; the checkpoints' layout is read by
verifiers too, so it lives in :mod:`tracevault.archive.witness_layout`)::

    witness/<quoted origin>/checkpoint/<size, 20 digits>   the cosigned checkpoint note
    witness/<quoted origin>/refusal/<time>-<kind>-<size>   JSON: why, and the note refused
    witness/<quoted origin>/head/<size, 20 digits>         JSON: the checkpoint record behind
                                                           a cosigned size and its offset
"""

from __future__ import annotations

import base64
import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from prometheus_client import CollectorRegistry, Counter, Gauge

from tracevault.archive import ObjectStore
from tracevault.archive.witness_layout import (
    checkpoint_key,
    cosigned_checkpoint,
    cosigned_sizes,
    origin_prefix,
)
from tracevault.errors import LogError, NotFoundError
from tracevault.transparency import (
    Checkpoint,
    CheckpointRecord,
    CosignatureSigner,
    NoteVerifier,
    add_cosignature,
    is_partition_origin,
    open_note,
    split_note,
    verify_consistency,
)
from tracevault.witness._known import Known, head_key

__all__ = [
    "ALERT_KINDS",
    "Cosigned",
    "Known",
    "Refused",
    "Witness",
    "WitnessMetrics",
    "checkpoint_key",
    "deployment_origins",
    "cosigned_checkpoint",
    "cosigned_sizes",
    "origin_prefix",
]

log = logging.getLogger(__name__)


def _b64(h: bytes) -> str:
    """A root as the checkpoint's own line shows it."""
    return base64.b64encode(h).decode()


ALERT_KINDS = ("fork", "rollback")


class Refused(Exception):
    """The witness did not cosign. ``kind``: unknown (an origin it does not witness),
    signature, conflict, old, proof, fork, rollback, gap.

    ``fork`` and ``rollback`` are alerts (the log key signed two histories); the others are
    bad or unusable input (``old``: a checkpoint below the witness's size that nothing shows
    to be inconsistent). ``size`` is the witness's own size for the origin, and ``status``
    the answer C2SP tlog-witness gives (409 comes with ``size``; 422: the proof failed).
    """

    def __init__(self, kind: str, origin: str, message: str, size: int, status: int) -> None:
        super().__init__(message)
        self.kind = kind
        self.origin = origin
        self.size = size
        self.status = status

    @property
    def alert(self) -> bool:
        return self.kind in ALERT_KINDS


@dataclass(frozen=True, slots=True)
class Cosigned:
    """The checkpoint note with the witness's cosignature; ``new`` is False when it was
    already cosigned (the same size and root seen again)."""

    origin: str
    size: int
    note: str
    new: bool


class WitnessMetrics:
    """Prometheus metrics of the witness (docs/log.md, "Witness")."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.cosigned = Counter(
            "tracevault_witness_cosigned",
            "Checkpoints this witness cosigned",
            ["origin"],
            registry=self.registry,
        )
        self.refused = Counter(
            "tracevault_witness_refused",
            "Checkpoints refused, by kind (fork and rollback are alerts)",
            ["origin", "kind"],
            registry=self.registry,
        )
        self.size = Gauge(
            "tracevault_witness_size",
            "Tree size of the last checkpoint cosigned, per origin",
            ["origin"],
            registry=self.registry,
        )


def deployment_origins(base: str, prefix: str) -> Callable[[str], bool]:
    """Whether an origin is a partition log of ``<base>/<prefix>`` (any generation): what
    a witness of one deployment witnesses (docs/log.md)."""

    def ours(origin: str) -> bool:
        tail = origin.rpartition("/")[2]
        return tail.isdigit() and is_partition_origin(origin, base, prefix, int(tail))

    return ours


class Witness:
    """Cosigns checkpoints of the logs its trusted keys sign; state lives in ``store``.

    ``retention`` is how long the store locks what the witness writes: a cosigned checkpoint
    and a refusal are evidence. Thread-safe: one lock around each decision, so two callers
    cannot both cosign different roots of one size.
    """

    def __init__(
        self,
        store: ObjectStore,
        signer: CosignatureSigner,
        log_keys: Sequence[NoteVerifier],
        *,
        retention: timedelta,
        metrics: WitnessMetrics | None = None,
        origins: Callable[[str], bool] | None = None,
    ) -> None:
        if not log_keys:
            raise LogError("a witness needs at least one trusted log key to check signatures")
        self.store = store
        self.signer = signer
        self.log_keys = list(log_keys)
        self.retention = retention
        # which logs it witnesses (None: any its log keys sign); another origin gets the
        # spec's 404, before any signature is checked
        self.origins = origins
        self.metrics = metrics or WitnessMetrics()
        self._latest: dict[str, tuple[int, bytes]] = {}
        # the record behind the latest size, when a checkpoint record showed it: what lets
        # an older checkpoint be shown inconsistent, or presented after it (``Known``)
        self._known: dict[str, Known] = {}
        self._lock = threading.Lock()

    def latest(self, origin: str) -> tuple[int, bytes] | None:
        """(size, root) of the last checkpoint cosigned for ``origin``, from the store once."""
        if origin in self._latest:
            return self._latest[origin]
        sizes = cosigned_sizes(self.store, origin)
        if not sizes:
            return None
        cp = self._stored(origin, sizes[-1])
        assert cp is not None
        self._latest[origin] = (cp.size, cp.root)
        try:
            known = Known.from_json(self.store.get(head_key(origin, cp.size)))
        except NotFoundError:
            pass  # cosigned over HTTP (no record), or by a witness before head/ was kept
        except (ValueError, KeyError, LogError) as e:
            log.warning("witness head object of %s@%s ignored: %s", origin, cp.size, e)
        else:
            if known.rec.end == cp.size and known.tree().root() == cp.root:
                self._known[origin] = known
        return self._latest[origin]

    def _stored(self, origin: str, size: int) -> Checkpoint | None:
        try:
            note = self.store.get(checkpoint_key(origin, size)).decode()
        except NotFoundError:
            return None
        # what it reads back it signed itself: a store edited behind its back is an error
        text, _ = open_note(note, [self.signer.verifier])
        return Checkpoint.parse(text)

    def add_checkpoint(
        self,
        note: str,
        old_size: int,
        proof: Sequence[bytes],
        *,
        proof_from_log: bool = False,
        evidence: bytes | None = None,
        head_before: int = 0,
        record: CheckpointRecord | None = None,
        offset: int | None = None,
    ) -> Cosigned:
        """Cosign ``note`` if it extends the last cosigned checkpoint; else :class:`Refused`.

        A proof that fails is a ``fork`` (an alert) only when ``proof_from_log``: computed from
        data the log key signed (a checkpoint record), so the signed tree does not extend the
        cosigned one. A proof a caller sent is only a bad proof (``proof``, 422): anyone can
        send a public checkpoint with garbage. ``evidence`` (the record) is kept with a refusal.

        A checkpoint smaller than the witness's size that it never cosigned is, as C2SP
        tlog-witness says, a 409 with the witness's size (kind ``old``, no alert): a genuine
        old checkpoint (a witness that joined late and re-reads the log) looks just like it.
        It is a ``rollback`` (an alert) only when shown to be one: the record behind the
        witness's size (``Known``) gives another root for the checkpoint's size, or the log
        presented it as its newest after a larger head: ``head_before`` (the follower's view
        of this session) or an ``offset`` above the one of the record the witness cosigned.
        A copy of a checkpoint it cosigned, presented so, is a rollback too (an old note
        replayed); shown at a lower offset it is a re-read.

        ``record`` (the checked record ending at the note's size) and ``offset`` (its offset
        in the partition) are kept with a cosignature, so this holds across a restart.
        """
        with self._lock:
            if self.origins is not None:
                try:
                    origin = Checkpoint.parse(split_note(note)[0]).origin
                except LogError:
                    origin = ""  # not a checkpoint: refused below, as unsigned
                if origin and not self.origins(origin):
                    self.metrics.refused.labels(origin, "unknown").inc()
                    raise Refused(
                        "unknown", origin, f"this witness does not witness {origin}", 0, 404
                    )
            try:
                text, _ = open_note(note, self.log_keys)
                cp = Checkpoint.parse(text)
            except LogError as e:
                raise self._refuse(
                    "signature", "?", 0, f"not a trusted checkpoint: {e}", note, status=403
                ) from None
            return self._decide(
                cp,
                note,
                old_size,
                proof,
                proof_from_log=proof_from_log,
                evidence=evidence,
                head_before=head_before,
                record=record,
                offset=offset,
            )

    def _decide(
        self,
        cp: Checkpoint,
        note: str,
        old_size: int,
        proof: Sequence[bytes],
        *,
        proof_from_log: bool,
        evidence: bytes | None,
        head_before: int,
        record: CheckpointRecord | None,
        offset: int | None,
    ) -> Cosigned:
        latest = self.latest(cp.origin)
        size, root = latest if latest is not None else (0, b"")
        where = f"{cp.origin}@{cp.size}"
        if old_size > cp.size and not proof_from_log:
            # a caller's request (the follower passes its own size, above an older record's)
            raise Refused(
                "conflict",
                cp.origin,
                f"old size {old_size} is larger than the checkpoint's {cp.size}",
                size,
                400,
            )
        if latest is not None and cp.size <= size:
            return self._not_newer(
                cp, note, size, evidence=evidence, head_before=head_before, record=record,
                offset=offset,
            )  # fmt: skip
        if old_size != size:
            raise self._refuse(
                "conflict",
                cp.origin,
                size,
                f"{where}: proof from size {old_size}, but this witness is at {size}",
                note,
                evidence=evidence,
            )
        try:
            verify_consistency(size, cp.size, proof, root if latest else b"", cp.root)
        except LogError as e:
            raise self._refuse(
                "fork" if proof_from_log else "proof",
                cp.origin,
                size,
                f"{where} is not consistent with {cp.origin}@{size} that this witness "
                f"cosigned: {e}",
                note,
                status=422,
                evidence=evidence,
            ) from None
        return self._cosign(cp, note, record, offset)

    def _not_newer(
        self,
        cp: Checkpoint,
        note: str,
        size: int,
        *,
        evidence: bytes | None,
        head_before: int,
        record: CheckpointRecord | None,
        offset: int | None,
    ) -> Cosigned:
        """A checkpoint no larger than the newest cosigned: a re-read of one already
        cosigned, or a replay, a fork or an older one, each refused (docs/log.md, "Witness")."""
        where = f"{cp.origin}@{cp.size}"
        seen = self._stored(cp.origin, cp.size)
        if seen is not None and seen.root == cp.root:
            if cp.size < size:
                shown = self._shown_after(cp, size, head_before, offset)
                if shown:
                    raise self._refuse(
                        "rollback",
                        cp.origin,
                        size,
                        f"{where} (root {_b64(cp.root)}), a checkpoint this witness "
                        f"cosigned before {cp.origin}@{size}, was presented again as the "
                        f"log's newest {shown}: an old checkpoint replayed, the log "
                        f"rolled back from {size} to {cp.size} leaves",
                        note,
                        evidence=evidence,
                    )
            elif record is not None and cp.origin not in self._known:
                self._known[cp.origin] = Known.of(record, offset)  # a re-read shows it
            stored = self.store.get(checkpoint_key(cp.origin, cp.size)).decode()
            return Cosigned(cp.origin, cp.size, stored, new=False)
        if seen is not None:
            raise self._refuse(
                "fork",
                cp.origin,
                size,
                f"{where} has root {_b64(cp.root)}, this witness cosigned "
                f"{cp.origin}@{cp.size} with root {_b64(seen.root)}: the log forked",
                note,
                evidence=evidence,
            )
        raise self._older(cp, note, size, head_before=head_before, offset=offset, evidence=evidence)

    def _cosign(
        self, cp: Checkpoint, note: str, record: CheckpointRecord | None, offset: int | None
    ) -> Cosigned:
        """Cosign a checkpoint found consistent, and keep it (with its head) before it counts."""
        cosigned = add_cosignature(note, self.signer)
        known = Known.of(record, offset) if record is not None and record.end == cp.size else None
        if known is not None:  # first: a checkpoint object always finds its head beside it
            self.store.put(
                head_key(cp.origin, cp.size), known.to_json(), retain_until=self._until()
            )
        self.store.put(
            checkpoint_key(cp.origin, cp.size), cosigned.encode(), retain_until=self._until()
        )
        self._latest[cp.origin] = (cp.size, cp.root)
        if known is not None:
            self._known[cp.origin] = known
        else:
            self._known.pop(cp.origin, None)
        self.metrics.cosigned.labels(cp.origin).inc()
        self.metrics.size.labels(cp.origin).set(cp.size)
        log.info("cosigned %s@%s", cp.origin, cp.size)
        return Cosigned(cp.origin, cp.size, cosigned, new=True)

    def _shown_after(self, cp: Checkpoint, size: int, head_before: int, offset: int | None) -> str:
        """How the log presented ``cp`` (below ``size``) as newer than a larger head, or ""."""
        if head_before > cp.size:
            return f"after {cp.origin}@{head_before}"
        known = self._known.get(cp.origin)
        if (
            offset is not None
            and known is not None
            and known.offset is not None
            and offset > known.offset
        ):
            return (
                f"at offset {offset}, after the record of {cp.origin}@{size} at offset "
                f"{known.offset}"
            )
        return ""

    def _older(
        self,
        cp: Checkpoint,
        note: str,
        size: int,
        *,
        head_before: int,
        offset: int | None,
        evidence: bytes | None,
    ) -> Refused:
        """A checkpoint below the witness's size that it never cosigned: old, or a rollback."""
        where = f"{cp.origin}@{cp.size}"
        known = self._known.get(cp.origin)
        expect = known.root_at(cp.size) if known is not None else None
        if expect is not None and expect != cp.root:
            return self._refuse(
                "rollback",
                cp.origin,
                size,
                f"{where} has root {_b64(cp.root)}, but the first {cp.size} leaves of "
                f"{cp.origin}@{size}, the last checkpoint this witness cosigned, have root "
                f"{_b64(expect)}: the log was rolled back to another history",
                note,
                evidence=evidence,
            )
        shown = self._shown_after(cp, size, head_before, offset)
        if shown:
            return self._refuse(
                "rollback",
                cp.origin,
                size,
                f"{where} (root {_b64(cp.root)}) was presented as the log's newest checkpoint "
                f"{shown}: the log was rolled back (this witness is at {size})",
                note,
                evidence=evidence,
            )
        self.metrics.refused.labels(cp.origin, "old").inc()
        log.debug("%s is older than %s@%s, the witness's size: 409", where, cp.origin, size)
        return Refused("old", cp.origin, f"{where} is older than this witness's {size}", size, 409)

    def _until(self) -> datetime:
        return datetime.now(UTC) + self.retention

    def refuse(
        self,
        kind: str,
        origin: str,
        message: str,
        note: str,
        *,
        evidence: bytes | None = None,
        detail: dict[str, int] | None = None,
    ) -> Refused:
        """Record a refusal decided outside :meth:`add_checkpoint` (a follower's gap)."""
        with self._lock:
            latest = self.latest(origin) if origin != "?" else None
            size = latest[0] if latest else 0
            return self._refuse(kind, origin, size, message, note, evidence=evidence, detail=detail)

    def refused_before(self, origin: str, kind: str, size: int) -> bool:
        """Whether the store holds a ``kind`` refusal made at ``size`` (one listing): what
        keeps a stalled witness from storing the same refusal at every record and restart."""
        objs = self.store.list(f"{origin_prefix(origin)}refusal/")
        return any(o.key.endswith(f"-{kind}-{size}") for o in objs)

    def _refuse(
        self,
        kind: str,
        origin: str,
        size: int,
        message: str,
        note: str,
        *,
        status: int = 409,
        evidence: bytes | None = None,
        detail: dict[str, int] | None = None,
    ) -> Refused:
        """Log, count and keep the refusal; an alert when the log key signed two histories."""
        self.metrics.refused.labels(origin, kind).inc()
        if kind in ALERT_KINDS:
            log.error("ALERT witness refused %s of %s: %s", kind, origin, message)
        else:
            log.warning("witness refused (%s) a checkpoint of %s: %s", kind, origin, message)
        now = time.time()
        record = {
            "kind": kind,
            "origin": origin,
            "witness_size": size,
            "message": message,
            "note": note,
            "time": datetime.fromtimestamp(now, UTC).isoformat(),
        }
        record.update(detail or {})
        if evidence is not None:
            record["record_b64"] = base64.b64encode(evidence).decode()
        stamp = datetime.fromtimestamp(now, UTC).strftime("%Y%m%dT%H%M%S.%fZ")
        key = f"{origin_prefix(origin)}refusal/{stamp}-{kind}-{size}"
        if kind != "signature":  # anyone can send a bad note: counted, never stored
            self.store.put(
                key,
                json.dumps(record, sort_keys=True).encode(),
                retain_until=self._until(),
            )
        return Refused(kind, origin, message, size, status)
