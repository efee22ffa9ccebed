"""Bringing witnesses' cosignatures to ``verify`` and ``export`` (docs/log.md, "Witness").

A witness keeps its cosigned checkpoints in its own store, never in the topic or the
archive, so ``--min-witnesses`` could never hold unless the verifier reads them there. Given
the witness stores (``--witness-store URL``), :func:`witnessed` picks, for the run's log
origin, the smallest size that enough stores cosigned and that covers the run's last leaf,
re-anchors the run's evidence to the log's own signed checkpoint of exactly that size, and
merges the stores' cosignature lines into it (``with_cosignatures``: the text must be the
same checkpoint, so the log's signature still verifies on the body). ``check_run_log`` then
counts the trusted witnesses as for any note. Nothing read from a store is trusted: a line
counts only if it verifies under a ``--witness-key``.

Re-anchoring: from the topic, the checkpoint records are read on through the record of
that size (the witness cosigns the end of a record, so one exists); from the archive, the
tiles prove inclusion at any size up to the newest archived checkpoint, which then becomes
one of the others with its consistency proof.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence

from tracevault.archive import ObjectStore, open_store, read_log_run
from tracevault.archive.witness_layout import checkpoint_key, cosigned_sizes
from tracevault.config import Settings
from tracevault.errors import LogError
from tracevault.replayer._results import LoadedRun
from tracevault.replayer.load.archive import originals
from tracevault.replayer.load.log_policy import LogPolicy, run_evidence
from tracevault.transparency import (
    Checkpoint,
    LeafProofs,
    RunLogEvidence,
    split_note,
    with_cosignatures,
)

__all__ = ["pick_witnessed_size", "with_witness_stores", "witnessed"]

log = logging.getLogger(__name__)

#: Re-reads the run with its evidence against the given note (archive) or size (topic).
Reanchor = Callable[[int, str], LoadedRun]


def pick_witnessed_size(held: Sequence[Sequence[int]], need: int, least: int) -> int | None:
    """The smallest size >= ``need`` held by at least ``least`` stores (else by the most)."""
    counts: dict[int, int] = {}
    for sizes in held:
        for s in set(sizes):
            if s >= need:
                counts[s] = counts.get(s, 0) + 1
    if not counts:
        return None
    best = max(counts.values())
    return min(s for s, c in counts.items() if c >= min(least, best))


def _size(note: str) -> int:
    return Checkpoint.parse(split_note(note)[0]).size


def witnessed(
    run: LoadedRun,
    policy: LogPolicy,
    stores: Sequence[ObjectStore],
    reanchor: Reanchor,
) -> LoadedRun:
    """``run`` with its log evidence against a checkpoint carrying the stores' cosignatures.

    Unchanged when no store is given, the run has no log evidence (L1 then names what is
    missing), or no witness is required and none cosigned the run yet. Raises
    :class:`LogError` naming the origin and stores when witnesses are required and none of
    them cosigned a checkpoint covering the run.
    """
    if not stores:
        return run
    evidence = run_evidence(run, policy.keys)
    if evidence is None:
        return run
    origin = evidence.origin
    proofs = evidence.leaves  # the indexes alone: LeafProofs would build a proof per event
    indexes = proofs.indexes if isinstance(proofs, LeafProofs) else [p.index for p in proofs]
    need = max(indexes, default=-1) + 1
    held = [cosigned_sizes(s, origin) for s in stores]
    size = pick_witnessed_size(held, need, max(policy.min_witnesses, 1))
    if size is None and not policy.min_witnesses:
        return run  # none required (e.g. TRACEVAULT_WITNESS_STORES set, no --witness-key)
    if size is None:
        raise LogError(
            f"L1 signature: no witness store ({', '.join(s.url for s in stores)}) holds a "
            f"cosigned checkpoint of {origin} at size >= {need} (covering run {run.run_id}): "
            "the witness has not caught up, or follows another log",
            run=run.run_id,
            checkpoint=f"{origin}@{need}",
        )
    notes = [
        (s.url, s.get(checkpoint_key(origin, size)).decode("utf-8", "replace"))
        for s, sizes in zip(stores, held, strict=True)
        if size in sizes
    ]
    if _size(evidence.checkpoint) != size:
        log.info("re-anchoring run %s to the witnessed checkpoint %s@%d", run.run_id, origin, size)
        run = reanchor(size, notes[0][1])
        got = run_evidence(run, policy.keys)
        if got is None or _size(got.checkpoint) != size:
            raise LogError(
                f"L1 signature: the {run.source} has no signed checkpoint of {origin} at the "
                f"witnessed size {size} to prove run {run.run_id} against",
                run=run.run_id,
                checkpoint=f"{origin}@{size}",
            )
        evidence = got
    note = evidence.checkpoint
    for url, other in notes:
        note = with_cosignatures(note, other, f"the checkpoint in witness store {url}")
    where = evidence.checkpoint_obj or f"{notes[0][0]} {checkpoint_key(origin, size)}"
    merged: RunLogEvidence = dataclasses.replace(evidence, checkpoint=note, checkpoint_obj=where)
    return dataclasses.replace(run, log_evidence=merged)


def _reanchor(settings: Settings, run: LoadedRun) -> Reanchor:
    """How ``run``'s source re-proves it against a witnessed checkpoint of another size."""

    def topic(size: int, _note: str) -> LoadedRun:
        # Only the topic needs a Kafka client (docs/design.md, "Layout").
        from tracevault.replayer.load._topic import load_from_topic  # noqa: PLC0415

        return load_from_topic(settings, run.run_id, with_log=True, log_until=size)

    def archive(_size: int, note: str) -> LoadedRun:
        store = open_store(settings.archive_url, settings, create=False)
        try:
            src = originals(store, run.run_id)  # A0 here too: the proofs' tiles as locked
            lr = read_log_run(
                src.get,
                lambda prefix: [i.key for i in src.list(prefix)],
                run.run_id,
                run.log_index_keys,
                anchor=note,
            )
        finally:
            store.close()
        return dataclasses.replace(run, log_evidence=lr.evidence)

    return topic if run.source == "topic" else archive


def with_witness_stores(
    settings: Settings, run: LoadedRun, policy: LogPolicy | None, urls: Sequence[str]
) -> LoadedRun:
    """:func:`witnessed` over the witness stores at ``urls`` (``--witness-store``), or else
    those of ``settings.witness_stores`` (env ``TRACEVAULT_WITNESS_STORES``)."""
    if not urls:
        urls = [u.strip() for u in settings.witness_stores.split(",") if u.strip()]
    if not urls or policy is None:
        return run
    stores = [open_store(u, settings, create=False) for u in urls]
    try:
        return witnessed(run, policy, stores, _reanchor(settings, run))
    finally:
        for s in stores:
            s.close()
