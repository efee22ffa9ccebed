"""``verify``: the whole verify, the first failure raised.

With trusted keys check L5 (the archive as fresh as the topic and the witnesses saw it,
``fresh``) and the witness stores' cosignatures (``witnessed``) come first, then the signed
log's checks L1-L4 (``log_policy``), then the records. The numbered checks
are listed in ``checks`` (1-6, every record), ``_verify_archive``
(A1-A3: segments and receipts) and here (T1: the topic's committed head; F: finished, when
the log was not checked and the run must end). A run with no RUN_FINISHED passes only while
``log_policy.EndRule`` allows it (the CLI: while it can still be live) and is reported as
unfinished; GAP markers (one per missing seq, sealed by the sequencer) are warnings.

Rebuilding (``rebuild=True``) decodes every event once, inside the checks, and does **not**
re-check that ``request``/``response`` are canonical JSON: the chain proves these are the
exact bytes the sequencer sealed, and the sequencer refuses a non-canonical payload before
sealing it. Events read lazily (the default) still go through ``decode_event``'s check.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, Literal

from tracevault.archive import ObjectStore
from tracevault.config import Settings
from tracevault.errors import ChainError, ConfigError
from tracevault.replayer._records import LazyEvents
from tracevault.replayer._results import LoadedRun, VerifyReport
from tracevault.replayer.load._contested import CONTESTED_CHECK, contests
from tracevault.replayer.load._erasure import check_writer
from tracevault.replayer.load._nogc import gc_paused
from tracevault.replayer.load._verify_archive import check_archive, check_archive_structure
from tracevault.replayer.load.checks import RECORD_CHECKS, RecordsSummary, check_records, fail
from tracevault.replayer.load.fresh import ASK, Fresh, Tails, freshness
from tracevault.replayer.load.log_policy import (
    EndRule,
    LogPolicy,
    check_log,
    end_missing,
    last_event,
)
from tracevault.replayer.load.witnessed import with_witness_stores
from tracevault.schemas.fast import SealedColumns
from tracevault.transparency import AgentKeys, Ed25519Verifier, NoteVerifier

__all__ = ["verify"]


def _check_topic_head(run: LoadedRun, s: RecordsSummary, checks: list[str]) -> None:
    checks.append("T1 head: the records end where the sequencer's committed head says")
    n = len(run.records)
    if run.expected_last_seq is not None and n - 1 != run.expected_last_seq:
        raise fail(
            "T1 head",
            n,
            run.objects[-1] if n else None,
            f"the topic holds seqs 0..{n - 1} but the sequencer sealed up to seq "
            f"{run.expected_last_seq}: seqs {n}..{run.expected_last_seq} are missing",
        )
    if run.expected_head is not None and s.head != run.expected_head:
        raise fail(
            "T1 head",
            n - 1,
            run.objects[-1] if n else None,
            f"the chain ends at {s.head.hex()[:16]}…, the sequencer's head says "
            f"{run.expected_head.hex()[:16]}…",
        )
    if run.expected_gaps:
        promised = sorted({q for a, b in run.expected_gaps for q in range(a, b + 1)})
        if promised != sorted(s.gaps):
            raise fail(
                "T1 head",
                None,
                None,
                f"the sequencer's head lists GAP seqs {promised[:10]}, the records hold GAP "
                f"markers at {list(s.gaps)[:10]}",
            )
    if run.expected_finished is not None and run.expected_finished != s.finished:
        raise fail(
            "T1 head",
            n - 1,
            None,
            f"the sequencer says finished={run.expected_finished}, the records say {s.finished}",
        )


def _check_log_index(run: LoadedRun, s: RecordsSummary, checks: list[str]) -> None:
    checks.append("A4 index: the run's index objects agree with the chain's end")
    if run.log_head is not None and (not s.finished or s.head.hex() != run.log_head):
        raise fail(
            "A4 index",
            len(run.records) - 1,
            run.log_index_keys[-1] if run.log_index_keys else None,
            f"the run index says the run finished with head {run.log_head[:16]}…, the records "
            f"end at {s.head.hex()[:16]}… (finished={s.finished})",
        )


def verify(
    run: LoadedRun,
    *,
    require_finished: bool = False,
    rebuild: bool = False,
    log: LogPolicy | None = None,
    keys: Sequence[NoteVerifier] = (),
    end: EndRule | None = None,
    chain_only: bool = False,
    agents: AgentKeys | None = None,
    operators: Sequence[Ed25519Verifier] | None = None,
    agent_check: bool = True,
    settings: Settings | None = None,
    witness_stores: Sequence[str] = (),
    offline: bool = False,
    tails: Tails | Literal["ask"] = ASK,
    archive: ObjectStore | None = None,
) -> VerifyReport:
    """Verify ``run`` (every numbered check); raise :class:`ChainError` at the first failure.

    With ``log`` (the trusted keys; ``keys=`` alone is short for a policy of just those)
    the signed log's checks L1-L4 run first and raise :class:`LogError`; without, the
    report says ``log_checked=False`` and its status is ``unverified`` (fail closed), unless
    the caller waives the log with ``chain_only`` (``--no-log-check``: the chain alone,
    which proves nothing against whoever can write the store). ``end``
    says when a run without RUN_FINISHED fails (L3, or F without the log); the default
    lets one pass with a warning, ``require_finished`` always fails it. With ``rebuild``
    every event is decoded into a :class:`TraceEvent` during the checks and
    ``report.events`` is that list; without it, events are decoded on first access.
    ``agents`` are the trusted agent vkeys of check I (``_identity``, docs/identity.md):
    provenance is required like the log key, so without any the report is ``unverified``
    unless the caller waives the check with ``agent_check=False`` (``--no-agent-check``:
    no agent vkey is consulted then, only that the run claims one ``agent_id``).
    ``operators`` are the trusted operator vkeys an erasure record is held to instead (check
    E, ``_erasure``): without one, an erasure record fails, unverified.

    ``settings`` name the deployment the run was read from: with a log policy, the witness
    stores (``witness_stores``, else ``settings.witness_stores``) lend their cosignatures
    (``--min-witnesses``), and a run read from the archive is held to check L5 (``fresh``):
    a rollback raises :class:`LogError`; an archive nothing proved current (the topic not
    compared: Kafka down, or no ``settings``) is ``freshness="unverified"``, not a pass,
    unless ``offline`` accepts it knowingly. ``tails``: the topic's archived checkpoints
    when the caller already read them (a batch reads them once), else the topic is asked;
    ``archive``: the store the run was read from, when the caller holds it open.
    """
    if keys and log is None:  # the simple case: trusted log keys, no witnesses
        log = LogPolicy(tuple(keys))
    if chain_only and log is not None:
        raise ConfigError("chain_only (--no-log-check) skips the signed log: give no keys")
    rule = end or EndRule()
    if require_finished:
        rule = EndRule(True, rule.idle_close_s, rule.skew_s)
    fresh = Fresh()
    if log is not None:  # L5 before the witnesses: never re-anchored to an older size
        fresh = freshness(
            settings, run, log, witness_stores, tails=tails, offline=offline, archive=archive
        )
        if settings is not None:
            run = with_witness_stores(settings, run, log, witness_stores)
    with gc_paused():
        # waived (--no-agent-check): no agent vkey is consulted, as --no-log-check takes no key
        report = _verify(
            run,
            end=rule,
            rebuild=rebuild,
            log=log,
            agents=agents if agent_check else None,
            agent_check=agent_check,
            operators=operators,
        )
    report = fresh.annotate(report)
    return dataclasses.replace(report, chain_only=True) if chain_only else report


def _check_writers(  # noqa: PLR0917 - the walk's state, as _verify has it
    run: LoadedRun,
    columns: SealedColumns | None,
    rows: Sequence[Any],
    summary: RecordsSummary,
    keys: tuple[AgentKeys | None, Sequence[Ed25519Verifier] | None],
    agent_check: bool,
    log: LogPolicy | None,
) -> tuple[list[str], list[str], str]:
    """Check I (or E, for an erasure record) over the walk's columns (a rebuild) or rows, and
    check C: the sequencer's contested records naming the run (``_contested``), each verified
    under the same log policy. A hijack is named whatever check I says (what check I found
    from its seq on is quoted); another contest fails the run after check I."""
    found, warnings = contests(run, lambda rec: _verify(rec, end=EndRule(), rebuild=False, log=log))
    try:
        checks, i_warnings, provenance = check_writer(
            run.run_id,
            columns.raws if columns is not None else [r["raw"] for r in rows],
            columns.hashes if columns is not None else [r["hash"] for r in rows],
            summary.kinds,
            keys,
            finished=summary.finished,
            agent_ids=None
            if summary.events is None
            else [ev.agent.agent_id for ev in summary.events],
            required=agent_check,
        )
    except ChainError as exc:
        if not found or not found[0].hijacked:
            raise
        raise found[0].error(run, exc, keys[0]) from None
    if found:
        raise found[0].error(run, agents=keys[0])
    if run.contested:
        checks.append(CONTESTED_CHECK)
    return checks, warnings + i_warnings, provenance


def _verify(
    run: LoadedRun,
    *,
    end: EndRule,
    rebuild: bool,
    log: LogPolicy | None,
    agents: AgentKeys | None = None,
    operators: Sequence[Ed25519Verifier] | None = None,
    agent_check: bool = True,
) -> VerifyReport:
    # a rebuild reads a source's values in one walk (columns and events), where it can
    columns = run.records.columns() if rebuild else None
    rows = run.records.rows if columns is None else ()
    count = len(run.records)
    if not count:
        raise fail("2 seq", 0, None, "the run has no records")
    checks: list[str] = []
    warnings: list[str] = []
    checkpoint: str | None = None
    evidence = None
    if log is not None:
        checks, warnings, cp, evidence = check_log(run, log, end=end, columns=columns)
        checkpoint = f"{cp.origin}@{cp.size}"
    legacy = run.source == "archive" and run.log_evidence is None
    if legacy:
        check_archive_structure(run, checks)
    checks.extend(RECORD_CHECKS)
    summary = check_records(run.run_id, rows, run.objects, rebuild=rebuild, columns=columns)
    if legacy:
        warnings.extend(check_archive(run, summary, checks))
    elif run.source == "archive":
        _check_log_index(run, summary, checks)
    elif run.expected_last_seq is not None or run.expected_head is not None:
        _check_topic_head(run, summary, checks)
    i_checks, i_warnings, provenance = _check_writers(
        run, columns, rows, summary, (agents, operators), agent_check, log
    )
    checks.extend(i_checks)
    warnings.extend(i_warnings)
    if log is None:  # with the log, L3 decided this
        reason = None if summary.finished else end.reason(run, last_event(run, columns))
        if end.required or reason is not None:
            checks.append("F finished: the run ends with RUN_FINISHED")
        if reason is not None:
            raise fail(
                "F finished",
                count,
                None,
                f"the run is unfinished: {end_missing(run, count - 1, reason, 'its records')}; "
                f"its last event is seq {count - 1} {summary.kinds[-1]}",
            )
    if summary.gaps:
        warnings.append(
            f"{len(summary.gaps)} seq(s) are GAP markers (events that never reached the "
            f"sequencer): {list(summary.gaps)[:10]}"
        )
    if not summary.finished:
        warnings.append("the run is unfinished: no RUN_FINISHED (still running, or cut short)")
    return VerifyReport(
        run_id=run.run_id,
        source=run.source,
        count=count,
        last_seq=count - 1,
        head=summary.head.hex(),
        finished=summary.finished,
        checks=tuple(checks),
        gaps=summary.gaps,
        warnings=tuple(warnings),
        events=summary.events
        if summary.events is not None
        else LazyEvents([r["raw"] for r in rows]),
        log_checked=log is not None,
        checkpoint=checkpoint,
        log_evidence=evidence,
        provenance=provenance,
    )
