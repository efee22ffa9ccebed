"""The run-id grammar: the one rule every boundary that admits a new run applies.

A run id is the Kafka key of every record of its run, goes into its chain's genesis and
every log leaf, and names the run's objects in the archive. So it has to be something every
store can name and every tool can print, and the rule has to be the same everywhere::

    run-id = 1*128( ALPHA / DIGIT / "." / "_" / ":" / "-" )   ; ASCII, 1 to 128 bytes
             except "." and ".."

UUIDs (what the Recorder makes when given none), ``tenant:job-42``, ``2026-12-01T10:00:00``
and ``bench-00001`` fit; ``.``, ``..``, an empty id, a ``/``, a space or any non-ASCII
character do not. The rule is stable (docs/design.md, "Run ids"): tightening it later would
strand recorded runs, so it only ever widens.

Where it is applied: the Recorder refuses a bad id in the agent (``ConfigError``); the
sequencer sends a raw record that would open a run with a bad id to the DLQ as ``invalid``.
Runs recorded before the rule (any UTF-8 text up to 255 bytes) stay readable: the archive
layout names any string (``tracevault.archive.layout``), and the sequencer continues a run it
already has.
"""

from __future__ import annotations

import re

from tracevault.errors import ConfigError

__all__ = ["MAX_RUN_ID_BYTES", "RUN_ID_RULE", "check_run_id", "run_id_problem"]

#: The longest run id, in bytes (= characters: the grammar is ASCII).
MAX_RUN_ID_BYTES = 128
#: The rule in words, as error messages and the DLQ name it.
RUN_ID_RULE = (
    f"a run id is 1 to {MAX_RUN_ID_BYTES} characters of A-Z a-z 0-9 . _ : - and not '.' or '..'"
)
_GRAMMAR = re.compile(rf"[A-Za-z0-9._:-]{{1,{MAX_RUN_ID_BYTES}}}")


def run_id_problem(run_id: object) -> str | None:
    """What is wrong with ``run_id`` by the grammar, naming the rule; None when it fits."""
    if isinstance(run_id, str) and _GRAMMAR.fullmatch(run_id) and run_id not in (".", ".."):
        return None
    if not isinstance(run_id, str):
        return f"run id {run_id!r:.80} is a {type(run_id).__name__}, not text; {RUN_ID_RULE}"
    shown = repr(run_id) if len(run_id) <= 40 else f"{run_id[:40]!r}…"
    size = len(run_id.encode("utf-8", "surrogatepass"))
    return f"run id {shown} ({size} bytes) does not fit the grammar: {RUN_ID_RULE}"


def check_run_id(run_id: object, *, what: str = "run id") -> str:
    """``run_id`` if it fits the grammar; ``ConfigError`` naming ``what`` and the rule."""
    problem = run_id_problem(run_id)
    if problem is not None:
        raise ConfigError(f"{what}: {problem}")
    assert isinstance(run_id, str)
    return run_id
