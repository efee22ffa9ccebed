"""Every command's ``--help`` as a user reads it: true variable names, lists kept as lists."""

from __future__ import annotations

import re
from collections.abc import Iterator

import click
import pytest
from click.testing import CliRunner

from tracevault.cli import tracevault
from tracevault.config import Settings


def _commands(cmd: click.Command, path: list[str]) -> Iterator[tuple[list[str], click.Command]]:
    yield path, cmd
    if isinstance(cmd, click.Group):
        ctx = click.Context(cmd)
        for name in cmd.list_commands(ctx):
            sub = cmd.get_command(ctx, name)
            assert sub is not None, name
            yield from _commands(sub, [*path, name])


COMMANDS = list(_commands(tracevault, []))
SETTINGS_ENV = {f"TRACEVAULT_{name.upper()}" for name in Settings.model_fields}


def _help(path: list[str], width: int = 80) -> str:
    res = CliRunner().invoke(tracevault, [*path, "--help"], terminal_width=width)
    assert res.exit_code == 0, res.output
    return res.output


def test_the_walk_reaches_every_command() -> None:
    names = {" ".join(p) for p, _ in COMMANDS}
    assert {"sequencer", "archiver", "replay show", "archive purge", "demo", "doctor"} <= names


@pytest.mark.parametrize("path", [p for p, _ in COMMANDS], ids=lambda p: " ".join(p) or "root")
def test_every_variable_named_in_help_is_a_setting(path: list[str]) -> None:
    named = set(re.findall(r"TRACEVAULT_[A-Z0-9_]*[A-Z0-9]", _help(path, width=200)))
    assert named <= SETTINGS_ENV, f"not a Settings field: {sorted(named - SETTINGS_ENV)}"


def test_every_option_envvar_is_a_setting() -> None:
    for path, cmd in COMMANDS:
        for param in cmd.params:
            envvars = param.envvar if isinstance(param.envvar, list | tuple) else [param.envvar]
            for env in filter(None, envvars):
                assert env in SETTINGS_ENV, f"{' '.join(path)} {param.name}: {env}"


@pytest.mark.parametrize("path", [p for p, _ in COMMANDS], ids=lambda p: " ".join(p) or "root")
def test_no_help_shows_a_literal_backslash_b(path: list[str]) -> None:
    out = _help(path)
    assert "\\b" not in out and "\b" not in out


@pytest.mark.parametrize("path", [p for p, _ in COMMANDS], ids=lambda p: " ".join(p) or "root")
def test_every_help_fits_80_columns(path: list[str]) -> None:
    # click wraps paragraphs but not \b blocks (examples, lists): those must be written short.
    wide = [line for line in _help(path).splitlines() if len(line) > 80]
    assert not wide


@pytest.mark.parametrize(
    ("command", "lines"),
    [
        (
            "demo",
            [
                "1. uses the broker at --bootstrap-servers",
                "2. creates the topics",
                "3. AGENTS threads each record RUNS",
                "4. waits until every run is sealed",
                "5. verifies and replays a sample",
                "6. stops everything it started",
                "tracevault demo --agents 8 --runs 20 --json",
            ],
        ),
        (
            "doctor",
            [
                "retention policy",
                "broker",
                "topic raw|sealed|heads|dlq",
                "sequencer lag",
                "archiver lag",
                "archive   ",
                "archive retention",
                "tracevault doctor",
            ],
        ),
    ],
)
def test_step_lists_keep_one_step_per_line(command: str, lines: list[str]) -> None:
    out = [line.strip() for line in _help([command]).splitlines()]
    for want in lines:
        assert any(line.startswith(want.strip()) for line in out), f"no line starts {want!r}"
    # Each step starts its own line: no line holds two of them.
    steps = [w.split()[0] for w in lines if w[0].isdigit()]
    for line in out:
        assert sum(line.startswith(s) or f" {s} " in line for s in steps) <= 1, line
