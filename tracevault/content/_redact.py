"""Redaction before recording: matched values replaced by a keyed fingerprint, in the agent.

What must never be recorded, not even encrypted (a card number an agent was handed), is
replaced before the Recorder makes the canonical JSON: nothing of it reaches Kafka, the
spool or the archive. Rules (docs/confidentiality.md, "Redaction"):

- ``path:$.request.args.card`` — the whole value at a JSON path of a field (``request`` or
  ``response``; ``*`` any key, ``[*]`` any index);
- ``email``, ``card`` (13 to 19 digits, spaces or dashes between, Luhn-valid) — every match
  inside any string;
- ``regex:PATTERN`` — every match of a Python regular expression inside any string.

A replaced value becomes ``"[redacted:<rule>:<fingerprint>]"``, the fingerprint an HMAC-SHA256
under the deployment's redaction key of the value's canonical JSON: equal values stay equal
(within a run and across runs, so diffs and replays still compare), and no one without the
key can test a guess. The rules (never the key) travel in RUN_STARTED (:data:`REDACT_ATTRIBUTE`);
replay applies the same rules, with the same key, to the re-run's requests before comparing.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import Callable, Iterable
from typing import Any

from tracevault.errors import ConfigError

__all__ = ["REDACT_ATTRIBUTE", "Redactor"]

#: The RUN_STARTED attribute listing the run's redaction rules (JSON list of rule strings).
REDACT_ATTRIBUTE = "tracevault.redact"

_EMAIL = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}")
_CARD = re.compile(r"(?<!\d)\d(?:[ -]?\d){12,18}(?!\d)")
_MARK = re.compile(r"\[redacted:[a-z]+:[0-9a-f]{16}\]")


def _luhn(digits: str) -> bool:
    total = 0
    for i, c in enumerate(reversed(digits)):
        d = int(c)
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def _card_ok(text: str) -> bool:
    return _luhn(re.sub(r"[ -]", "", text))


def _path_parts(path: str) -> list[str]:
    if not path.startswith("$."):
        raise ConfigError(f"redaction path {path!r} must start with $. (e.g. $.request.args.card)")
    return [p for p in re.split(r"\.|(?=\[)", path[2:]) if p]


class Redactor:
    """The rules of one run and the key of the deployment; applies them to a field's value."""

    __slots__ = ("_key", "_paths", "_patterns", "rules")

    def __init__(self, rules: Iterable[str], key: bytes) -> None:
        self.rules = list(rules)
        if not key:
            raise ConfigError(
                "redaction needs a key for its fingerprints: set TRACEVAULT_REDACTION_KEY"
            )
        self._key = key
        self._paths: list[list[str]] = []
        self._patterns: list[tuple[str, re.Pattern[str], Callable[[str], bool] | None]] = []
        for rule in self.rules:
            if not isinstance(rule, str):
                raise ConfigError(f"Recorder(redact=...) rules are strings, got {rule!r}")
            if rule.startswith("path:"):
                self._paths.append(_path_parts(rule[5:]))
            elif rule == "email":
                self._patterns.append(("email", _EMAIL, None))
            elif rule == "card":
                self._patterns.append(("card", _CARD, _card_ok))
            elif rule.startswith("regex:"):
                try:
                    self._patterns.append(("regex", re.compile(rule[6:]), None))
                except re.error as exc:
                    raise ConfigError(f"redaction rule {rule!r}: {exc}") from None
            else:
                raise ConfigError(
                    f"unknown redaction rule {rule!r}: path:$.FIELD..., email, card or regex:RE"
                )

    def attribute(self) -> str:
        return json.dumps(self.rules, separators=(",", ":"))

    @classmethod
    def from_attribute(cls, text: str, key: bytes) -> Redactor:
        rules = json.loads(text)
        if not isinstance(rules, list):
            raise ConfigError(f"the {REDACT_ATTRIBUTE} attribute is not a list of rules")
        return cls(rules, key)

    def _mark(self, rule: str, value: Any) -> str:
        data = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        mac = hmac.new(self._key, b"tracevault/v1/redact\0" + data.encode(), hashlib.sha256)
        return f"[redacted:{rule}:{mac.hexdigest()[:16]}]"

    def apply(self, value: Any, field: str) -> Any:
        """``value`` (the JSON of field ``request`` or ``response``) with the rules applied."""
        for parts in self._paths:
            if parts and parts[0] == field:
                value = self._at(value, parts[1:], "path")
        if self._patterns:
            value = self._walk(value)
        return value

    def text(self, text: str) -> str:
        """A free text with the pattern rules applied (``email``, ``card``, ``regex:``): an
        error's message, which no path names (docs/confidentiality.md, "Redaction")."""
        return self._text(text) if self._patterns else text

    def _at(self, value: Any, parts: list[str], rule: str) -> Any:
        if not parts:
            if isinstance(value, str) and _MARK.fullmatch(value):
                return value  # already redacted (a served value passed on): stays equal
            return self._mark(rule, value)
        head, rest = parts[0], parts[1:]
        if isinstance(value, dict):
            if head == "*":
                return {k: self._at(v, rest, rule) for k, v in value.items()}
            if head in value:
                return {**value, head: self._at(value[head], rest, rule)}
        elif isinstance(value, list) and head.startswith("["):
            idx = head[1:-1]
            if idx == "*":
                return [self._at(v, rest, rule) for v in value]
            if idx.isdigit() and int(idx) < len(value):
                i = int(idx)
                return [*value[:i], self._at(value[i], rest, rule), *value[i + 1 :]]
        return value

    def _walk(self, value: Any) -> Any:
        if isinstance(value, str):
            return self._text(value)
        if isinstance(value, dict):
            return {self._text(k): self._walk(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self._walk(v) for v in value]
        return value

    def _text(self, text: str) -> str:
        for rule, pattern, ok in self._patterns:
            text = pattern.sub(
                lambda m, r=rule, ok=ok: (
                    m[0]  # type: ignore[misc]
                    if (ok is not None and not ok(m[0])) or _MARK.fullmatch(m[0])
                    else self._mark(r, m[0])
                ),
                text,
            )
        return text
