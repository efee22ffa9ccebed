"""Checking an evidence bundle offline: ``verify_bundle`` and the steps it takes in order.

B1 the manifest and every file's SHA-256, then the chain over ``raw/`` (checks 1-6, and the
signed log's L1-L4 first with trusted keys), B4 without them, the head, A1-A3 and B2 over
``archive/``, and B3 ``events.jsonl``; the first failure raises, naming the seq and the file.
Its own module: reading a bundle someone else may have rewritten, apart from writing one
(``bundle``), which imports ``verify_bundle`` from here.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tracevault.archive import ObjectInfo
from tracevault.errors import LogError, NotFoundError
from tracevault.replayer._records import SealedRows
from tracevault.replayer._results import LoadedRun, VerifyReport
from tracevault.replayer.export._format import (
    BUNDLE_FORMAT,
    _event_line,
    _proof_name,
    _raw_name,
    _sha,
)
from tracevault.replayer.load.archive import load_from_archive
from tracevault.replayer.load.checks import fail
from tracevault.replayer.load.log_policy import EndRule, LogPolicy
from tracevault.replayer.load.verify import verify
from tracevault.schemas import Codec, SchemaSet, TraceEvent
from tracevault.transparency import (
    AgentKeys,
    Checkpoint,
    Ed25519Verifier,
    LeafProof,
    RunLogEvidence,
    TlogProof,
    leaf_hash,
    root_from_inclusion,
    split_note,
)

__all__ = ["verify_bundle"]


def _bundle_evidence(
    root: Path, manifest: dict[str, Any], seqs: Sequence[int]
) -> RunLogEvidence | None:
    """The run's log evidence from ``log/``: None for a bundle exported before the log."""
    meta = manifest.get("log")
    if not isinstance(meta, dict):
        return None
    try:
        note = (root / "log" / "checkpoint").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise LogError(
            f"L1 signature: log/checkpoint is unreadable ({exc})", checkpoint="log/checkpoint"
        ) from None
    leaves: list[LeafProof] = []
    for seq in seqs:
        rel = _proof_name(seq)
        try:
            text = (root / rel).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            raise LogError(
                f"L2 inclusion: seq {seq} has no readable tlog-proof {rel}", seq=seq, obj=rel
            ) from None
        proof = TlogProof.parse(text, rel)
        if proof.checkpoint != note:
            raise LogError(
                f"L1 signature: {rel} proves seq {seq} against another checkpoint than "
                "log/checkpoint",
                seq=seq,
                obj=rel,
                checkpoint="log/checkpoint",
            )
        leaves.append(LeafProof(seq, proof.index, proof.hashes, rel))
    others: list[tuple[str, tuple[bytes, ...]]] = []
    path = root / "log" / "consistency.jsonl"
    if path.is_file():
        for line in path.read_bytes().splitlines():
            if line:
                o = json.loads(line)
                others.append(
                    (str(o["checkpoint"]), tuple(base64.b64decode(h) for h in o["proof"]))
                )
    return RunLogEvidence(str(meta["origin"]), note, tuple(leaves), tuple(others), "log/checkpoint")


def _check_own_proofs(run_id: str, rows: Sequence[dict[str, Any]], evidence: RunLogEvidence) -> str:
    """B4, without a trusted key: each event's tlog-proof leads to ``log/checkpoint``'s root.

    Proves no authorship (the checkpoint's signature is not checked: no key is trusted),
    but a bundle whose events were changed after export contradicts its own proofs, and
    is named by its first changed seq rather than passed as ``unverified`` only.
    """
    try:
        cp = Checkpoint.parse(split_note(evidence.checkpoint)[0])
    except LogError as exc:
        raise fail("B4 proofs", None, "log/checkpoint", f"unreadable ({exc})") from None
    if cp.origin != evidence.origin:
        raise fail(
            "B4 proofs",
            None,
            "log/checkpoint",
            f"the checkpoint is for log {cp.origin!r}, manifest.json says {evidence.origin!r}",
        )
    for p, row in zip(evidence.leaves, rows, strict=True):
        leaf = leaf_hash(run_id, p.seq, row["hash"])
        try:
            ok = root_from_inclusion(p.index, cp.size, leaf, p.proof) == cp.root
        except LogError:
            ok = False
        if not ok:
            raise fail(
                "B4 proofs",
                p.seq,
                p.obj,
                f"the event's own tlog-proof (leaf {p.index}) does not lead to the root of "
                f"log/checkpoint ({cp.origin}@{cp.size}): the event or its proof was changed "
                "after export",
            )
    return (
        "B4 proofs: every event's own tlog-proof leads to log/checkpoint's root (its "
        "signature unchecked: no trusted key)"
    )


