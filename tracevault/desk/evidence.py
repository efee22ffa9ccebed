"""A run's evidence for the desk: verified by the replayer, then cut to what the reader may see.

Why a layer of its own: the report and the UI must show the verification result that the
Python verify gave (or its failure, never hidden), and payloads only for the seqs the reader
chose to reveal. A payload not revealed is shown by its SHA-256; its raw bytes are left out of
the report too (they hold the payload), so the browser proves such an event by its hash in
the signed log rather than by rehashing its bytes (docs/desk.md, "What the browser checks").
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field

from tracevault.archive import open_store
from tracevault.config import Settings
from tracevault.content import is_envelope, open_run
from tracevault.errors import ChainError, ConfigError, ContentKeyError, LogError
from tracevault.replayer import LoadedRun, Trust, VerifyReport, load_run
from tracevault.replayer.load.archive import load_head
from tracevault.replayer.load.source import load_archived
from tracevault.schemas import SealedEvent, TraceEvent, decode_event
from tracevault.transparency import LeafProof, RunLogEvidence

__all__ = ["NO_LOG_KEY", "Reveal", "RunEvidence", "first_page", "gather", "is_encrypted"]

#: Why a run is ``unverified`` when no trusted log key checked it.
NO_LOG_KEY = "no trusted log key, nothing was proven (give --trusted-key or TRACEVAULT_LOG_VKEYS)"


@dataclass(frozen=True, slots=True)
class Reveal:
    """Which seqs' payloads the reader chose to show: ``all``, ``none`` or ``seqs``."""

    every: bool = False
    seqs: frozenset[int] = frozenset()

    @classmethod
    def parse(cls, text: str) -> Reveal:
        """``all``, ``none`` or a list like ``3,5-7``; ConfigError naming the bad part."""
        text = text.strip().lower()
        if text == "all":
            return cls(every=True)
        if text in ("none", ""):
            return cls()
        seqs: set[int] = set()
        for part in text.split(","):
            lo, sep, hi = part.strip().partition("-")
            try:
                a = int(lo)
                b = int(hi) if sep else a
            except ValueError:
                raise ConfigError(
                    f"--reveal: {part.strip()!r} is not a seq or a range like 5-7"
                ) from None
            if a < 0 or b < a:
                raise ConfigError(f"--reveal: {part.strip()!r} is not a range of seqs")
            seqs.update(range(a, b + 1))
        return cls(seqs=frozenset(seqs))

    def __contains__(self, seq: object) -> bool:
        return self.every or seq in self.seqs


@dataclass(frozen=True, slots=True)
class RunEvidence:
    """One run as the desk shows it: the Python verify's outcome and what backs it.

    ``status`` is ``verified``, ``unverified`` (no trusted log key, or no trusted agent vkey
    proved who wrote the run: ``why`` says which) or ``failed`` (``failure`` says where).
    ``events`` are decoded, and opened through the reader's key provider where ``opened``;
    ``revealed`` are the seqs whose payloads show.
    """

    run_id: str
    status: str
    checks: tuple[str, ...]
    failure: str | None
    records: Sequence[SealedEvent]
    events: Sequence[TraceEvent]
    log: RunLogEvidence | None
    revealed: frozenset[int]
    opened: frozenset[int] = frozenset()
    notices: tuple[str, ...] = field(default=())
    why: str | None = None

    @property
    def verified(self) -> bool:
        return self.status == "verified"

    def proofs(self) -> dict[int, LeafProof]:
        return {} if self.log is None else {p.seq: p for p in self.log.leaves}

    def payload_sha(self, data: bytes | None) -> str | None:
        return None if data is None else hashlib.sha256(data).hexdigest()


def gather(
    settings: Settings,
    run_id: str,
    *,
    source: str,
    trust: Trust,
    reveal: Reveal,
    proofs: bool = False,
) -> RunEvidence:
    """Load ``run_id`` and verify it as ``replay verify`` does, with ``trust`` (built as
    ``replay verify`` builds it, ``Trust.of``): freshness and the witness stores, the signed
    log, the chain, then provenance (check I) and erasure records (check E). Provenance and
    freshness are required as the log key is: a run they do not prove is ``unverified``.

    A run that fails is still returned, ``failed`` with the message, so the report shows the
    failure at the top instead of nothing; NotFoundError and unreachable stores propagate.
    ``proofs``: read every event's inclusion proof now (a source's proofs are read lazily
    from its store, which is closed when this returns), as a report needs them.
    """
    if source == "topic":
        run = load_run(settings, run_id, source="topic", with_log=True)
        return _checked(settings, run, trust, reveal=reveal, proofs=proofs)
    store = open_store(settings.archive_url, settings, create=False)
    try:
        run = load_archived(store, run_id)
        return _checked(settings, run, trust, reveal=reveal, proofs=proofs)
    finally:
        store.close()


