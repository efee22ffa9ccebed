"""An incident package: reports and bundles of runs under a manifest the operator signs.

Why signed by the operator: the reports and bundles each prove their runs against the signed
log, but not that the package is the one the operator sent (a run left out, a file added, an
older report swapped in). ``manifest.json`` lists every file with its SHA-256 and size, the
runs and how they were chosen, and the crosswalk; ``manifest.sig`` is a C2SP signed note of
the manifest's SHA-256 by the operator key. ``verify_package`` fails closed: with no trusted
operator vkey it is ``unverified``; a changed, missing or added byte anywhere is ``failed``,
naming the file (docs/desk.md, "The incident package").
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tracevault.desk.crosswalk import crosswalk_json, crosswalk_markdown
from tracevault.errors import ConfigError, LogError
from tracevault.transparency import NoteSigner, NoteVerifier, open_note, sign_note

__all__ = [
    "MANIFEST",
    "PACKAGE_FORMAT",
    "SIGNATURE",
    "PackageCheck",
    "PackageWriter",
    "verify_package",
]

PACKAGE_FORMAT = "tracevault-incident/v1"
MANIFEST = "manifest.json"
SIGNATURE = "manifest.sig"
_HEADER = "tracevault incident manifest v1\n"


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class PackageWriter:
    """Writes a package into ``root`` (new or empty): files as they come, then the signed
    manifest over all of them (``seal``)."""

    def __init__(self, root: Path) -> None:
        if root.exists() and (not root.is_dir() or any(root.iterdir())):
            raise ConfigError(f"-o {root}: exists and is not an empty directory")
        root.mkdir(parents=True, exist_ok=True)
        self.root = root
        self.runs: list[dict[str, Any]] = []

    def add_run(self, entry: dict[str, Any]) -> None:
        """One run's entry of the manifest (id, status, its report and bundle paths)."""
        self.runs.append(entry)

    def write(self, rel: str, data: bytes) -> None:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)

    def seal(self, signer: NoteSigner, selection: dict[str, Any]) -> dict[str, Any]:
        """Write the crosswalk, then ``manifest.json`` listing every file, then its signature
        by ``signer``; returns the manifest."""
        run_ids = [str(r["run_id"]) for r in self.runs]
        self.write("crosswalk.json", _json({"obligations": crosswalk_json()}))
        self.write("crosswalk.md", crosswalk_markdown(run_ids).encode())
        manifest = {
            "format": PACKAGE_FORMAT,
            "created": datetime.now(UTC).isoformat(timespec="seconds"),
            "signed_by": f"{signer.name}+{signer.key_id.hex()}",
            "selection": selection,
            "runs": self.runs,
            "crosswalk": "crosswalk.json",
            "files": {rel: _entry(self.root / rel) for rel in _files(self.root)},
        }
        body = _json(manifest)
        self.write(MANIFEST, body)
        self.write(SIGNATURE, sign_note(f"{_HEADER}sha256 {_sha(body)}\n", [signer]).encode())
        return manifest


@dataclass(slots=True)
class PackageCheck:
    """What ``verify_package`` found: ``status`` (``verified``, ``unverified``, ``failed``),
    the problems (each naming a file), the operator key that signed, the runs listed."""

    status: str
    problems: list[str] = field(default_factory=list)
    signer: str | None = None
    runs: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status == "verified"

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "problems": self.problems, "signer": self.signer,
                "runs": self.runs}  # fmt: skip


def verify_package(root: Path, operators: Sequence[NoteVerifier]) -> PackageCheck:
    """Check ``root``'s signature with the trusted ``operators``, then every byte of every
    file against the manifest, and that no file was added. Fails closed."""
    try:
        body, note = (root / MANIFEST).read_bytes(), (root / SIGNATURE).read_bytes()
    except OSError as exc:
        return PackageCheck("failed", [f"{exc.filename}: cannot be read ({exc.strerror})"])
    check = PackageCheck("verified")
    try:
        manifest = json.loads(body)
        files: dict[str, dict[str, Any]] = manifest["files"]
        check.runs = [str(r["run_id"]) for r in manifest["runs"]]
    except (ValueError, KeyError, TypeError) as exc:
        return PackageCheck("failed", [f"{MANIFEST}: not a package manifest ({exc})"])
    if not operators:
        check.status = "unverified"
        check.problems.append(
            f"{SIGNATURE}: no trusted operator vkey, the signature was not checked (give "
            "--operator-vkey or set TRACEVAULT_OPERATOR_VKEYS)"
        )
    else:
        try:
            text, good = open_note(note, operators)
        except LogError as exc:
            return PackageCheck("failed", [f"{SIGNATURE}: {exc}"], runs=check.runs)
        check.signer = ", ".join(f"{v.name}+{v.key_id.hex()}" for v in good)
        if text != f"{_HEADER}sha256 {_sha(body)}\n":
            check.problems.append(f"{MANIFEST}: its SHA-256 is not the one the operator signed")
    present = set(_files(root)) - {MANIFEST, SIGNATURE}
    for rel in sorted(set(files) | present):
        want = files.get(rel)
        if want is None:
            check.problems.append(f"{rel}: not in the manifest (added)")
        elif rel not in present:
            check.problems.append(f"{rel}: missing")
        elif _entry(root / rel) != want:
            check.problems.append(f"{rel}: changed (its SHA-256 is not the manifest's)")
    if any(not p.startswith(f"{SIGNATURE}: no trusted") for p in check.problems):
        check.status = "failed"
    return check


def _entry(path: Path) -> dict[str, Any]:
    data = path.read_bytes()
    return {"sha256": _sha(data), "bytes": len(data)}


def _files(root: Path) -> Iterable[str]:
    """Every file under ``root``, as a POSIX path relative to it, sorted."""
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def _json(value: object) -> bytes:
    return (json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True) + "\n").encode()
