"""The signed log's checks L1-L4 inside ``verify``, whatever the source (docs/log.md).

A source hands ``verify`` either ready evidence (``LoadedRun.log_evidence``: a bundle's
tlog-proofs, the archive's tiles) or the checkpoint records it read beside the run
(``LoadedRun.log_checkpoints``: the sealed topic), from which :func:`run_evidence` gathers it
with the trusted keys. Then :func:`check_log` runs ``check_run_log`` before the chain checks,
so a record the sequencer never logged is named before anything trusts its chain.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tracevault.config import Settings
from tracevault.errors import ConfigError, LogError, SchemaError
from tracevault.log import (
    LOG_CHECKS,
    Checkpoint,
    NoteVerifier,
    RunEvents,
    RunLeaf,
    RunLogEvidence,
    check_run_log,
    leaf_hashes,
    load_verifiers,
    load_witness_verifiers,
    run_log_evidence,
)
from tracevault.replayer._results import LoadedRun
from tracevault.schemas import EventKind, decode_event
from tracevault.schemas.fast import SealedColumns

__all__ = ["LogPolicy", "check_log", "run_evidence"]

#: The warning every verify without trusted keys prints: the chain alone proves nothing
#: about who wrote it.
NOT_CHECKED = (
    "the signed log was NOT checked (no trusted key): this proves the chain only, which "
    "anyone can recompute; give --trusted-key (or set TRACEVAULT_LOG_VKEYS)"
)


@dataclass(frozen=True, slots=True)
class LogPolicy:
    """The public keys a verifier trusts: the log's, and witnesses' with how many must cosign."""

    keys: tuple[NoteVerifier, ...]
    witnesses: tuple[NoteVerifier, ...] = ()
    min_witnesses: int = 0

    @classmethod
    def of(
        cls,
        settings: Settings,
        trusted: Sequence[str] = (),
        witness: Sequence[str] = (),
        min_witnesses: int | None = None,
    ) -> LogPolicy | None:
        """From ``settings.log_vkeys`` plus ``trusted``; None when no key is trusted at all."""
        conf = settings.log_vkeys.strip()
        vkeys = [] if not conf else [conf] if conf.startswith("@") else conf.split(",")
        vkeys = [v.strip() for v in [*vkeys, *trusted] if v.strip()]
        need = min_witnesses if min_witnesses is not None else (1 if witness else 0)
        if not vkeys:
            if witness or need:
                raise ConfigError(
                    "--witness-key/--min-witnesses need the log's key too: give --trusted-key"
                )
            return None
        wit = tuple(load_witness_verifiers(witness))
        if need > len(wit):
            raise ConfigError(
                f"--min-witnesses {need} but only {len(wit)} --witness-key given: it can never hold"
            )
        return cls(tuple(load_verifiers(vkeys)), wit, need)


def run_evidence(
    run: LoadedRun, verifiers: Sequence[NoteVerifier], leaves: Sequence[bytes] | None = None
) -> RunLogEvidence | None:
    """The run's log evidence: the source's own, or gathered from its checkpoint records.

    ``leaves``: the leaf hashes of the run's records, if the caller hashed them already.
    """
    if run.log_evidence is not None:
        return run.log_evidence
    if run.log_origin is None or not run.log_checkpoints:
        return None
    rows = run.records.rows
    seqs = [r["seq"] for r in rows]
    if leaves is None:
        leaves = leaf_hashes(run.run_id, seqs, [r["hash"] for r in rows])
    found = list(map(RunLeaf, seqs, leaves, run.objects))
    return run_log_evidence(run.log_origin, run.run_id, found, run.log_checkpoints, verifiers)


def _l3_required(run: LoadedRun, require_finished: bool) -> bool:
    """L3 is asked of every run its source calls finished, and of every bundle.

    A bundle's manifest is not signed, so it cannot excuse a missing RUN_FINISHED: a bundle
    of a run still in progress fails L3, as one whose tail was cut off must.
    """
    return (
        require_finished
        or bool(run.expected_finished)
        or run.final_receipt is not None
        or run.source == "bundle"
    )


def check_log(
    run: LoadedRun,
    policy: LogPolicy,
    *,
    require_finished: bool,
    columns: SealedColumns | None = None,
) -> tuple[list[str], list[str], Checkpoint, RunLogEvidence]:
    """L1-L4 on ``run``; returns the checks listed, warnings, the checkpoint and evidence.

    ``columns``: the run's records walked once (``SealedRows.columns``), read instead of
    its rows; the last event's kind is the decoded one's where the walk decoded it.
    """
    where = run.objects[0] if run.objects else run.source
    if columns is None:
        rows = run.records.rows
        seqs, hashes = [r["seq"] for r in rows], [r["hash"] for r in rows]
        raws = [r["raw"] for r in rows[-1:]]
        decoded = None
    else:
        seqs, hashes, raws = columns.seqs, columns.hashes, columns.raws[-1:]
        decoded = columns.events[-1] if columns.events else None
    leaves = None  # hashed once: the topic's evidence is gathered by them, then L2 reads them
    if run.log_evidence is None and run.log_origin is not None and run.log_checkpoints:
        leaves = leaf_hashes(run.run_id, seqs, hashes)
    evidence = run_evidence(run, policy.keys, leaves)
    if evidence is None:
        raise LogError(
            f"L1 signature: run {run.run_id} from the {run.source} ({where}) carries no "
            "signed-log evidence: it was sealed or exported before the signed log, or its "
            "checkpoints were removed",
            run=run.run_id,
            obj=where,
        )
    finishes = False
    if decoded is not None:
        finishes = decoded.kind is EventKind.RUN_FINISHED
    elif raws:
        try:
            finishes = decode_event(raws[0], check_json=False).kind is EventKind.RUN_FINISHED
        except SchemaError:  # an unreadable event is check 5's to name
            finishes = False
    events = RunEvents(seqs, hashes, finishes)
    need_end = _l3_required(run, require_finished)
    cp = check_run_log(
        run.run_id,
        events,
        evidence,
        policy.keys,
        witnesses=policy.witnesses,
        min_witnesses=policy.min_witnesses,
        require_finished=need_end,
        leaves=leaves,
    )
    checks = list(LOG_CHECKS)  # the checkpoint they held against: VerifyReport.checkpoint
    warnings: list[str] = []
    if not need_end:
        checks[2] = "L3 end: not required (the source says the run is still in progress)"
        if not finishes:
            warnings.append(
                "the run has no RUN_FINISHED in the signed log yet: it is in progress, or was "
                "cut short (--require-finished makes this fail)"
            )
    return checks, warnings, cp, evidence
