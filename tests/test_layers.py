"""The package's layers, read from the source: who may import whom.

docs/design.md ("Layout"): what several parts read lives beneath them, so the archive and the
heads record never import the services above them, and no two modules import each other.
"""

from __future__ import annotations

import ast
from pathlib import Path

import tracevault

ROOT = Path(tracevault.__file__).parent


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports() -> dict[str, set[str]]:
    """Every tracevault module → the tracevault modules it imports, at any depth of its body.

    ``from pkg import mod`` where ``pkg.mod`` is a module counts as importing ``pkg.mod``.
    """
    modules = {_module_name(path) for path in ROOT.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for path in ROOT.rglob("*.py"):
        name = _module_name(path)
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                if node.module.startswith("tracevault"):
                    subs = {f"{node.module}.{a.name}" for a in node.names}
                    found.update((subs & modules) or {node.module})
            elif isinstance(node, ast.Import):
                found.update(a.name for a in node.names if a.name.startswith("tracevault"))
        graph[name] = found
    return graph


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


def test_no_module_of_the_shared_layers_is_in_an_import_cycle() -> None:
    """A cycle hidden behind a function-level import is still a cycle (it was _store ↔ stores)."""
    graph = _imports()
    for name in sorted(graph):
        if name.startswith(("tracevault.archive.", "tracevault.heads.", "tracevault.schemas.")):
            # a package's own __init__ re-exporting its modules is not a cycle of its modules
            pruned = {
                k: {v for v in vs if v not in {"tracevault.archive", "tracevault.heads"}}
                for k, vs in graph.items()
            }
            cycle = _cycle_from(pruned, name)
            assert cycle is None, " -> ".join(cycle or [])


def test_shared_layers_import_no_service() -> None:
    graph = _imports()
    for name, deps in graph.items():
        shared = (
            "tracevault.archive",
            "tracevault.heads",
            "tracevault.schemas",
            "tracevault.runtime",
        )
        if name.startswith(shared):
            services = ("tracevault.consumer", "tracevault.replayer", "tracevault.witness")
            above = sorted(d for d in deps if d.startswith(services))
            assert not above, f"{name} imports {above}: the shared layers sit beneath the services"
