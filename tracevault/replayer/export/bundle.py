"""Evidence bundles: a verified run in a folder anyone can check with no Kafka, no object store.

Layout (every file listed with its SHA-256 in ``manifest.json``)::

    README.md              how to check the bundle, by tool and by hand
    manifest.json          run id, source, count, chain head, finished, file hashes
    raw/<seq>.bin          the exact bytes the producer wrote (what the chain covers)
    chain.jsonl            per seq: prev_hash, hash, sha256 of raw, transport metadata
    events.jsonl           the events decoded, one JSON object a line (for people and jq)
    schemas/*.avsc         every schema version the events can be read with
    archive/runs/<run>/…   (from the archive) the segments and receipts, byte for byte
    head.json              (from the topic) the sequencer's committed head that was checked
    log/checkpoint         (signed log) the checkpoint note, with any cosignatures
    log/<seq>.tlog-proof   (signed log) C2SP tlog-proof of each event against it
    log/consistency.jsonl  (signed log) other checkpoints seen, with consistency proofs

``verify_bundle`` recomputes the chain from genesis over ``raw/`` (checks 1-6), re-runs the
archive checks (A1-A3) over ``archive/`` as if it were the store, checks the head, that
``events.jsonl`` is what the raw bytes decode to with the bundled schemas, and every file's
hash; the first failure is a ChainError naming the seq and the file. With trusted keys, the
signed log's checks L1-L4 run over ``log/`` first, with public keys only (docs/log.md,
"Verify and bundles"), the checkpoint's origin held to the configured deployment's; a
bundle exported before the signed log has no ``log/`` and fails L1 then. Without keys the
report is ``unverified`` (fail closed), and still every event's own tlog-proof must lead to
``log/checkpoint``'s root (B4): a bundle whose events contradict its proofs fails, key or not.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import os
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tracevault import __version__
from tracevault.archive import ObjectInfo
from tracevault.errors import ConfigError, LogError, NotFoundError
from tracevault.log import (
    TLOG_PROOF_HEADER,
    AgentKeys,
    Checkpoint,
    LeafProof,
    RunLogEvidence,
    TlogProof,
    leaf_hash,
    root_from_inclusion,
    split_note,
    with_cosignatures,
)
from tracevault.replayer._records import SealedRows
from tracevault.replayer._results import LoadedRun, VerifyReport
from tracevault.replayer.load.archive import ReadableStore, load_from_archive
from tracevault.replayer.load.checks import fail
from tracevault.replayer.load.log_policy import EndRule, LogPolicy, run_evidence
from tracevault.replayer.load.verify import verify
from tracevault.schemas import Codec, EventModel, SchemaSet, TraceEvent, default_schemas

__all__ = ["BUNDLE_FORMAT", "REVEAL_FILE", "export_bundle", "verify_bundle"]

BUNDLE_FORMAT = "tracevault-bundle/1"
#: the file of a bundle that holds its data key revealed to one recipient (``reveal``)
REVEAL_FILE = "reveal.json"

_README = """# Evidence bundle: run {run_id}

Exported by tracevault {version} at {created} from the {source}. It holds {count} events
(seq 0..{last_seq}); chain head `{head}`; finished: {finished}.

## Check it with tracevault (no Kafka, no object store needed)

    tracevault replay verify --bundle . --trusted-key <log vkey or @file>

The log's public key (vkey) comes from the deployment that sealed the run, never from this
folder: its operator publishes it (`tracevault keys show log.key` prints it from the private
key; the demo writes it to `.tracevault/log.vkey`). Without a trusted key verify says
`unverified` and exits 1; `--no-log-check` checks the chain alone, which proves nothing
against whoever could rewrite this folder. Give `--prefix` (or `TRACEVAULT_TOPIC_PREFIX`)
of the deployment the bundle claims to come from: the checkpoint's origin must be its.

## Check it by hand

The chain covers the exact bytes in `raw/`:

    genesis  = SHA-256("tracevault/v1/genesis\\0" + run_id)
    hash_n   = SHA-256("tracevault/v1/event\\0" + hash_(n-1) + raw_n)     (hash_(-1) = genesis)

`chain.jsonl` lists `prev_hash` and `hash` per seq (hex); the last hash must equal the head
above and `manifest.json`'s `head`. Every file's SHA-256 is in `manifest.json`.
`raw/*.bin` are Avro single-object encoded TraceEvents (`C3 01`, the 8-byte CRC-64-AVRO
fingerprint of the writer schema, the body); the schemas are in `schemas/`.
`events.jsonl` is the same events decoded, for reading. {archive_note}
An encrypted run's content fields are ciphertext (`{{"enc":…,"v":1}}`) here as in `raw/`: the
chain covers them as they are, and checking needs no key. `reveal.json`, when present, holds
the run's data key sealed (HPKE) for one recipient, who reads with its own private key:

    tracevault replay show --bundle . --recipient-key <private key file>
{log_note}"""

_LOG_NOTE = """
## The signed log