def _checked(
    settings: Settings,
    run: LoadedRun,
    trust: Trust,
    *,
    reveal: Reveal,
    proofs: bool,
) -> RunEvidence:
    failure: str | None = None
    report: VerifyReport | None = None
    try:
        report = trust.verify(settings, run, rebuild=True)
    except (ChainError, LogError) as exc:
        failure = str(exc)
    events = list(report.events) if report is not None else _decoded(run)
    status = "failed" if report is None else ("verified" if report.ok else "unverified")
    why = None if report is None or report.ok else _unverified_why(report)
    log = report.log_evidence if report is not None else None
    if log is None:
        log = run.log_evidence
    if log is not None and proofs:
        leaves = tuple(LeafProof(p.seq, p.index, tuple(p.proof), p.obj) for p in log.leaves)
        log = dataclasses.replace(log, leaves=leaves)
    wanted = frozenset(e.seq for e in events if e.seq in reveal)
    shut = frozenset(e.seq for e in events if e.seq in wanted and is_encrypted(e))
    events, opened, notices = _open(settings, events, shut)
    return RunEvidence(
        run_id=run.run_id,
        status=status,
        checks=() if report is None else tuple(report.checks),
        failure=failure,
        # the UI reads none of them (lazy rows, never built); a report reads them after
        # the store is closed, so it has them read now
        records=list(run.records) if proofs else run.records,
        events=events,
        log=log,
        revealed=wanted - (shut - opened),  # still ciphertext: shown by hash, never as such
        opened=opened,
        notices=notices,
        why=why,
    )


def _unverified_why(report: VerifyReport) -> str:
    """Why a report that passed its checks is still not a pass: no log key, provenance or
    freshness."""
    if not report.log_checked:
        return NO_LOG_KEY
    if report.freshness == "unverified":
        return (
            "freshness unverified: nothing proved the archive current (the sealed topic was "
            "not compared); a rolled-back archive verifies by itself (give --offline to "
            "accept it knowingly)"
        )
    return (
        f"provenance {report.provenance}: who wrote the run's events was not proven (give "
        "--agent-key AGENT_ID=VKEY or set TRACEVAULT_AGENT_VKEYS)"
    )


def _decoded(run: LoadedRun) -> list[TraceEvent]:
    out: list[TraceEvent] = []
    for sealed in run.records:
        try:
            out.append(decode_event(sealed.raw))
        except Exception:  # a failed run's bad record is shown by its hash only
            break
    return out


def is_encrypted(e: TraceEvent) -> bool:
    return any(is_envelope(x) for x in (e.request, e.response) if x)


def _open(
    settings: Settings, events: list[TraceEvent], shut: frozenset[int]
) -> tuple[list[TraceEvent], frozenset[int], tuple[str, ...]]:
    """Open the ``shut`` (encrypted) events the reader wants, through its key provider."""
    if not shut:
        return events, frozenset(), ()
    try:
        clear = list(open_run(settings, events))
    except ContentKeyError as exc:
        return (
            events,
            frozenset(),
            (
                f"content is encrypted and this reader holds no key that opens it ({exc}): "
                "hashes only",
            ),
        )
    return clear, shut, ()


def first_page(settings: Settings, run_id: str, n: int) -> tuple[list[TraceEvent], int] | None:
    """The first ``n`` events of ``run_id`` in the archive and how many it lists, decoded but
    NOT verified, or None when the archive has no object of the run: the UI's first screen
    while the run is verified (``gather``).

    Why apart from ``gather``: loading a 100,000-event run reads every data bundle, tile and
    checkpoint that proves it, and the first screen needs two bundles (``load_head``). What
    it shows is marked as not yet proven; encrypted payloads stay sealed (shown by hash)."""
    store = open_store(settings.archive_url, settings, create=False)
    try:
        got = load_head(store, run_id, n)
    finally:
        store.close()
    if got is None:
        return None
    head, total = got
    return [decode_event(s.raw) for s in head], total
