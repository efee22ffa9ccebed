"""The archive's own evidence: segments, their receipts and the final receipt.

Checks (run around the record checks of ``verify``):

A1. **segments** — segment seq ranges (from their names) are contiguous from 0, each segment
    holds exactly the records its name says, and the final receipt lists exactly the
    segments the listing found (a deleted segment is named by the final receipt).
A2. **receipts** — every segment has its receipt; the receipt names the segment, its seq
    range, count and chain ends (``first_prev_hash``, ``last_hash``) as the records show,
    and the SHA-256 of the segment's exact bytes.
A3. **final receipt** — count, last seq and chain head match the records, and the run ended;
    a finished run (its records end in RUN_FINISHED, or the topic's head says finished) has
    one. The archiver writes it right after the last segment's receipt and repairs it on
    restart, so its absence is a deletion, not a lag.

Receipts are checked after the chain: a record that chains from genesis is trusted over a
receipt that disagrees with it, so an edited receipt is named as the bad object, while a
changed event is named by its seq and segment.
"""

from __future__ import annotations

from tracevault.archive.layout import SegmentReceipt, parse_segment_key
from tracevault.errors import ArchiveError
from tracevault.replayer._results import LoadedRun
from tracevault.replayer.load.checks import RecordsSummary, fail

__all__ = ["check_archive", "check_archive_structure"]


def check_archive_structure(run: LoadedRun, checks: list[str]) -> None:
    checks.append(
        "A1 segments: seq ranges contiguous from 0, each segment holds exactly its range, "
        "the final receipt lists exactly these segments"
    )
    listed: list[str] | None = None
    if run.final_receipt_bytes is not None:
        if run.final_receipt is None:
            raise fail(
                "A3 final receipt",
                None,
                run.final_receipt_key,
                "the final receipt is not a readable FinalReceipt (it was edited or damaged)",
            )
        listed = list(run.final_receipt.segments)
    by_first = {}
    for key in listed or []:
        rng = parse_segment_key(key)
        if rng is not None:
            by_first[rng[0]] = key
    expected = 0
    for seg in run.segments:
        if seg.first_seq > expected:
            missing = by_first.get(expected, f"a segment starting at seq {expected}")
            raise fail(
                "A1 segments",
                expected,
                missing,
                f"no segment holds seqs {expected}..{seg.first_seq - 1}: the segment was "
                "deleted or never written",
            )
        if seg.first_seq < expected:
            raise fail(
                "A1 segments",
                seg.first_seq,
                seg.key,
                f"the segment overlaps seqs already held (up to {expected - 1})",
            )
        want = seg.last_seq - seg.first_seq + 1
        if seg.count != want:
            raise fail(
                "A1 segments",
                seg.first_seq + min(seg.count, want),
                seg.key,
                f"the segment holds {seg.count} records but its name says seqs "
                f"{seg.first_seq}..{seg.last_seq} ({want}): it was truncated or padded",
            )
        expected = seg.last_seq + 1
    if listed is not None:
        present = [s.key for s in run.segments]
        for key in listed:
            if key not in present:
                rng = parse_segment_key(key)
                raise fail(
                    "A1 segments",
                    None if rng is None else rng[0],
                    key,
                    "the final receipt lists this segment but the archive does not hold it "
                    "(it was deleted)",
                )
        for key in present:
            if key not in listed:
                raise fail(
                    "A1 segments",
                    None,
                    key,
                    f"the segment is not listed in the final receipt {run.final_receipt_key}",
                )


def _check_receipts(run: LoadedRun, summary: RecordsSummary, warnings: list[str]) -> None:
    """A2: each segment's receipt against the verified segment (a missing one only warns for
    the last segment of an unfinished run)."""
    rows = run.records.rows
    for n, seg in enumerate(run.segments):
        if seg.receipt_bytes is None:
            if n == len(run.segments) - 1 and not summary.finished:
                warnings.append(f"segment {seg.key} has no receipt yet (the archiver is behind)")
                continue
            raise fail(
                "A2 receipts",
                seg.first_seq,
                seg.receipt_key,
                f"the receipt of {seg.key} is missing",
            )
        try:
            r = seg.receipt or SegmentReceipt.from_json(seg.receipt_bytes, seg.receipt_key)
        except (ArchiveError, TypeError) as exc:
            raise fail(
                "A2 receipts", seg.first_seq, seg.receipt_key, f"the receipt is unreadable ({exc})"
            ) from exc
        first, last = rows[seg.first_seq], rows[seg.last_seq]
        claims = {
            "run_id": (r.run_id, run.run_id),
            "segment": (r.segment, seg.key),
            "first_seq": (r.first_seq, seg.first_seq),
            "last_seq": (r.last_seq, seg.last_seq),
            "count": (r.count, seg.count),
            "first_prev_hash": (r.first_prev_hash, bytes(first["prev_hash"]).hex()),
            "last_hash": (r.last_hash, bytes(last["hash"]).hex()),
        }
        for name, (said, found) in claims.items():
            if said != found:
                raise fail(
                    "A2 receipts",
                    seg.first_seq,
                    seg.receipt_key,
                    f"the receipt says {name}={said!r} but the verified segment {seg.key} has "
                    f"{found!r}: the receipt was edited",
                )
        if r.sha256 != seg.sha256:
            raise fail(
                "A2 receipts",
                seg.first_seq,
                seg.key,
                f"the segment's SHA-256 is {seg.sha256[:16]}… but its receipt {seg.receipt_key} "
                f"says {r.sha256[:16]}…: the segment's bytes changed outside the events (or the "
                "receipt's hash was edited)",
            )


def _check_final_receipt(run: LoadedRun, summary: RecordsSummary) -> None:
    """A3: the final receipt against the verified chain, and the run's end."""
    rows = run.records.rows
    fr = run.final_receipt
    if fr is None:
        if summary.finished or run.expected_finished:
            raise fail(
                "A3 final receipt",
                len(rows) - 1 if rows else None,
                run.final_receipt_key,
                "the run finished (its last event is RUN_FINISHED) but the archive has no final "
                "receipt: it was deleted (the archiver writes it right after the last "
                "segment's receipt, and again on restart if a crash came between)",
            )
        return
    n = len(rows)
    claims = {
        "run_id": (fr.run_id, run.run_id),
        "count": (fr.count, n),
        "last_seq": (fr.last_seq, n - 1),
        "last_hash": (fr.last_hash, summary.head.hex()),
    }
    for name, (said, found) in claims.items():
        if said != found:
            raise fail(
                "A3 final receipt",
                n - 1,
                run.final_receipt_key,
                f"the final receipt says {name}={said!r} but the verified chain has {found!r}",
            )
    if not summary.finished:
        raise fail(
            "A3 final receipt",
            n - 1,
            run.final_receipt_key,
            "a final receipt exists but the last event is not RUN_FINISHED",
        )


def check_archive(run: LoadedRun, summary: RecordsSummary, checks: list[str]) -> list[str]:
    """Checks A2 and A3; returns warnings (an in-progress run's last segment without receipt)."""
    warnings: list[str] = []
    checks.append(
        "A2 receipts: every segment's receipt matches its name, seq range, count, chain ends "
        "and the SHA-256 of its bytes"
    )
    _check_receipts(run, summary, warnings)
    checks.append("A3 final receipt: count, last seq and chain head match, and the run ended")
    _check_final_receipt(run, summary)
    return warnings