`log/checkpoint` is the signed checkpoint of log `{origin}` (size {size}); each
`log/<seq>.tlog-proof` is a C2SP tlog-proof (c2sp.org/tlog-proof) that the event's leaf,
SHA-256(0x00 + "tracevault/v1/leaf\\0" + u16 len + run_id + u64 seq + hash), is in it.
Check them with the log's public key (and any witness's, `--witness-key`):

    tracevault replay verify --bundle . --trusted-key <vkey or @file>
"""


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _raw_name(seq: int) -> str:
    return f"raw/{seq:012d}.bin"


class _Writer:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.files: dict[str, str] = {}

    def put(self, rel: str, data: bytes) -> None:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        self.files[rel] = _sha(data)


def _proof_name(seq: int) -> str:
    return f"log/{seq:012d}.tlog-proof"


def export_bundle(
    run: LoadedRun,
    out_dir: Path,
    *,
    store: ReadableStore | None = None,
    progress: Callable[[int], None] | None = None,
    log: LogPolicy | None = None,
    cosigned: Sequence[str] = (),
    reveal: Callable[[VerifyReport], bytes] | None = None,
) -> VerifyReport:
    """Verify ``run`` and write its evidence bundle to ``out_dir`` (new or empty).

    The bundle holds what the run holds: an encrypted run's ciphertext only. ``reveal``
    makes ``reveal.json`` from the verified report (the data key sealed for one recipient,
    ``reveal.reveal_json``).

    ``store`` is where an archive-sourced run's segments and receipts are copied from. With
    ``log`` the signed log is checked first; the run's log evidence, when its source has
    any, goes into ``log/`` as C2SP tlog-proofs (checked or not: ``verify --bundle`` checks).
    ``cosigned`` are witnesses' copies of that checkpoint: their cosignatures are added to
    the bundle's. Raises ``ChainError``/``LogError`` (nothing written) if the run does not
    verify.
    """
    report = verify(run, log=log)
    evidence = report.log_evidence or run_evidence(run, ())
    if cosigned:
        if evidence is None:
            raise ConfigError("cosignatures given, but the run has no signed-log evidence")
        note = evidence.checkpoint
        for c in cosigned:
            note = with_cosignatures(note, c)
        evidence = dataclasses.replace(evidence, checkpoint=note)
    if out_dir.exists() and any(out_dir.iterdir()):
        raise ConfigError(
            f"{out_dir} is not empty; export into a new folder (evidence is never overwritten)"
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    w = _Writer(out_dir)
    chain_lines: list[bytes] = []
    event_lines: list[bytes] = []
    for i, sealed in enumerate(run.records):
        w.put(_raw_name(sealed.seq), sealed.raw)
        chain_lines.append(
            _json_line(
                {
                    "seq": sealed.seq,
                    "prev_hash": sealed.prev_hash.hex(),
                    "hash": sealed.hash.hex(),
                    "raw_sha256": _sha(sealed.raw),
                    "sealed_at": sealed.sealed_at,
                    "source_partition": sealed.source_partition,
                    "source_offset": sealed.source_offset,
                    "sequencer_id": sealed.sequencer_id,
                    "object": run.objects[i],
                }
            )
        )
        event_lines.append(_event_line(report.events[i]))
        if progress is not None:
            progress(1)
    w.put("chain.jsonl", b"".join(chain_lines))
    w.put("events.jsonl", b"".join(event_lines))
    for v in default_schemas().all():
        w.put(f"schemas/{v.path.name}", v.path.read_bytes())
    if run.source == "archive" and store is not None:
        keys = [s.key for s in run.segments] + [
            s.receipt_key for s in run.segments if s.receipt_bytes is not None
        ]
        if run.final_receipt_bytes is not None and run.final_receipt_key is not None:
            keys.append(run.final_receipt_key)
        for key in keys:
            w.put(f"archive/{key}", store.get(key))
    if run.expected_head is not None:
        w.put(
            "head.json",
            _json_line(
                {
                    "last_seq": run.expected_last_seq,
                    "last_hash": run.expected_head.hex(),
                    "finished": run.expected_finished,
                }
            ),
        )
    if evidence is not None:
        _put_log(w, run, evidence)
    if reveal is not None:
        w.put(REVEAL_FILE, reveal(report))
    created = datetime.now(UTC).isoformat()
    note = (
        "`archive/` holds the archived segments and receipts byte for byte, under their keys."
        if run.source == "archive"
        else "`head.json` is the sequencer's committed head the run was checked against."
    )
    w.put(
        "README.md",
        _README.format(
            run_id=run.run_id,
            version=__version__,
            created=created,
            source=run.source,
            count=report.count,
            last_seq=report.last_seq,
            head=report.head,
            finished=report.finished,
            archive_note=note,
            log_note=""
            if evidence is None
            else _LOG_NOTE.format(
                origin=evidence.origin,
                size=Checkpoint.parse(split_note(evidence.checkpoint)[0]).size,
            ),
        ).encode(),
    )
    manifest: dict[str, Any] = {
        "format": BUNDLE_FORMAT,
        "run_id": run.run_id,
        "source": run.source,
        "count": report.count,
        "last_seq": report.last_seq,
        "head": report.head,
        "finished": report.finished,
        "checks": list(report.checks),
        "created_at": created,
        "tracevault": __version__,
        "files": dict(sorted(w.files.items())),
    }
    if reveal is not None:
        manifest["reveal"] = REVEAL_FILE
    if evidence is not None:
        manifest["log"] = {
            "origin": evidence.origin,
            "checkpoint": "log/checkpoint",
            "checkpoint_object": evidence.checkpoint_obj,
            "proof_format": TLOG_PROOF_HEADER,
        }
    (out_dir / "manifest.json").write_bytes(
        json.dumps(manifest, indent=2, sort_keys=True).encode() + b"\n"
    )
    return report


def _put_log(w: _Writer, run: LoadedRun, evidence: RunLogEvidence) -> None:
    """One C2SP tlog-proof per event (the spec's unit is one entry), and the checkpoint."""
    proofs = {p.seq: p for p in evidence.leaves}
    w.put("log/checkpoint", evidence.checkpoint.encode())
    for sealed in run.records:
        p = proofs[sealed.seq]
        w.put(
            _proof_name(sealed.seq),
            TlogProof(p.index, tuple(p.proof), evidence.checkpoint).encode().encode(),
        )
    w.put(
        "log/consistency.jsonl",
        b"".join(
            _json_line({"checkpoint": note, "proof": [base64.b64encode(h).decode() for h in proof]})
            for note, proof in evidence.others
        ),
    )


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


def _json_line(obj: dict[str, Any]) -> bytes:
    return (
        json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"
    )


def _event_line(ev: TraceEvent) -> bytes:
    return _json_line(EventModel.from_event(ev).model_dump(mode="json"))


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
) -> VerifyReport:
    """Check an evidence bundle offline; raise ``ChainError`` naming the seq and file.

    With ``log`` (public keys only) the bundle's tlog-proofs and checkpoint are checked
    first (L1-L4, ``LogError``); without, they are still held to the events (B4) and the
    report is ``unverified``. ``end``, ``chain_only``: as ``verify``'s (a bundle's run must
    end anyway). With ``agents``, check I too (docs/identity.md).
    """
    manifest = _read_manifest(root)
    run_id = str(manifest["run_id"])
    checks = ["B1 manifest: every file listed is present with its SHA-256"]
    files: dict[str, str] = manifest.get("files", {})
    for rel, digest in files.items():
        path = root / rel
        if not path.is_file():
            raise fail("B1 manifest", None, rel, "the file is listed in manifest.json but missing")
        if _sha(path.read_bytes()) != digest:
            raise fail("B1 manifest", None, rel, "the file's SHA-256 differs from manifest.json")
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
    head: dict[str, Any] = {}
    if (root / "head.json").is_file():
        head = json.loads((root / "head.json").read_bytes())
    run = LoadedRun(
        run_id=run_id,
        source="bundle",
        records=SealedRows(rows),
        objects=objects,
        expected_last_seq=head.get("last_seq"),
        expected_finished=head.get("finished"),
        expected_head=bytes.fromhex(head["last_hash"]) if head.get("last_hash") else None,
        log_evidence=_bundle_evidence(root, manifest, [int(c["seq"]) for c in chain]),
    )
    report = verify(run, log=log, end=end, chain_only=chain_only, agents=agents)
    checks.extend(report.checks)
    if log is None and run.log_evidence is not None:
        checks.append(_check_own_proofs(run_id, rows, run.log_evidence))
    if report.head != manifest.get("head") or report.count != manifest.get("count"):
        raise fail(
            "B1 manifest",
            report.last_seq,
            "manifest.json",
            f"the manifest says head {manifest.get('head')} / {manifest.get('count')} events, "
            f"the chain has {report.head} / {report.count}",
        )
    if (root / "archive").is_dir():
        archived = verify(load_from_archive(_BundleStore(root / "archive"), run_id))
        checks.extend(c for c in archived.checks if c.startswith("A"))
        if archived.head != report.head or archived.count != report.count:
            raise fail(
                "B2 archive",
                None,
                "archive/",
                "the archived segments hold a different chain than raw/",
            )
    checks.append("B3 events: events.jsonl is what raw/ decodes to with the bundled schemas")
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
    )
