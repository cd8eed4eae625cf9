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
    # the manifest's records are read by write/, evaluate/ and benchmark/: they import no step
    assert GRAPH["distprompt.manifest"] <= {"distprompt.errors"}


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


def _in_engine(module: str) -> bool:
    return module == "distprompt.engine" or module.startswith("distprompt.engine.")


def test_the_engine_knows_no_stage() -> None:
    """The engine (where work runs: ``engine/``) is the layer just above ``config`` and
    ``errors``: it is handed tasks and plain functions and imports no stage, record or wiring;
    the stages and the wiring import it."""
    base = {"distprompt.config", "distprompt.errors", "distprompt._heap"}
    bad = {
        (m, n)
        for m, deps in GRAPH.items()
        if _in_engine(m)
        for n in deps
        if not (_in_engine(n) or n in base)
    }
    assert not bad
    assert "distprompt.engine" in GRAPH["distprompt.read.scan"]
    for moved in ("pools", "threads", "background"):  # selection's pools, the plot processes
        assert f"distprompt.engine.{moved}" in GRAPH
    assert "distprompt.engine.pools" in GRAPH["distprompt.pipeline.schedule"]
    assert "distprompt.engine.background" in GRAPH["distprompt.pipeline.plots"]


#: What builds pools, thread limits and helper processes (issue 31: one place for them).
_SCHEDULING_MODULES = {"threadpoolctl", "subprocess", "multiprocessing"}
_SCHEDULING_NAMES = {
    "ThreadPoolExecutor",
    "ProcessPoolExecutor",
    "threadpool_limits",
    "Popen",
    "freeze",
    "Thread",
}


