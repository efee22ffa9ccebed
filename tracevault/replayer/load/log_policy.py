"""The signed log's checks L1-L4 inside ``verify``, whatever the source (docs/log.md).

A source hands ``verify`` either ready evidence (``LoadedRun.log_evidence``: a bundle's
tlog-proofs, the archive's tiles) or the checkpoint records it read beside the run
(``LoadedRun.log_checkpoints``: the sealed topic), from which :func:`run_evidence` gathers it
with the trusted keys. Then :func:`check_log` runs ``check_run_log`` before the chain checks,
so a record the sequencer never logged is named before anything trusts its chain.

Fail closed (docs/log.md, "Verify fails closed"): without a trusted key nothing is
evidence, so a report without the log is ``unverified`` unless the caller waived it
(:data:`CHAIN_ONLY`). The deployment fixes the origin every checkpoint must name
(:func:`check_origin`), and :class:`EndRule` decides when a run without RUN_FINISHED fails L3.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from tracevault.config import Settings
from tracevault.errors import ConfigError, LogError, SchemaError
from tracevault.replayer._results import LoadedRun
from tracevault.schemas import EventKind, TraceEvent, decode_event
from tracevault.schemas.fast import SealedColumns
from tracevault.transparency import (
    LOG_CHECKS,
    Checkpoint,
    NoteVerifier,
    RunEvents,
    RunLeaf,
    RunLogEvidence,
    check_run_log,
    is_partition_origin,
    leaf_hashes,
    load_verifiers,
    load_witness_verifiers,
    run_log_evidence,
)

__all__ = [
    "CHAIN_ONLY",
    "NOT_VERIFIED",
    "NO_AGENT_CHECK",
    "UNVERIFIED_PROVENANCE",
    "UNVERIFIED",
    "EndRule",
    "LogPolicy",
    "check_log",
    "check_origin",
    "last_event",
    "run_evidence",
    "unverified_provenance",
    "unverified_record",
]

#: Why a verify without a trusted log key fails (exit 1, status ``unverified``).
UNVERIFIED = (
    "unverified: no trusted log key was given, so the signed log was not checked and this "
    "is not evidence (anyone who can write the store or the topic can recompute the chain). "
    "Give --trusted-key VKEY|@FILE or set TRACEVAULT_LOG_VKEYS (`tracevault keys show "
    "log.key` prints the vkey); --no-log-check checks the chain alone"
)


def unverified_record(run_id: str | None, doing: str) -> LogError:
    """Why ``replay run``/``diff``/``batch``/``export --otel`` refuse a run no trusted log key
    checked (the run's status is ``unverified``, exit 1): ``doing`` is what ``--no-verify``
    then does (``"re-runs"``, ``"compares"``, ``"exports"``). ``run_id`` None: every run
    (a batch)."""
    what = f"run {run_id} was" if run_id is not None else "the runs were"
    return LogError(
        f"unverified: {what} not checked against the signed log (no trusted log key was "
        "given), so it is not the record: anyone who can write the store or the topic can "
        "rewrite a run and re-chain it. Give --trusted-key VKEY|@FILE or set "
        "TRACEVAULT_LOG_VKEYS (`tracevault keys show log.key` prints the vkey); --no-verify "
        f"{doing} it unverified, knowingly",
        run=run_id,
    )


#: Why a verify without a trusted agent vkey fails (exit 1, provenance ``unverified``), or of
#: a run recorded before agent identity: provenance is required like the log key.
UNVERIFIED_PROVENANCE = (
    "unverified provenance: {why}, so who wrote the run's events was not checked and this is "
    "not evidence (anyone who can write raw can record as any agent). Give --agent-key "
    "AGENT_ID=VKEY or set TRACEVAULT_AGENT_VKEYS; --no-agent-check accepts it knowingly"
)


def unverified_provenance(run_id: str | None, doing: str, why: str | None = None) -> LogError:
    """Why a command that takes a run as the record refuses one whose provenance was not
    proven (no trusted agent vkey; ``why``: else, e.g. recorded before agent identity)."""
    what = f"run {run_id}" if run_id is not None else "the runs"
    why = why or "no trusted agent vkey was given"
    return LogError(
        f"unverified: who wrote {what} was not checked ({why}), so it is not the record: "
        "anyone who can write raw can record as any agent. Give --agent-key AGENT_ID=VKEY "
        "or set TRACEVAULT_AGENT_VKEYS; --no-agent-check accepts it knowingly, --no-verify "
        f"{doing} it unverified",
        run=run_id,
    )


#: What ``--no-agent-check`` means, printed on stderr every time it is used.
NO_AGENT_CHECK = (
    "--no-agent-check: agent identity was NOT checked: who wrote the run's events is not "
    "proven (a raw writer can record under any agent_id)"
)

#: What ``--no-log-check`` means, printed every time it is used.
CHAIN_ONLY = (
    "--no-log-check: the signed log was NOT checked. Only the hash chain was: it shows the "
    "records agree with each other, and proves nothing against whoever can write the store "
    "or the topic (altered, removed or added events re-chain with plain SHA-256)"
)

#: What ``--no-verify`` (``replay run``, ``diff``, ``batch``, ``export --otel``) means, printed
#: every time it is used; ``{run}`` is the run id.
NOT_VERIFIED = (
    "--no-verify: run {run} was NOT verified: neither its signed log nor its hash chain was "
    "checked, so it is taken as the store holds it, which is not evidence of what happened"
)


@dataclass(frozen=True, slots=True)
class LogPolicy:
    """The public keys a verifier trusts: the log's, and witnesses' with how many must cosign."""

    keys: tuple[NoteVerifier, ...]
    witnesses: tuple[NoteVerifier, ...] = ()
    min_witnesses: int = 0
    #: The deployment's ``log_origin`` and topic prefix, which fix the origin of every
    #: checkpoint (:func:`check_origin`); None: any origin (a policy made of bare keys).
    origin_base: str | None = None
    prefix: str | None = None

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
        return cls(
            tuple(load_verifiers(vkeys)), wit, need, settings.log_origin, settings.topic_prefix
        )


def check_origin(origin: str, policy: LogPolicy, where: str) -> None:
    """L1 origin: ``origin`` is a partition log of the configured deployment, or LogError.

    ``<log_origin>/<prefix>/[g<generation>/]<partition>``: any generation (a new cluster is
    a new log of the same deployment) and any partition, but the base and prefix the
    settings name. A checkpoint of another deployment, signed by the same key, proves the
    run was sealed there, not here.
    """
    base, prefix = policy.origin_base, policy.prefix
    if base is None or prefix is None:
        return
    part = origin.rpartition("/")[2]
    if part.isdigit() and is_partition_origin(origin, base, prefix, int(part)):
        return
    want = f"{base}/{prefix}/{part if part.isdigit() else '<partition>'}"
    raise LogError(
        f"L1 origin: {where} is for log {origin!r}, not this deployment's {want!r} "
        f"(log_origin {base!r}, topic prefix {prefix!r}, any generation): the run was sealed "
        "by another deployment; to verify it as that deployment's, give its --prefix",
        checkpoint=where,
    )


def last_event(run: LoadedRun, columns: SealedColumns | None = None) -> TraceEvent | None:
    """The run's last event decoded (None if it cannot be read: check 5 names that)."""
    if columns is not None:
        if columns.events and columns.events[-1] is not None:
            return columns.events[-1]
        raws = columns.raws[-1:]
    else:
        raws = [r["raw"] for r in run.records.rows[-1:]]
    if not raws:
        return None
    try:
        return decode_event(raws[0], check_json=False)
    except SchemaError:
        return None


@dataclass(frozen=True, slots=True)
class EndRule:
    """When a run without RUN_FINISHED fails (L3 with the log, F without): docs/log.md.

    ``required``: always (``--require-finished``). ``idle_close_s``: the CLI's default, the
    sequencer's idle-close horizon (``sequencer_idle_close_s``): an unfinished run passes
    only if it can be live, that is the sequencer's head says it is open and its last event
    is younger than the horizon (plus ``skew_s``), after which the sequencer would have
    closed it. None (``--allow-unfinished``, the library's default): an unfinished run
    passes with a warning. A run its source calls finished, and every bundle, must end.
    """

    required: bool = False
    idle_close_s: float | None = None
    skew_s: float = 0.0

    def reason(
        self, run: LoadedRun, last: TraceEvent | None, now_us: int | None = None
    ) -> str | None:
        """Why ``run`` must end with RUN_FINISHED, or None when it may be in progress."""
        if self.required:
            return "--require-finished"
        if run.expected_finished or run.final_receipt is not None or run.log_head is not None:
            return f"the {run.source} says the run finished"
        if run.source == "bundle":  # its manifest is not signed: it cannot excuse a missing end
            return "a bundle holds a whole run"
        if self.idle_close_s is None:
            return None
        now = time.time_ns() // 1000 if now_us is None else now_us
        horizon = self.idle_close_s + self.skew_s
        if last is not None and now - last.at > horizon * 1_000_000:
            age = (now - last.at) / 3_600_000_000
            return (
                f"its last event is {age:.1f} h old, past the idle-close horizon "
                f"(sequencer_idle_close_s {self.idle_close_s:g} s): the sequencer closes an "
                "idle run with RUN_FINISHED, so a run without one was cut off"
            )
        if run.source == "topic" and run.expected_finished is False:
            return None  # live: the sequencer's head says the run is open
        return (
            f"the {run.source} cannot show the run is live (the sequencer's head can: "
            "--from topic); --allow-unfinished accepts a run still in progress"
        )


def end_missing(run: LoadedRun, last_seq: int, reason: str, where: str) -> str:
    """What a failed L3/F names: the missing end, after the last seq held, and why it counts."""
    return (
        f"run {run.run_id} has no RUN_FINISHED in {where}: its end, after seq {last_seq}, is "
        f"missing (cut short, or its tail was removed), and the run must end because {reason}"
    )


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


def check_log(
    run: LoadedRun,
    policy: LogPolicy,
    *,
    end: EndRule,
    columns: SealedColumns | None = None,
) -> tuple[list[str], list[str], Checkpoint, RunLogEvidence]:
    """L1-L4 on ``run``; returns the checks listed, warnings, the checkpoint and evidence.

    ``end`` says when a run without RUN_FINISHED fails L3. ``columns``: the run's records
    walked once (``SealedRows.columns``), read instead of its rows; the last event is the
    decoded one's where the walk decoded it.
    """
    where = run.objects[0] if run.objects else run.source
    if columns is None:
        rows = run.records.rows
        seqs, hashes = [r["seq"] for r in rows], [r["hash"] for r in rows]
    else:
        seqs, hashes = columns.seqs, columns.hashes
    leaves = None  # hashed once: the topic's evidence is gathered by them, then L2 reads them
    if run.log_evidence is None and run.log_origin is not None and run.log_checkpoints:
        leaves = leaf_hashes(run.run_id, seqs, hashes)
    evidence = run_evidence(run, policy.keys, leaves)
    if evidence is None and run.source == "topic" and run.log_origin is None:
        raise LogError(
            f"L1 signature: run {run.run_id} was read from the topic without its signed-log "
            "checkpoints, which verify needs to check it against trusted keys: load it with "
            f"load_run(settings, {run.run_id!r}, source='topic', with_log=True)",
            run=run.run_id,
            obj=where,
        )
    if evidence is None:
        raise LogError(
            f"L1 signature: run {run.run_id} from the {run.source} ({where}) carries no "
            "signed-log evidence: it was sealed or exported before the signed log, or its "
            "checkpoints were removed",
            run=run.run_id,
            obj=where,
        )
    check_origin(evidence.origin, policy, evidence.checkpoint_obj or where)
    last = last_event(run, columns)  # an unreadable event is check 5's to name
    finishes = last is not None and last.kind is EventKind.RUN_FINISHED
    events = RunEvents(seqs, hashes, finishes)
    cp = check_run_log(
        run.run_id,
        events,
        evidence,
        policy.keys,
        witnesses=policy.witnesses,
        min_witnesses=policy.min_witnesses,
        require_finished=False,  # L3 below, with the reason the run must end
        leaves=leaves,
    )
    checks = list(LOG_CHECKS)  # the checkpoint they held against: VerifyReport.checkpoint
    warnings: list[str] = []
    if not finishes:
        reason = end.reason(run, last)
        if reason is not None:
            at = f"{evidence.checkpoint_obj or 'checkpoint'} ({cp.origin}@{cp.size})"
            raise LogError(
                f"L3 end: {end_missing(run, seqs[-1], reason, at)}",
                run=run.run_id,
                seq=seqs[-1],
                checkpoint=at,
            )
        checks[2] = "L3 end: not required (the run can still be in progress)"
        warnings.append(
            "the run has no RUN_FINISHED in the signed log yet: it is in progress "
            "(--allow-unfinished, or the sequencer's head says it is open)"
        )
    return checks, warnings, cp, evidence
