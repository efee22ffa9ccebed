"""One self-contained HTML file that shows runs and re-verifies their evidence when opened.

Why HTML with its own verifier: an auditor or a regulator cannot run Python, and a document
that merely says "verified" proves nothing. The file carries the proofs themselves (events,
inclusion proofs, the signed checkpoint with its cosignatures, the trusted vkeys) as JSON in a
``<script type="application/json">`` block, and ``assets/report.js`` recomputes the chain, the
RFC 6962 proofs and the Ed25519 signatures with WebCrypto on opening (docs/desk.md). A
Content-Security-Policy allows only that one script (by hash) and no connection at all, so
the page works offline and no payload can run code or fetch anything.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from importlib.resources import files
from typing import Any

from tracevault import __version__
from tracevault.desk.evidence import RunEvidence
from tracevault.desk.rangeproof import path_ranges, run_proof
from tracevault.errors import LogError
from tracevault.schemas import EventKind, TraceEvent
from tracevault.transparency import Checkpoint, split_note

__all__ = ["REPORT_FORMAT", "event_name", "pretty_json", "render_report"]

REPORT_FORMAT = "tracevault/report/v2"


def _asset(name: str) -> str:
    return files("tracevault.desk").joinpath("assets", name).read_text(encoding="utf-8")


def pretty_json(data: bytes | None) -> str:
    """``data`` as indented JSON, whole; as text when it is not JSON (never cut)."""
    if data is None:
        return "-"
    try:
        return json.dumps(json.loads(data), indent=2, ensure_ascii=False, sort_keys=True)
    except ValueError:
        return data.decode("utf-8", "replace")


def event_name(event: TraceEvent) -> str:
    """The model of a MODEL_CALL, the tool of a TOOL_CALL (from its request), else ''."""
    if event.model:
        return event.model
    if event.kind is EventKind.TOOL_CALL and event.request:
        try:
            req = json.loads(event.request)
        except ValueError:
            return ""
        tool = req.get("tool") if isinstance(req, dict) else None
        return tool if isinstance(tool, str) else ""
    return ""


def durations_ms(events: Sequence[TraceEvent]) -> list[float | None]:
    """Each crossing's time until the next one was recorded (the last has none)."""
    return [
        (events[i + 1].at - e.at) / 1000 if i + 1 < len(events) else None
        for i, e in enumerate(events)
    ]


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _run_data(ev: RunEvidence, anchor: str) -> dict[str, Any]:
    """The run's evidence as the page's verifier reads it, and what its timeline shows.

    Keys of an event, short as there are 10,000s: seq, h (hash), p (prev_hash, when it is not
    the last event's hash), raw, i (leaf index, when not the last one's + 1; null: no proof),
    o (opened), k (kind, in ``kinds``; left out: the last one's), t (micros since the last
    event; left out: the last step), n (model / tool), q / r (request / response: [offset,
    length] in raw, or base64 when opened), qs / rs (their SHA-256 when not revealed).

    The run's inclusion in the checkpoint is one proof for all its leaves (``proof``: the
    subtrees beside them, ``rangeproof``), not one per leaf: the browser hashes every node
    above the leaves itself. The timeline is drawn by the page's script from these rows
    (kind, time, model / tool, time until the next crossing), not rendered as HTML rows."""
    proofs = ev.proofs()
    kinds: dict[str, int] = {}
    rows: list[dict[str, Any]] = []
    events = list(ev.events)
    by_seq = {e.seq: e for e in events}
    size = _tree_size(ev)
    last_at = 0
    last_kind: int | None = None
    last_step: int | None = None
    last_hash = b""
    last_index: int | None = None
    proven: list[int] = []  # the leaf indexes the run's proof covers (report.js: the same rule)
    known: dict[tuple[int, int], bytes] = {}
    for sealed in ev.records:
        p = proofs.get(sealed.seq)
        shown = sealed.seq in ev.revealed
        e = by_seq.get(sealed.seq)
        row: dict[str, Any] = {"seq": sealed.seq, "h": _b64(sealed.hash)}
        if rows == [] or sealed.prev_hash != last_hash:  # else it is the last event's hash
            row["p"] = _b64(sealed.prev_hash)
        row["raw"] = _b64(sealed.raw) if shown else None
        index = None if p is None else p.index
        if index is None or last_index is None or index != last_index + 1:
            row["i"] = index  # else the next leaf after the last event's
        if p is not None and p.index < size and (not proven or p.index > proven[-1]):
            for where, h in zip(path_ranges(p.index, size), p.proof, strict=False):
                known.setdefault(where, h)  # a bad proof's hashes: the browser fails it
            proven.append(p.index)
        last_hash, last_index = sealed.hash, index
        if sealed.seq in ev.opened:
            row["o"] = True
        if e is not None:
            kind, step = kinds.setdefault(e.kind.value, len(kinds)), e.at - last_at
            if kind != last_kind:
                row["k"] = kind  # else the last event's kind
            if step != last_step:
                row["t"] = step  # micros since the last event's; else the last step again
            last_at, last_kind, last_step = e.at, kind, step
            name = event_name(e)
            if name:
                row["n"] = name
            for part, data in (("q", e.request), ("r", e.response)):
                if not shown:  # hashes only: the bytes hold the payload
                    row[part + "s"] = hashlib.sha256(data).hexdigest()
                    continue
                at = sealed.raw.find(data) if sealed.seq not in ev.opened else -1
                # where the payload lies in the raw event (the page shows those bytes);
                # an opened payload is not in the ciphertext, so it is carried itself
                row[part] = [at, len(data)] if at >= 0 else _b64(data)
        rows.append(row)
    return {
        "run_id": ev.run_id,
        "anchor": anchor,
        "python": {"status": ev.status, "checks": list(ev.checks), "failure": ev.failure},
        "checkpoint": None if ev.log is None else ev.log.checkpoint,
        "origin": None if ev.log is None else ev.log.origin,
        "kinds": list(kinds),
        "proof": [_b64(h) for h in run_proof(proven, size, known)] if proven else [],
        "decoded": len(events),
        "events": rows,
    }