def _scheduling_uses(tree: ast.AST) -> set[str]:
    """The scheduling modules ``tree`` imports and the scheduling names it imports or uses
    (``threading.Thread``, ``gc.freeze``, ...)."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names} & _SCHEDULING_MODULES
        elif isinstance(node, ast.ImportFrom):
            found |= {(node.module or "").split(".")[0]} & _SCHEDULING_MODULES
            found |= {a.name for a in node.names} & _SCHEDULING_NAMES
        elif isinstance(node, ast.Attribute) and node.attr in _SCHEDULING_NAMES:
            found.add(node.attr)
        elif isinstance(node, ast.Name) and node.id in _SCHEDULING_NAMES:
            found.add(node.id)
    return found


def _scheduling_by_module() -> dict[str, set[str]]:
    out = {}
    for p in sorted(PKG.rglob("*.py")):
        uses = _scheduling_uses(ast.parse(p.read_text(encoding="utf-8")))
        if uses:
            out[_module_name(p)] = uses
    return out


def test_pools_thread_limits_and_helper_processes_are_the_engines() -> None:
    """Process pools, thread pools, BLAS/OpenMP thread limits and helper subprocesses are made
    in ``engine/`` only (the selection's pools, the plot processes): the stages and the wiring
    use them through engine calls."""
    uses = _scheduling_by_module()
    outside = {m: u for m, u in uses.items() if not _in_engine(m)}
    assert outside == {}
    assert {"ThreadPoolExecutor", "threadpool_limits", "freeze"} <= uses[
        "distprompt.engine.pools"
    ] | uses["distprompt.engine.threads"]
    assert {"subprocess", "Thread"} <= uses["distprompt.engine.background"]


def test_the_scheduling_check_finds_what_it_looks_for() -> None:
    tree = ast.parse(
        "import subprocess\nfrom threadpoolctl import threadpool_limits\n"
        "import gc\ndef f():\n    gc.freeze()\n"
    )
    assert _scheduling_uses(tree) == {"subprocess", "threadpoolctl", "threadpool_limits", "freeze"}
    assert _scheduling_uses(ast.parse("import threading\nthreading.Lock()")) == set()


def test_cli_imports_only_the_front_door() -> None:
    allowed = {"distprompt", "distprompt._version", "distprompt.config", "distprompt.errors"}
    assert GRAPH["distprompt.cli"] <= allowed, GRAPH["distprompt.cli"] - allowed


# --- sizes (issue 31): no source file over 700 lines, no function over 100 ------------------

MAX_FILE_LINES = 700
MAX_FUNCTION_LINES = 100
#: What is over the limits, with its size (nothing since the engine package and the split of
#: build_suite): an entry may only shrink and must go once within the limit; nothing may join.
OVER_FILES: dict[str, int] = {}
OVER_FUNCTIONS: dict[str, int] = {}


def _sizes(root: Path = PKG) -> tuple[dict[str, int], dict[str, int]]:
    """Lines of each module under ``root`` and of each function (``module:name``, the longest
    of that name), from the source."""
    files: dict[str, int] = {}
    funcs: dict[str, int] = {}
    for p in sorted(root.rglob("*.py")):
        rel = p.relative_to(root).as_posix()
        text = p.read_text(encoding="utf-8")
        files[rel] = len(text.splitlines())
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                key = f"{rel}:{node.name}"
                size = (node.end_lineno or node.lineno) - node.lineno + 1
                funcs[key] = max(funcs.get(key, 0), size)
    return files, funcs


def test_no_file_or_function_over_the_size_limits_beyond_the_known_ones() -> None:
    files, funcs = _sizes()
    over_f = {k: v for k, v in files.items() if v > MAX_FILE_LINES}
    over_fn = {k: v for k, v in funcs.items() if v > MAX_FUNCTION_LINES}
    grown = {k: (v, OVER_FILES.get(k)) for k, v in over_f.items() if v > OVER_FILES.get(k, 0)}
    grown |= {
        k: (v, OVER_FUNCTIONS.get(k)) for k, v in over_fn.items() if v > OVER_FUNCTIONS.get(k, 0)
    }
    assert not grown, f"over the size limits (size, allowed): {grown}"


def test_the_known_oversized_ones_are_still_over() -> None:
    """An entry of OVER_FILES or OVER_FUNCTIONS that is now within the limit is removed."""
    files, funcs = _sizes()
    fixed = [k for k in OVER_FILES if files.get(k, 0) <= MAX_FILE_LINES]
    fixed += [k for k in OVER_FUNCTIONS if funcs.get(k, 0) <= MAX_FUNCTION_LINES]
    assert not fixed, f"within the limits now, remove from the lists: {fixed}"


def test_the_size_check_measures_files_and_functions(tmp_path: Path) -> None:
    body = (
        "def long():\n" + "    x = 1\n" * 120 + "\n\nclass C:\n    def short(self):\n        pass\n"
    )
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "m.py").write_text(body + "\n" * 700, encoding="utf-8")
    files, funcs = _sizes(tmp_path)
    assert files["sub/m.py"] > MAX_FILE_LINES
    assert funcs == {"sub/m.py:long": 121, "sub/m.py:short": 2}


# --- tests patch only public names (issue 31) ---------------------------------------------


def _private_patches(source: str) -> list[str]:
    """``monkeypatch.setattr`` calls in ``source`` that patch a private name: the attribute
    named is private (``_x``, not a dunder), or the object patched is reached through one."""

    def private(name: str) -> bool:
        return name.startswith("_") and not name.startswith("__")

    found = []
    for node in ast.walk(ast.parse(source)):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("setattr", "delattr")
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "monkeypatch"
            and node.args
        ):
            continue
        target, parts = node.args[0], []
        if isinstance(target, ast.Constant) and isinstance(target.value, str):
            parts = target.value.split(".")  # setattr("pkg.mod.name", value)
        else:
            while isinstance(target, ast.Attribute):
                parts.append(target.attr)
                target = target.value
            if len(node.args) > 1 and isinstance(node.args[1], ast.Constant):
                parts.append(str(node.args[1].value))
        if any(private(p) for p in parts):
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def test_no_test_patches_a_private_name() -> None:
    tests = Path(__file__).parent
    bad = {
        p.name: hits
        for p in sorted(tests.glob("*.py"))
        if (hits := _private_patches(p.read_text(encoding="utf-8")))
    }
    assert not bad, bad


def test_the_patch_check_finds_private_patches() -> None:
    src = (
        "def t(monkeypatch):\n"
        "    monkeypatch.setattr(mod, '_X', 1)\n"
        "    monkeypatch.setattr(mod._Cls, 'attr', 2)\n"
        "    monkeypatch.setattr('pkg.mod._f', 3)\n"
        "    monkeypatch.setattr(mod, 'PUBLIC', 4)\n"
        "    monkeypatch.setattr(mod.Cls, '__call__', 5)\n"
    )
    assert [h.split(":")[0] for h in _private_patches(src)] == ["line 2", "line 3", "line 4"]
