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

Writing is here; checking is ``_check`` (imported from here), and what both agree on (file
names, line formats) is ``_format``.
"""

from __future__ import annotations

import base64
import dataclasses
import json
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tracevault import __version__
from tracevault.errors import ConfigError
from tracevault.replayer._results import LoadedRun, VerifyReport
from tracevault.replayer.export._check import verify_bundle
from tracevault.replayer.export._format import (
    BUNDLE_FORMAT,
    REVEAL_FILE,
    _event_line,
    _json_line,
    _proof_name,
    _raw_name,
    _sha,
)
from tracevault.replayer.load.archive import ReadableStore
from tracevault.replayer.load.log_policy import LogPolicy, run_evidence
from tracevault.replayer.load.verify import verify
from tracevault.schemas import default_schemas
from tracevault.transparency import (
    TLOG_PROOF_HEADER,
    Checkpoint,
    RunLogEvidence,
    TlogProof,
    split_note,
    with_cosignatures,
)

__all__ = ["BUNDLE_FORMAT", "REVEAL_FILE", "export_bundle", "verify_bundle"]

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


class _Writer:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.files: dict[str, str] = {}

    def put(self, rel: str, data: bytes) -> None:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        self.files[rel] = _sha(data)


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
    evidence = _cosign(report.log_evidence or run_evidence(run, ()), cosigned)
    _make_empty(out_dir)
    w = _Writer(out_dir)
    _put_records(w, run, report, progress)
    _put_sources(w, run, store)
    if evidence is not None:
        _put_log(w, run, evidence)
    if reveal is not None:
        w.put(REVEAL_FILE, reveal(report))
    created = datetime.now(UTC).isoformat()
    _put_readme(w, run, report, evidence, created)
    _write_manifest(w, run, report, evidence, created, revealed=reveal is not None)
    return report


def _cosign(evidence: RunLogEvidence | None, cosigned: Sequence[str]) -> RunLogEvidence | None:
    """``evidence`` with the witnesses' ``cosigned`` copies' cosignatures added."""
    if cosigned:
        if evidence is None:
            raise ConfigError("cosignatures given, but the run has no signed-log evidence")
        note = evidence.checkpoint
        for c in cosigned:
            note = with_cosignatures(note, c)
        evidence = dataclasses.replace(evidence, checkpoint=note)
    return evidence


def _make_empty(out_dir: Path) -> None:
    """``out_dir``, new or empty: evidence is never overwritten."""
    if out_dir.exists() and any(out_dir.iterdir()):
        raise ConfigError(
            f"{out_dir} is not empty; export into a new folder (evidence is never overwritten)"
        )
    out_dir.mkdir(parents=True, exist_ok=True)


def _put_records(
    w: _Writer, run: LoadedRun, report: VerifyReport, progress: Callable[[int], None] | None
) -> None:
    """``raw/``, one file per seq, and ``chain.jsonl`` and ``events.jsonl`` beside it."""
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


def _put_sources(w: _Writer, run: LoadedRun, store: ReadableStore | None) -> None:
    """``schemas/``, and what the run was checked against: ``archive/`` or ``head.json``."""
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


def _put_readme(
    w: _Writer,
    run: LoadedRun,
    report: VerifyReport,
    evidence: RunLogEvidence | None,
    created: str,
) -> None:
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


def _write_manifest(
    w: _Writer,
    run: LoadedRun,
    report: VerifyReport,
    evidence: RunLogEvidence | None,
    created: str,
    *,
    revealed: bool,
) -> None:
    """``manifest.json``, last: it lists every file written before it with its SHA-256."""
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
    if revealed:
        manifest["reveal"] = REVEAL_FILE
    if evidence is not None:
        manifest["log"] = {
            "origin": evidence.origin,
            "checkpoint": "log/checkpoint",
            "checkpoint_object": evidence.checkpoint_obj,
            "proof_format": TLOG_PROOF_HEADER,
        }
    (w.root / "manifest.json").write_bytes(
        json.dumps(manifest, indent=2, sort_keys=True).encode() + b"\n"
    )


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
