"""The package's layers, read from the source: who may import whom.

docs/design.md ("Layout"): what several parts read lives beneath them, so the archive and the
heads record never import the services above them, no package reaches into another's private
(``_name``) module, and no two modules import each other. ``lint-imports`` (pyproject
``[tool.importlinter]``) checks the layers themselves; these read every import line, those
under ``if TYPE_CHECKING:`` and inside functions included.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import tracevault

ROOT = Path(tracevault.__file__).parent


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _all_modules() -> set[str]:
    """Python modules and the C extensions beside them (``_cput.c``: ``archive._cput``)."""
    return {_module_name(p) for pattern in ("*.py", "*.c") for p in ROOT.rglob(pattern)}


def _imported(tree: ast.AST, modules: set[str]) -> set[str]:
    """The tracevault modules ``tree`` imports, at any depth of its body.

    ``from pkg import mod`` where ``pkg.mod`` is a module counts as importing ``pkg.mod``.
    """
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.startswith("tracevault"):
                subs = {f"{node.module}.{a.name}" for a in node.names}
                found.update((subs & modules) or {node.module})
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("tracevault"))
    return found


def _imports() -> dict[str, set[str]]:
    """Every tracevault module → the tracevault modules it imports."""
    modules = _all_modules()
    return {
        _module_name(path): _imported(ast.parse(path.read_text(encoding="utf-8")), modules)
        for path in ROOT.rglob("*.py")
    }


def _cycle_from(graph: dict[str, set[str]], start: str) -> list[str] | None:
    stack: list[tuple[str, list[str]]] = [(start, [start])]
    seen: set[str] = set()
    while stack:
        node, path = stack.pop()
        for nxt in graph.get(node, ()):
            if nxt == start:
                return [*path, nxt]
            if nxt not in seen and nxt in graph:
                seen.add(nxt)
                stack.append((nxt, [*path, nxt]))
    return None


def test_no_module_is_in_an_import_cycle() -> None:
    """A cycle hidden behind a function-level or a type-only import is still a cycle (it was
    _store ↔ stores, then replayer.rerun.edges ↔ _interleave). Package ``__init__`` files count: a
    module that imports its own package's ``__init__`` is in a cycle with it."""
    graph = _imports()
    cycles = [" -> ".join(c) for name in sorted(graph) if (c := _cycle_from(graph, name))]
    assert not cycles, "\n".join(cycles)


def _private_owner(module: str) -> str | None:
    """The package whose private module ``module`` is (``tracevault.archive`` for
    ``tracevault.archive._store``), None when no part of it below ``tracevault`` is private."""
    parts = module.split(".")
    for i, part in enumerate(parts[1:], start=1):
        if part.startswith("_") and not part.startswith("__"):
            return ".".join(parts[:i])
    return None


def test_no_package_imports_another_packages_private_module() -> None:
    """``from tracevault.X._y import`` (or ``from tracevault.X import _y``) only inside X.

    A private module is free to change under its own package; what another package needs
    is exported by that package's ``__init__`` (its ``__all__``) or lives beneath both.
    """
    reaches = []
    for name, deps in _imports().items():
        for dep in sorted(deps):
            owner = _private_owner(dep)
            if owner is not None and name != owner and not name.startswith(f"{owner}."):
                reaches.append(f"{name} imports {dep}")
    assert not reaches, "\n".join(reaches)


def test_shared_layers_import_no_service() -> None:
    graph = _imports()
    shared = (
        "tracevault.archive",
        "tracevault.heads",
        "tracevault.transparency",
        "tracevault.kafka",
        "tracevault.schemas",
        "tracevault.services.runtime",
    )
    above = (
        "tracevault.services.sequencer",
        "tracevault.replayer",
        "tracevault.witness",
        "tracevault.services.archiver",
    )
    for name, deps in graph.items():
        if name.startswith(shared):
            wrong = sorted(d for d in deps if d.startswith(above))
            assert not wrong, f"{name} imports {wrong}: the shared layers sit beneath the services"


def _loaded_by(code: str) -> list[str]:
    """The modules a fresh interpreter has loaded after running ``code``."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    loaded: list[str] = json.loads(out.stdout.splitlines()[-1])
    return loaded


def test_a_provider_adapter_loads_nothing_of_the_replayer() -> None:
    """Wrapping an OpenAI or Anthropic client records; it needs no replayer (it loaded 75
    modules of ours, replayer.batch.jobs among them, for the one class ``RecordedError``)."""
    for adapter in ("openai", "anthropic"):
        loaded = _loaded_by(f"import tracevault.integrations.{adapter}")
        assert f"tracevault.integrations.{adapter}" in loaded
        replayer = [m for m in loaded if m.startswith("tracevault.replayer")]
        assert not replayer, f"the {adapter} adapter loads {replayer}"
