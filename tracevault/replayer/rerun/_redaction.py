"""The redaction rules of a recorded run, with this deployment's key, for replay to apply."""

from __future__ import annotations

from collections.abc import Sequence

from tracevault.config import load_settings
from tracevault.content import REDACT_ATTRIBUTE, Redactor
from tracevault.schemas import EventKind, TraceEvent

__all__ = ["run_redactor"]


def run_redactor(events: Sequence[TraceEvent]) -> Redactor | None:
    """The Redactor the run was recorded with (rules from its RUN_STARTED, the key from
    ``TRACEVAULT_REDACTION_KEY``), or None for a run recorded without rules. A redacted run
    replayed without the key is a ConfigError (exit 2) naming the setting."""
    if not len(events) or events[0].kind is not EventKind.RUN_STARTED:
        return None
    rules = events[0].attributes.get(REDACT_ATTRIBUTE)
    if rules is None:
        return None
    key = load_settings().redaction_key
    return Redactor.from_attribute(rules, b"" if key is None else key.get_secret_value().encode())