class _BundleStore:
    """``archive/`` of a bundle read as if it were the object store."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @property
    def url(self) -> str:
        return f"bundle://{self.root}"

    def get(self, key: str) -> bytes:
        try:
            return (self.root / key).read_bytes()
        except FileNotFoundError:
            raise NotFoundError(f"bundle file archive/{key} is missing") from None

    def list(self, prefix: str) -> Sequence[ObjectInfo]:
        out: list[ObjectInfo] = []
        for dirpath, _, names in os.walk(self.root):
            for name in names:
                rel = (Path(dirpath) / name).relative_to(self.root).as_posix()
                if rel.startswith(prefix):
                    out.append(ObjectInfo(rel, (Path(dirpath) / name).stat().st_size))
        return sorted(out, key=lambda o: o.key)


def _read_manifest(root: Path) -> dict[str, Any]:
    path = root / "manifest.json"
    if not path.is_file():
        raise NotFoundError(f"{root} is not an evidence bundle: manifest.json is missing")
    try:
        manifest = json.loads(path.read_bytes())
    except ValueError as exc:
        raise fail("B1 manifest", None, "manifest.json", f"not JSON ({exc})") from exc
    if not isinstance(manifest, dict) or manifest.get("format") != BUNDLE_FORMAT:
        raise fail("B1 manifest", None, "manifest.json", f"not a {BUNDLE_FORMAT} manifest")
    return manifest


def verify_bundle(
    root: Path,
    *,
    log: LogPolicy | None = None,
    end: EndRule | None = None,
    chain_only: bool = False,
    agents: AgentKeys | None = None,
    operators: Sequence[Ed25519Verifier] | None = None,
    agent_check: bool = True,
) -> VerifyReport:
    """Check an evidence bundle offline; raise ``ChainError`` naming the seq and file.

    With ``log`` (public keys only) the bundle's tlog-proofs and checkpoint are checked
    first (L1-L4, ``LogError``); without, they are still held to the events (B4) and the
    report is ``unverified``. ``end``, ``chain_only``: as ``verify``'s (a bundle's run must
    end anyway). ``agents``, ``agent_check``: check I, as ``verify``'s (docs/identity.md).
    """
    manifest = _read_manifest(root)
    run_id = str(manifest["run_id"])
    checks = ["B1 manifest: every file listed is present with its SHA-256"]
    _check_files(root, manifest)
    chain, rows, objects = _read_rows(root, run_id)
    run = _bundle_run(root, manifest, run_id, chain=chain, rows=rows, objects=objects)
    report = verify(
        run,
        log=log,
        end=end,
        chain_only=chain_only,
        agents=agents,
        operators=operators,
        agent_check=agent_check,
    )
    checks.extend(report.checks)
    if log is None and run.log_evidence is not None:
        checks.append(_check_own_proofs(run_id, rows, run.log_evidence))
    _check_manifest_head(manifest, report)
    if (root / "archive").is_dir():
        checks.extend(_check_archive(root, run_id, report))
    checks.append("B3 events: events.jsonl is what raw/ decodes to with the bundled schemas")
    _check_events(root, rows, objects)
    return VerifyReport(
        run_id=run_id,
        source="bundle",
        count=report.count,
        last_seq=report.last_seq,
        head=report.head,
        finished=report.finished,
        checks=tuple(checks),
        gaps=report.gaps,
        warnings=report.warnings,
        events=report.events,
        log_checked=report.log_checked,
        checkpoint=report.checkpoint,
        log_evidence=report.log_evidence,
        chain_only=report.chain_only,
        provenance=report.provenance,
    )


def _check_files(root: Path, manifest: dict[str, Any]) -> None:
    """B1: every file ``manifest.json`` lists is present with its SHA-256."""
    files: dict[str, str] = manifest.get("files", {})
    for rel, digest in files.items():
        path = root / rel
        if not path.is_file():
            raise fail("B1 manifest", None, rel, "the file is listed in manifest.json but missing")
        if _sha(path.read_bytes()) != digest:
            raise fail("B1 manifest", None, rel, "the file's SHA-256 differs from manifest.json")


def _read_rows(
    root: Path, run_id: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[str]]:
    """(``chain.jsonl``'s lines, the sealed rows they and ``raw/`` make, each row's file)."""
    chain = [json.loads(line) for line in (root / "chain.jsonl").read_bytes().splitlines() if line]
    rows: list[dict[str, Any]] = []
    objects: list[str] = []
    for i, c in enumerate(chain):
        rel = _raw_name(int(c["seq"]))
        try:
            raw = (root / rel).read_bytes()
        except FileNotFoundError:
            raise fail("2 seq", i, rel, "the raw file of this seq is missing") from None
        rows.append(
            {
                "run_id": run_id,
                "seq": c["seq"],
                "prev_hash": bytes.fromhex(c["prev_hash"]),
                "hash": bytes.fromhex(c["hash"]),
                "raw": raw,
                "sealed_at": c["sealed_at"],
                "source_partition": c["source_partition"],
                "source_offset": c["source_offset"],
                "sequencer_id": c["sequencer_id"],
            }
        )
        objects.append(rel)
    return chain, rows, objects


def _bundle_run(
    root: Path,
    manifest: dict[str, Any],
    run_id: str,
    *,
    chain: list[dict[str, Any]],
    rows: list[dict[str, Any]],
    objects: list[str],
) -> LoadedRun:
    """The bundle as a loaded run: its rows, ``head.json``'s head and ``log/``'s evidence."""
    head: dict[str, Any] = {}
    if (root / "head.json").is_file():
        head = json.loads((root / "head.json").read_bytes())
    return LoadedRun(
        run_id=run_id,
        source="bundle",
        records=SealedRows(rows),
        objects=objects,
        expected_last_seq=head.get("last_seq"),
        expected_finished=head.get("finished"),
        expected_head=bytes.fromhex(head["last_hash"]) if head.get("last_hash") else None,
        log_evidence=_bundle_evidence(root, manifest, [int(c["seq"]) for c in chain]),
    )


def _check_manifest_head(manifest: dict[str, Any], report: VerifyReport) -> None:
    """B1: the manifest's head and count are the chain's."""
    if report.head != manifest.get("head") or report.count != manifest.get("count"):
        raise fail(
            "B1 manifest",
            report.last_seq,
            "manifest.json",
            f"the manifest says head {manifest.get('head')} / {manifest.get('count')} events, "
            f"the chain has {report.head} / {report.count}",
        )


def _check_archive(root: Path, run_id: str, report: VerifyReport) -> list[str]:
    """A1-A3 over ``archive/`` as if it were the store, and B2: it holds ``raw/``'s chain."""
    archived = verify(load_from_archive(_BundleStore(root / "archive"), run_id))
    checks = [c for c in archived.checks if c.startswith("A")]
    if archived.head != report.head or archived.count != report.count:
        raise fail(
            "B2 archive",
            None,
            "archive/",
            "the archived segments hold a different chain than raw/",
        )
    return checks


def _check_events(root: Path, rows: list[dict[str, Any]], objects: list[str]) -> None:
    """B3: ``events.jsonl`` is what ``raw/`` decodes to with the bundled schemas."""
    codec = Codec("TraceEvent", SchemaSet(root / "schemas"))
    lines = (root / "events.jsonl").read_bytes().splitlines()
    if len(lines) != len(rows):
        raise fail("B3 events", None, "events.jsonl", f"{len(lines)} lines for {len(rows)} events")
    for i, line in enumerate(lines):
        ev = TraceEvent.from_avro(codec.decode(rows[i]["raw"], what=objects[i]))
        if line + b"\n" != _event_line(ev):
            raise fail(
                "B3 events", i, "events.jsonl", "the line differs from the decoded raw event"
            )
