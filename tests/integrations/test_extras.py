"""An integration used without its extra names the extra to install, not a missing module.

Each integration imports its SDK only when used (docs/integrations.md, "Install"). Without
the extra, a user used to get ``No module named 'google'`` at the end of a 40-line traceback
from ``replay export --otel``. Each case here runs a fresh interpreter in which the SDK's
top package cannot be imported (``sys.modules[name] = None`` is how Python itself marks a
module as unimportable: the ``import`` statement raises ``ImportError``), so the real import
path of the integration is what fails.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# integration module -> (a top-level package its extra brings, the extra)
CASES = {
    "tracevault.integrations.openai": ("openai", "openai"),
    "tracevault.integrations.anthropic": ("anthropic", "anthropic"),
    "tracevault.integrations.langgraph": ("langchain_core", "langgraph"),
    "tracevault.integrations.openai_agents": ("agents", "agents"),
    "tracevault.integrations.mcp_client": ("mcp", "mcp"),
    "tracevault.integrations.otel": ("google", "otel"),
    "tracevault.integrations.litellm": ("litellm", "litellm"),
    "tracevault.integrations.pydantic_ai": ("pydantic_ai", "pydantic_ai"),
    "tracevault.integrations.adk": ("google.adk", "adk"),
    "tracevault.desk.app": ("starlette", "ui"),
}


def _without(package: str, code: str, *args: str) -> subprocess.CompletedProcess[str]:
    script = f"import sys\nsys.modules[{package!r}] = None\n{code}"
    return subprocess.run(
        [sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=120,
        check=False, cwd=ROOT,
    )  # fmt: skip


@pytest.mark.parametrize("module", sorted(CASES))
def test_importing_an_integration_without_its_extra_names_the_extra(module: str) -> None:
    package, extra = CASES[module]
    code = (
        "from tracevault.errors import ConfigError\n"
        f"try:\n    import {module}\n"
        "except ConfigError as e:\n    print(e)\n    raise SystemExit(e.exit_code)\n"
    )
    proc = _without(package, code)
    assert proc.returncode == 2, proc.stderr
    assert f"pip install 'tracevault[{extra}]'" in proc.stdout, proc.stdout


def test_every_extra_named_exists_and_all_names_every_integration_extra() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    named = {extra for _, extra in CASES.values()} | {"dask"}
    assert named <= set(extras)
    (all_extra,) = extras["all"]  # one requirement: tracevault[every,integration,extra]
    assert set(all_extra.split("[", 1)[1].rstrip("]").split(",")) == named, all_extra
    assert set(extras) - {"all", "dev"} == named  # a new extra is added here, and to `all`


def test_replay_export_otel_without_the_extra_is_one_line_and_exit_2(tmp_path: Path) -> None:
    main = "from tracevault.cli import main\nsys.argv[0] = 'tracevault'\nmain()"
    out = str(tmp_path / "otel.json")
    proc = _without("google", main, "replay", "export", "run-1", "--otel", "-o", out)
    assert proc.returncode == 2, proc.stderr
    assert "pip install 'tracevault[otel]'" in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.splitlines()) <= 3, proc.stderr


def test_the_dask_engine_without_the_extra_names_it() -> None:
    code = (
        "from tracevault.errors import ConfigError\n"
        "from tracevault.replayer.batch.command import DaskEngine\n"
        "try:\n    DaskEngine('tcp://127.0.0.1:1').__enter__()\n"
        "except ConfigError as e:\n    print(e)\n    raise SystemExit(e.exit_code)\n"
    )
    proc = _without("distributed", code)
    assert proc.returncode == 2, proc.stderr
    assert "pip install 'tracevault[dask]'" in proc.stdout, proc.stdout
