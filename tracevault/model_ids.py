"""Which model ids a Recorder accepts: exact builds, never moving aliases.

A record must say which model answered. Providers keep short names such as ``gpt-4o`` or
``claude-3-5-sonnet`` as *moving aliases*: they point them at a newer snapshot from time to
time, so a run recorded under an alias cannot later say which build produced its answers,
and replaying it against "the same" model means nothing. The Recorder therefore accepts an
id only when it names a dated or versioned build (``gpt-4o-2024-08-06``,
``claude-3-5-sonnet-20241022``, ``gemini-2.0-flash-001``), unless the deployment allows that
exact id: ``TRACEVAULT_MODEL_ALLOW`` (comma-separated) or ``Recorder(model_allow=[...])``,
for example for a local model whose name carries no version.

This is a recording policy only: replay serves whatever id the record holds. See
docs/design.md ("The event": model). ``MOVING_ALIASES`` is maintained by hand; an id that is
neither listed nor dated is refused all the same, the list only makes the message precise.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from types import MappingProxyType

from tracevault.errors import PayloadError

__all__ = ["MOVING_ALIASES", "check_model_id", "is_exact_build", "moving_alias"]

#: Known moving aliases per provider, each with an example of a dated build to record instead
#: (None where the provider publishes no dated id to point at).
MOVING_ALIASES: Mapping[str, Mapping[str, str | None]] = MappingProxyType(
    {
        "OpenAI": MappingProxyType(
            {
                "gpt-4o": "gpt-4o-2024-08-06",
                "gpt-4o-mini": "gpt-4o-mini-2024-07-18",
                "gpt-4.1": "gpt-4.1-2025-04-14",
                "gpt-4.1-mini": "gpt-4.1-mini-2025-04-14",
                "gpt-4.1-nano": "gpt-4.1-nano-2025-04-14",
                "gpt-4-turbo": "gpt-4-turbo-2024-04-09",
                "gpt-4": "gpt-4-0613",
                "gpt-3.5-turbo": "gpt-3.5-turbo-0125",
                "o1": "o1-2024-12-17",
                "o3": "o3-2025-04-16",
                "o3-mini": "o3-mini-2025-01-31",
                "o4-mini": "o4-mini-2025-04-16",
                "gpt-5": "gpt-5-2025-08-07",
                "gpt-5-mini": "gpt-5-mini-2025-08-07",
                "gpt-5-nano": "gpt-5-nano-2025-08-07",
            }
        ),
        "Anthropic": MappingProxyType(
            {
                "claude-3-opus": "claude-3-opus-20240229",
                "claude-3-haiku": "claude-3-haiku-20240307",
                "claude-3-5-sonnet": "claude-3-5-sonnet-20241022",
                "claude-3-5-haiku": "claude-3-5-haiku-20241022",
                "claude-3-7-sonnet": "claude-3-7-sonnet-20250219",
                "claude-sonnet-4": "claude-sonnet-4-20250514",
                "claude-opus-4": "claude-opus-4-20250514",
                "claude-opus-4-1": "claude-opus-4-1-20250805",
                "claude-sonnet-4-5": "claude-sonnet-4-5-20250929",
                "claude-haiku-4-5": "claude-haiku-4-5-20251001",
            }
        ),
        "Google": MappingProxyType(
            {
                "gemini-1.5-pro": "gemini-1.5-pro-002",
                "gemini-1.5-flash": "gemini-1.5-flash-002",
                "gemini-2.0-flash": "gemini-2.0-flash-001",
                "gemini-2.0-flash-lite": "gemini-2.0-flash-lite-001",
                "gemini-2.5-pro": None,
                "gemini-2.5-flash": None,
                "gemini-2.5-flash-lite": None,
            }
        ),
    }
)

# "…-latest", "…:default": a name that says it moves.
_MOVING_SUFFIX = re.compile(
    r"(^|[-_:/@.])(latest|default|auto|stable|current|preview)$", re.IGNORECASE
)
# One component (between - _ @ : . / or the ends) that pins a build.
_BUILD = re.compile(
    r"(?:^|[-_@:./])(?:"
    r"(?:19|20)\d\d-?(?:0[1-9]|1[0-2])-?(?:0[1-9]|[12]\d|3[01])"  # a date: 2024-08-06, 20241022
    r"|\d{3,4}"  # a build number or stamp: -001, -0613 (MMDD), -2411 (YYMM)
    r"|(?:0[1-9]|1[0-2])-(?:0[1-9]|[12]\d|3[01])"  # month-day: ...-preview-05-06
    r"|v\d+(?::\d+)?"  # a version: -v2, -v2:0 (Bedrock)
    r"|sha256:[0-9a-f]{12,}"  # a content digest
    r")(?=$|[-_@:./])",
    re.IGNORECASE,
)
_BY_ALIAS = {
    alias: (provider, dated)
    for provider, aliases in MOVING_ALIASES.items()
    for alias, dated in aliases.items()
}


def _base_name(model: str) -> str:
    """``openai/gpt-4o`` → ``gpt-4o``; ``us.anthropic.claude-3-5-sonnet`` → its last part."""
    name = model.rsplit("/", 1)[-1].lower()
    for vendor in ("anthropic.", "openai.", "google."):
        if vendor in name:
            name = name.split(vendor, 1)[1]
    return name


def moving_alias(model: str) -> tuple[str, str | None] | None:
    """(provider, example dated build) when ``model`` is a known moving alias."""
    return _BY_ALIAS.get(_base_name(model))


def is_exact_build(model: str) -> bool:
    """Whether ``model`` names a dated or versioned build and no moving alias."""
    if moving_alias(model) is not None or _MOVING_SUFFIX.search(model):
        return False
    return _BUILD.search(model) is not None


def _how_to_allow(model: str) -> str:
    return (
        f"or, if this deployment accepts the id as it is, allow it with "
        f"TRACEVAULT_MODEL_ALLOW={model} or Recorder(model_allow=[{model!r}])"
    )


def check_model_id(model: str, allow: Iterable[str] = (), *, path: str = "$.model") -> str:
    """Return ``model`` if it may be recorded; raise :class:`PayloadError` saying what to
    record instead otherwise (see the module doc)."""
    if model in allow or is_exact_build(model):
        return model
    alias = moving_alias(model)
    if alias is not None:
        provider, dated = alias
        example = (
            f" (e.g. {dated!r})"
            if dated
            else " (the model version its response reports, e.g. in 'modelVersion')"
        )
        raise PayloadError(
            f"{path} {model!r} is a moving alias: {provider} points it at a newer build from "
            "time to time, so the record could not say which model answered. Record the "
            f"dated build the provider's response names{example}, {_how_to_allow(model)}",
            path=path,
        )
    if _MOVING_SUFFIX.search(model):
        raise PayloadError(
            f"{path} {model!r} is an alias that can change under you; record the exact build "
            "the provider answered with (e.g. 'claude-sonnet-4-5-20250929'), "
            f"{_how_to_allow(model)}",
            path=path,
        )
    raise PayloadError(
        f"{path} {model!r} names no dated or versioned build, so the record could not say "
        "which model answered. Record the exact build the provider reports (such as "
        "'gpt-4o-2024-08-06', 'claude-3-5-sonnet-20241022' or 'gemini-2.0-flash-001'), "
        f"{_how_to_allow(model)}",
        path=path,
    )
