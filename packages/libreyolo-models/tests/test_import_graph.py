"""Imports inside ``libreyolo_models`` point one way: no module reaches itself again.

Every import counts, at module level or inside a function (a lazy import only hides a cycle);
imports under ``if TYPE_CHECKING:`` do not run and do not count. ``from pkg import name`` is an
edge to the module ``pkg.name`` when there is one, else to the package ``pkg`` (its
``__init__``, which is how ``from . import __version__`` made a cycle through the facade).
"""

from __future__ import annotations

import ast
from pathlib import Path

import libreyolo_models

ROOT = Path(libreyolo_models.__file__).parent
PACKAGE = "libreyolo_models"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST, module: str, is_package: bool) -> set[str]:
    found: set[str] = set()
    base = module.split(".") if is_package else module.split(".")[:-1]

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = base[: len(base) - node.level + 1]
                target = ".".join(anchor + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.update(f"{target}\0{a.name}" for a in node.names)  # resolved against the module list
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in ROOT.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets = set()
        for target in _imports(ast.parse(path.read_text()), name, path.name == "__init__.py"):
            parent, _, attr = target.partition("\0")
            candidate = f"{parent}.{attr}" if attr and f"{parent}.{attr}" in modules else parent
            if candidate in modules and candidate != name:
                targets.add(candidate)
        graph[name] = targets
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_import_graph_of_the_model_zoo_has_no_cycle() -> None:
    graph = import_graph()
    assert len(graph) > 40  # the walk found the package
    cycle = find_cycle(graph)
    assert cycle is None, " -> ".join(cycle or [])


def test_the_cycle_finder_finds_a_planted_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_families_import_no_facade_and_no_other_family() -> None:
    graph = import_graph()
    for module, targets in graph.items():
        if module.startswith(f"{PACKAGE}.families."):
            family = module.split(".")[2]
            for target in targets:
                assert not target.startswith(f"{PACKAGE}.facade"), (module, target)
                if target.startswith(f"{PACKAGE}.families."):
                    assert target.split(".")[2] == family, (module, target)
