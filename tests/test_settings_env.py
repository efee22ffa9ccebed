"""A ``TRACEVAULT_*`` variable no one reads is refused with the nearest valid name.

pydantic-settings ignores unknown variables under its prefix, so before this check a typo such
as ``TRACEVAULT_RETENTON_DAYS=365`` left retention at 183 days without a word.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tracevault.config import OTHER_VARIABLES, Settings, check_environment, load_settings
from tracevault.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
# The C headers' include guards are spelt like variables but are none.
_NOT_VARIABLES = re.compile(r"^TRACEVAULT_\w+_H$")


def test_a_misspelt_setting_is_refused_with_the_nearest_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TRACEVAULT_RETENTON_DAYS", "365")
    with pytest.raises(ConfigError) as err:
        load_settings()
    assert str(err.value) == (
        "unknown setting TRACEVAULT_RETENTON_DAYS; did you mean TRACEVAULT_RETENTION_DAYS?"
    )


def test_a_name_near_nothing_is_refused_without_a_guess() -> None:
    with pytest.raises(ConfigError, match=r"^unknown setting TRACEVAULT_XYZZY \(every setting"):
        check_environment({"TRACEVAULT_XYZZY": "1"})


def test_valid_names_in_any_case_and_other_prefixes_pass() -> None:
    check_environment(
        {
            "TRACEVAULT_RETENTION_DAYS": "365",
            "tracevault_bootstrap_servers": "h:9092",
            "TRACEVAULT_KAFKA_HOME": "/tmp/k",
            "KAFKA_BOOTSTRAP_SERVERS": "h:9092",
            "TRACEVAULTX": "not ours",
        }
    )


def test_the_cli_exits_2_naming_the_typo() -> None:
    env = {**os.environ, "TRACEVAULT_SEQUENCER_BACH_SIZE": "10"}
    proc = subprocess.run(
        [sys.executable, "-m", "tracevault", "topics", "describe"],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "did you mean TRACEVAULT_SEQUENCER_BATCH_SIZE?" in proc.stderr


def _names_read_in_the_repository() -> set[str]:
    names: set[str] = set()
    for folder in ("tracevault", "dev", "tests", "bench", ".ci"):
        for path in (ROOT / folder).rglob("*"):
            # This file spells typos on purpose.
            skip = path.suffix in (".so", ".pyc", ".o") or path == Path(__file__).resolve()
            if path.is_file() and not skip:
                text = path.read_text(errors="replace")
                names.update(re.findall(r"\bTRACEVAULT_[A-Z0-9_]*[A-Z0-9]\b", text))
    for top in ("docker-compose.yml", "Dockerfile"):
        names.update(re.findall(r"\bTRACEVAULT_[A-Z0-9_]*[A-Z0-9]\b", (ROOT / top).read_text()))
    return {n for n in names if not _NOT_VARIABLES.match(n)}


def test_every_variable_the_repository_uses_is_a_setting_or_listed() -> None:
    fields = {f"TRACEVAULT_{name.upper()}" for name in Settings.model_fields}
    unknown = _names_read_in_the_repository() - fields - OTHER_VARIABLES
    assert not unknown, f"add to tracevault.config.OTHER_VARIABLES or fix: {sorted(unknown)}"
    assert not OTHER_VARIABLES & fields
