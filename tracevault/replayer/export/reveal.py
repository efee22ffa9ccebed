"""A bundle's content revealed to one recipient: ``reveal.json`` written, and read back.

``export --reveal-to KEY`` adds ``reveal.json`` to a bundle: the run's data key, obtained
through the configured provider as every reader obtains it (``content.run_data_key``), sealed
for the recipient with HPKE and bound to this bundle's run, chain head and last seq
(``tracevault.content.seal_for``). The bundle itself stays ciphertext: ``verify --bundle``
needs no key, and without ``reveal.json`` (or without the recipient's private key) nothing in
it can be read. ``show --bundle DIR --recipient-key FILE`` checks the bundle's chain, opens
the sealed key with the private key alone and opens the run's fields with it
(docs/confidentiality.md, "Bundles for one reader").
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tracevault.config import Settings
from tracevault.content import (
    REVEAL_SUITE,
    Recipient,
    RecipientKey,
    RevealedRun,
    is_encrypted,
    metadata_only,
    open_for,
    opened_with,
    run_data_key,
    seal_for,
)
from tracevault.errors import ConfigError, ContentKeyError
from tracevault.replayer._records import LazyEvents
from tracevault.replayer._results import LoadedRun, VerifyReport
from tracevault.replayer.export.bundle import REVEAL_FILE, verify_bundle
from tracevault.replayer.load.opened import opened
from tracevault.schemas import TraceEvent

__all__ = ["bundle_events", "recipient_of", "reveal_hook", "reveal_json", "revealed_events"]


def recipient_of(text: str) -> Recipient:
    """``--reveal-to``: a recipient key string, or ``@FILE`` holding one."""
    what = "--reveal-to"
    if text.startswith("@"):
        try:
            text = Path(text[1:]).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"--reveal-to: cannot read {text[1:]}: {exc.strerror}") from None
        what = f"--reveal-to {text[1:]}"
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    if len(lines) != 1:
        raise ConfigError(f"{what}: give exactly one recipient key (a bundle reveals to one)")
    return Recipient.parse(lines[0], what=what)


def _identity(report: VerifyReport, bundle_run: str) -> RevealedRun:
    return RevealedRun(bundle_run, report.run_id, report.head, report.last_seq)


def reveal_json(recipient: Recipient, report: VerifyReport, data_key: bytes) -> bytes:
    """``reveal.json``: the run's data key sealed for ``recipient``, bound to ``report``'s
    run, head and last seq. One run: a bundle carries one run, not its sub-agent runs."""
    sealed = seal_for(recipient, data_key, _identity(report, report.run_id))
    doc = {
        "v": 1,
        "suite": REVEAL_SUITE,
        "recipient": {"name": recipient.name, "key_id": recipient.key_id, "key": recipient.key},
        "keys": [
            {
                "run_id": report.run_id,
                "head": report.head,
                "last_seq": report.last_seq,
                "sealed": base64.b64encode(sealed).decode("ascii"),
            }
        ],
    }
    return json.dumps(doc, indent=1, sort_keys=True).encode() + b"\n"


def _read(root: Path, run_id: str) -> dict[str, Any]:
    path = root / REVEAL_FILE
    try:
        doc = json.loads(path.read_bytes())
    except FileNotFoundError:
        raise ContentKeyError(
            f"bundle {root} (run {run_id}) is ciphertext only: it reveals its content to no "
            "one (exported without --reveal-to). `replay verify --bundle` needs no key; "
            "`replay show --bundle DIR --metadata` shows the timeline"
        ) from None
    except ValueError as exc:
        raise ContentKeyError(f"{path} is not JSON ({exc})") from None
    if not isinstance(doc, dict) or doc.get("v") != 1 or not isinstance(doc.get("keys"), list):
        raise ContentKeyError(f"{path} is not a version 1 tracevault reveal")
    return doc


def revealed_events(root: Path, report: VerifyReport, key: RecipientKey) -> Sequence[TraceEvent]:
    """The bundle's events (``report``: its checked chain) opened with the key revealed to
    ``key``'s recipient; ContentKeyError (exit 7) for a bundle revealed to someone else, a
    key sealed for another bundle or run, or a field that does not open under it."""
    events = report.events
    if not is_encrypted(events):
        return events
    doc = _read(root, report.run_id)
    named = doc.get("recipient") or {}
    me = key.recipient
    if named.get("key_id") != me.key_id:
        raise ContentKeyError(
            f"bundle {root} reveals run {report.run_id} to recipient {named.get('name')!r} "
            f"(key id {named.get('key_id')}); the key given is {me.describe()}: refused"
        )
    entry = next((k for k in doc["keys"] if k.get("run_id") == report.run_id), None)
    if entry is None:
        raise ContentKeyError(f"{root / REVEAL_FILE} holds no key for run {report.run_id}")
    try:
        sealed = base64.b64decode(str(entry.get("sealed")), validate=True)
    except binascii.Error:
        raise ContentKeyError(f"{root / REVEAL_FILE}: the sealed key is not base64") from None
    # Bound to what this bundle holds, never to what reveal.json says it was made for.
    data_key = open_for(key, sealed, _identity(report, report.run_id))
    return opened_with(events, data_key)


def reveal_hook(
    settings: Settings, run: LoadedRun, reveal_to: str | None
) -> Callable[[VerifyReport], bytes] | None:
    """``export --reveal-to``: the recipient parsed and the run's data key unwrapped (exit 7
    when this exporter holds no key for it) before anything is written; None without it."""
    if reveal_to is None:
        return None
    recipient = recipient_of(reveal_to)
    key = run_data_key(settings, LazyEvents([r["raw"] for r in run.records.rows]))
    if key is None:
        raise ConfigError(
            f"run {run.run_id} is recorded in clear: its bundle is readable by anyone, "
            "--reveal-to has no key to reveal"
        )
    return lambda report: reveal_json(recipient, report, key)


def bundle_events(
    settings: Settings, root: Path, recipient_key: Path | None, *, metadata: bool
) -> tuple[VerifyReport, Sequence[TraceEvent]]:
    """``show --bundle``: the bundle's chain checked (its signed log only by ``verify
    --bundle``), then its events with content opened by the recipient's private key, or
    through the configured provider without one; ``metadata``: no key, content hidden."""
    report = verify_bundle(root, chain_only=True)
    if metadata:
        return report, metadata_only(report.events)
    if recipient_key is not None:
        return report, revealed_events(root, report, RecipientKey.load(recipient_key))
    return report, opened(settings, report.events)