def _tree_size(ev: RunEvidence) -> int:
    """The size of the tree the run's leaves are proven in (its checkpoint's), 0 if none."""
    if ev.log is None:
        return 0
    try:
        return Checkpoint.parse(split_note(ev.log.checkpoint)[0]).size
    except (LogError, ValueError):
        return 0  # no signed tree: the browser says so, and proves nothing against it


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _python_status(runs: Sequence[RunEvidence]) -> str:
    bad = [r for r in runs if not r.verified]
    if not bad:
        return (
            '<p class="status ok" id="tv-python-status" data-state="verified">'
            f"Verified by tracevault {_e(__version__)} when written: {len(runs)} of "
            f"{len(runs)} runs (signed log, then chain).</p>"
        )
    parts = []
    for r in bad:
        why = r.failure if r.status == "failed" else r.why
        parts.append(f"{_e(r.run_id)}: {r.status.upper()}: {_e(why)}")
    state = "failed" if any(r.status == "failed" for r in bad) else "unverified"
    return (
        f'<p class="status bad" id="tv-python-status" data-state="{state}">'
        f"{state.upper()} when written: " + "; ".join(parts) + "</p>"
    )


def _timeline(ev: RunEvidence, anchor: str) -> str:
    """The table's head only: the page's script draws a row per event from the evidence it
    checked (docs/desk.md); without script the page says why nothing is shown."""
    undecoded = ""
    if len(ev.events) < len(ev.records):
        undecoded = (
            f'<p class="bad">seqs {len(ev.events)}..{len(ev.records) - 1} could not be '
            "decoded: shown by hash in the proofs only</p>"
        )
    return (
        f'<noscript><p class="status bad">This report needs JavaScript to verify its '
        f"evidence and show the {len(ev.records)} events: its own script recomputes the "
        "chain, the inclusion proofs and the signatures, then draws the timeline from the "
        "bytes it checked.</p></noscript>"
        f'<table id="{anchor}-timeline"><tr><th>seq</th><th>kind</th><th>time (UTC)</th>'
        "<th>until next</th><th>model / tool</th><th>checked in this browser</th>"
        f"<th>payloads</th></tr></table>{undecoded}"
    )


