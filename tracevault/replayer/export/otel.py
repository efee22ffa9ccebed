"""``replay export --otel``: runs as OpenTelemetry GenAI spans, one OTLP request for all.

Each run comes from ``read`` (the command's: verified as ``replay verify`` does, or
unchecked under ``--no-verify``), then each sub-agent run it started, so a tree is one trace.
The exporter needs the ``otel`` extra, imported only when asked for.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from tracevault._clitools import echo_json, stdout
from tracevault.content import metadata_only
from tracevault.errors import ConfigError
from tracevault.replayer._results import Record
from tracevault.replayer.load.opened import opened

__all__ = ["export_otel"]


def export_otel(
    read: Callable[[str], Record],
    run_ids: tuple[str, ...],
    *,
    out: Path | None,
    endpoint: str | None,
    content: bool,
    as_json: bool,
) -> None:
    """Read each run (and its sub-agent runs), then send or write one OTLP request."""
    if (out is None) == (endpoint is None):
        raise ConfigError("--otel needs exactly one of --endpoint URL or -o FILE.json")
    from tracevault.integrations.otel import (  # noqa: PLC0415
        ExportedRun,
        child_runs,
        otlp_json,
        otlp_request,
        send_otlp,
    )

    runs = []
    todo, seen = list(run_ids), set(run_ids)
    while todo:  # each run, then the sub-agent runs it started: one trace per tree
        run_id = todo.pop(0)
        record = read(run_id)
        hashes = {r.seq: r.hash for r in record.run.records}
        # Content is exported only with --content: only then does it need the run's key.
        raws = record.events
        events = opened(record.settings, raws) if content else metadata_only(raws)
        runs.append(ExportedRun(run_id, events, hashes, record.head, record.status))
        children = [c for c in child_runs(events) if c not in seen]
        seen.update(children)
        todo.extend(children)
    request = otlp_request(runs, content=content)
    spans = sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)
    if endpoint is not None:
        target = send_otlp(request, endpoint)
    else:
        assert out is not None
        out.write_text(json.dumps(otlp_json(request), indent=1) + "\n", encoding="utf-8")
        target = str(out)
    if as_json:
        exported = [r.run_id for r in runs]
        echo_json({"runs": exported, "spans": spans, "to": target, "content": content})
    else:
        stdout.print(f"[green]exported[/] {spans} spans of {len(runs)} run(s) to {target}")
