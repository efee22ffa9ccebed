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
"""

from __future__ import annotations

import base64
import json
import logging
import threading
import time
from collections.abc import Sequence
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
from tracevault.log import (
    EMPTY_ROOT,
    Checkpoint,
    CompactTree,
    CosignatureSigner,
    NoteVerifier,
    add_cosignature,
    hash_children,
    open_note,
    verify_consistency,
)

__all__ = [
    "ALERT_KINDS",
    "Cosigned",
    "Refused",
    "Witness",
    "WitnessMetrics",
    "checkpoint_key",
    "cosigned_checkpoint",
    "cosigned_sizes",
    "origin_prefix",
]

log = logging.getLogger(__name__)

ALERT_KINDS = ("fork", "rollback")


class Refused(Exception):
    """The witness did not cosign. ``kind``: signature, conflict, old, proof, fork, rollback,
    gap.

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


def prefix_root(tree: CompactTree, size: int) -> bytes | None:
    """The root of the first ``size`` leaves of ``tree`` when it follows from its compact
    hashes alone (``size`` is a sum of its leading subtrees), else None.

    Why: a compact tree of ``n`` is the roots of the perfect subtrees of ``[0, n)``; a smaller
    tree ending on one of their boundaries is those leading subtrees, so its root is known and
    whether a checkpoint of that size is a prefix of ``n`` is decided without any other node.
    """
    if size == 0:
        return EMPTY_ROOT
    end, count = 0, 0
    for level in reversed(range(tree.size.bit_length())):
        if end == size:
            break
        if tree.size >> level & 1:
            end += 1 << level
            count += 1
    if end != size or count == 0:
        return None
    root = tree.hashes[count - 1]
    for h in reversed(tree.hashes[: count - 1]):
        root = hash_children(h, root)
    return root


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
    ) -> None:
        if not log_keys:
            raise LogError("a witness needs at least one trusted log key to check signatures")
        self.store = store
        self.signer = signer
        self.log_keys = list(log_keys)
        self.retention = retention
        self.metrics = metrics or WitnessMetrics()
        self._latest: dict[str, tuple[int, bytes]] = {}
        # the compact tree at the latest size, when a checkpoint record showed it: what lets
        # an older checkpoint be shown inconsistent (``prefix_root``); memory only
        self._trees: dict[str, CompactTree] = {}
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
        tree: CompactTree | None = None,
        head_before: int = 0,
    ) -> Cosigned:
        """Cosign ``note`` if it extends the last cosigned checkpoint; else :class:`Refused`.

        A proof that fails is a ``fork`` (an alert) only when ``proof_from_log``: computed from
        data the log key signed (a checkpoint record), so the signed tree does not extend the
        cosigned one. A proof a caller sent is only a bad proof (``proof``, 422): anyone can
        send a public checkpoint with garbage. ``evidence`` (the record) is kept with a refusal.

        A checkpoint smaller than the witness's size that it never cosigned is, as C2SP
        tlog-witness says, a 409 with the witness's size (kind ``old``, no alert): a genuine
        old checkpoint (a witness that joined late and re-reads the log) looks just like it.
        It is a ``rollback`` (an alert) only when shown to be one: ``tree`` (the compact tree
        at the checkpoint's size, from a verified record) at the witness's size proves it is
        not a prefix, or ``head_before`` says the log showed a larger head before presenting
        this one as its newest (the follower's view of the topic).
        """
        with self._lock:
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
                tree=tree,
                head_before=head_before,
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
        tree: CompactTree | None,
        head_before: int,
    ) -> Cosigned:
        latest = self.latest(cp.origin)
        size, root = latest if latest is not None else (0, b"")
        where = f"{cp.origin}@{cp.size}"
        if latest is not None and cp.size <= size:
            seen = self._stored(cp.origin, cp.size)
            if seen is not None and seen.root == cp.root:
                if cp.size == size and tree is not None:  # a re-read shows its compact tree
                    self._trees.setdefault(cp.origin, tree)
                stored = self.store.get(checkpoint_key(cp.origin, cp.size)).decode()
                return Cosigned(cp.origin, cp.size, stored, new=False)
            if seen is not None:
                raise self._refuse(
                    "fork",
                    cp.origin,
                    size,
                    f"{where} has root {cp.root.hex()[:16]}…, this witness cosigned "
                    f"{seen.root.hex()[:16]}… for that size: the log forked",
                    note,
                    evidence=evidence,
                )
            raise self._older(cp, note, size, head_before, evidence)
        if old_size > cp.size:
            raise Refused(
                "conflict",
                cp.origin,
                f"old size {old_size} is larger than the checkpoint's {cp.size}",
                size,
                400,
            )
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
        cosigned = add_cosignature(note, self.signer)
        self.store.put(
            checkpoint_key(cp.origin, cp.size), cosigned.encode(), retain_until=self._until()
        )
        self._latest[cp.origin] = (cp.size, cp.root)
        if tree is not None and tree.size == cp.size:
            self._trees[cp.origin] = tree
        else:
            self._trees.pop(cp.origin, None)
        self.metrics.cosigned.labels(cp.origin).inc()
        self.metrics.size.labels(cp.origin).set(cp.size)
        log.info("cosigned %s@%s", cp.origin, cp.size)
        return Cosigned(cp.origin, cp.size, cosigned, new=True)

    def _older(
        self, cp: Checkpoint, note: str, size: int, head_before: int, evidence: bytes | None
    ) -> Refused:
        """A checkpoint below the witness's size that it never cosigned: old, or a rollback."""
        where = f"{cp.origin}@{cp.size}"
        mine = self._trees.get(cp.origin)
        expect = prefix_root(mine, cp.size) if mine is not None else None
        if expect is not None and expect != cp.root:
            return self._refuse(
                "rollback",
                cp.origin,
                size,
                f"{where} is not a prefix of {cp.origin}@{size}, the last checkpoint this "
                f"witness cosigned (its first {cp.size} leaves have root "
                f"{expect.hex()[:16]}…): the log was rolled back to another history",
                note,
                evidence=evidence,
            )
        if head_before > cp.size:
            return self._refuse(
                "rollback",
                cp.origin,
                size,
                f"{where} was presented as the log's newest checkpoint after "
                f"{cp.origin}@{head_before}: the log was rolled back (this witness is at {size})",
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