def _run_section(ev: RunEvidence, anchor: str) -> str:
    state = "ok" if ev.verified else "bad"
    what = ev.status.upper() + ("" if ev.failure is None else f": {_e(ev.failure)}")
    checks = "".join(f"<li>{_e(c)}</li>" for c in ev.checks)
    notices = "".join(f'<p class="status bad">{_e(n)}</p>' for n in ev.notices)
    origin = "none" if ev.log is None else _e(ev.log.origin)
    return (
        f'<section id="{anchor}"><h2>Run {_e(ev.run_id)}</h2>'
        f'<p class="{state}">tracevault verify: {what}</p>{notices}'
        f"<p>{len(ev.records)} events; signed log {origin}; payloads revealed for "
        f"{len(ev.revealed)} of {len(ev.records)} events.</p>"
        f"<details><summary>checks run by tracevault verify</summary><ul>{checks}</ul></details>"
        f"{_timeline(ev, anchor)}</section>"
    )


def render_report(
    runs: Sequence[RunEvidence],
    *,
    vkeys: Sequence[str],
    witness_vkeys: Sequence[str] = (),
    min_witnesses: int = 0,
) -> str:
    """The report of ``runs`` as one HTML document (str), proofs and verifier inside."""
    anchors = [f"run-{i}" for i in range(len(runs))]
    data = {
        "format": REPORT_FORMAT,
        "vkeys": list(vkeys),
        "witness_vkeys": list(witness_vkeys),
        "min_witnesses": min_witnesses,
        "runs": [_run_data(r, a) for r, a in zip(runs, anchors, strict=True)],
    }
    # "<" escaped: no payload can close the data block (JSON reads \u003c as "<")
    blob = json.dumps(data, separators=(",", ":")).replace("<", "\\u003c")
    script = _asset("report.js")
    digest = _b64(hashlib.sha256(script.encode()).digest())
    csp = (
        f"default-src 'none'; script-src 'sha256-{digest}'; style-src 'unsafe-inline'; "
        "img-src data:; connect-src 'none'; form-action 'none'; base-uri 'none'"
    )
    keys = "".join(f"<li><code>{_e(k)}</code></li>" for k in [*vkeys, *witness_vkeys])
    title = ", ".join(r.run_id for r in runs)
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{csp}">'
        f"<title>tracevault report: {_e(title)}</title><style>{_asset('report.css')}</style>"
        f"</head><body><h1>Evidence report: {_e(title)}</h1>"
        '<p class="status pending" id="tv-browser-status" data-state="pending">'
        "Not yet verified in this browser (the page's verifier needs JavaScript).</p>"
        f"{_python_status(runs)}"
        f"<p>Written {_e(datetime.now(UTC).isoformat(timespec='seconds'))} by tracevault "
        f"{_e(__version__)}. The log keys this report trusts are below: compare them with the "
        "keys the log's operator publishes, since whoever could rewrite this file could also "
        f"replace them.</p><ul>{keys or '<li class=bad>none: unverified</li>'}</ul>"
        + "".join(_run_section(r, a) for r, a in zip(runs, anchors, strict=True))
        + '<h2>Checks run in this browser</h2><ul class="checks" id="tv-checks"></ul>'
        "<h2>Proofs</h2><p>The raw events (base64, revealed seqs only), inclusion proofs, "
        "signed checkpoints and trusted keys, as JSON:</p>"
        f'<script type="application/json" id="tv-evidence">{blob}</script>'
        '<details><summary>evidence (JSON)</summary><pre id="tv-proofs"></pre></details>'
        f"<script>{script}</script></body></html>"
    )
