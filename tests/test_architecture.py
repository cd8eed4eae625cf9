"""The package's import graph keeps the rules of ARCHITECTURE.md: no cycle, the CLI goes through
the library's front door, the config imports no stage, the output side does not reach into the
reader, and every stage subpackage is reached only through the wiring module.

The graph is read from the source with :mod:`ast` (nothing is imported); imports under
``if TYPE_CHECKING:`` are annotations only and are left out, imports inside functions count.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import distprompt

PKG = Path(distprompt.__file__).parent


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id.endswith("TYPE_CHECKING")) or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, modules: set[str]) -> set[str]:
    """The distprompt modules ``tree`` imports (``from distprompt.x import y`` counts as
    ``distprompt.x.y`` when that is a module, else as ``distprompt.x``)."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("distprompt"))
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("distprompt"):
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                found.add(sub if sub in modules else str(node.module))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def _graph() -> dict[str, set[str]]:
    paths = sorted(PKG.rglob("*.py"))
    modules = {_module_name(p) for p in paths}
    graph = {}
    for p in paths:
        name = _module_name(p)
        graph[name] = _imports(ast.parse(p.read_text(encoding="utf-8")), modules) - {name}
    return graph


GRAPH = _graph()


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a path ``[a, b, …, a]``, or None. The package's ``__init__`` is
    skipped as a target: its lazy ``__getattr__`` imports on first use, not at import time."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def dfs(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph.get(m, ())):
            if n == "distprompt" or n not in graph:
                continue
            if state.get(n) == 1:
                return [*stack[stack.index(n) :], n]
            if n not in state and (found := dfs(n)):
                return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state and (found := dfs(m)):
            return found
    return None


def test_the_graph_is_read() -> None:
    assert "distprompt.read.scan" in GRAPH["distprompt.pipeline"]
    assert "distprompt.errors" in GRAPH["distprompt.read.validate"]


def test_no_import_cycle() -> None:
    assert _cycle(GRAPH) is None


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_config_imports_no_stage() -> None:
    assert GRAPH["distprompt.config"] <= {"distprompt.errors"}


def test_base_records_and_errors_import_no_stage() -> None:
    assert GRAPH["distprompt.errors"] == set()
    assert GRAPH["distprompt.records"] <= {"distprompt.errors"}


@pytest.mark.parametrize("stage", ["choose", "write", "benchmark"])
def test_later_stages_do_not_reach_into_the_reader(stage: str) -> None:
    """What the pass hands on (per-source statistics, candidates) is in ``records``; the output
    side and selection never import ``read/``."""
    bad = {
        (m, n)
        for m, deps in GRAPH.items()
        if m.startswith(f"distprompt.{stage}.")
        for n in deps
        if n.startswith("distprompt.read")
    }
    assert not bad


@pytest.mark.parametrize("stage", ["read", "recover", "choose", "write"])
def test_stages_do_not_import_the_wiring(stage: str) -> None:
    bad = {
        m
        for m, deps in GRAPH.items()
        if m.startswith(f"distprompt.{stage}.") and deps & {"distprompt.pipeline", "distprompt.cli"}
    }
    assert not bad


def test_cli_imports_only_the_front_door() -> None:
    allowed = {"distprompt", "distprompt._version", "distprompt.config", "distprompt.errors"}
    assert GRAPH["distprompt.cli"] <= allowed, GRAPH["distprompt.cli"] - allowed
