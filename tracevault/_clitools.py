"""Helpers shared by the component commands: settings from the group, output, JSON."""

from __future__ import annotations

import json
from typing import Any

import click
from rich.console import Console

from tracevault.config import Settings, load_settings

__all__ = ["echo_json", "settings_from", "stderr", "stdout"]

stdout = Console()
stderr = Console(stderr=True)


def settings_from(ctx: click.Context, **overrides: Any) -> Settings:
    """The group's flags and env, overridden by a command's own flags (None = not given)."""
    root = ctx.find_root()
    base = dict((root.obj or {}).get("settings_overrides", {}))
    base.update({k: v for k, v in overrides.items() if v is not None})
    return load_settings(**base)


def echo_json(value: Any) -> None:
    """One JSON document on stdout, for scripts (no colour, no wrapping)."""
    click.echo(json.dumps(value, sort_keys=True, default=str))
