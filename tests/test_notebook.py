"""The notebooks run end to end on data_samples/ and are committed clean."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import REPO_ROOT, SAMPLES_DIR

NOTEBOOKS = sorted((REPO_ROOT / "notebooks").glob("*.ipynb"))


def test_there_is_a_notebook() -> None:
    assert REPO_ROOT / "notebooks" / "explore_source_mix.ipynb" in NOTEBOOKS


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_committed_without_outputs_or_machine_paths(path: Path) -> None:
    nb = json.loads(path.read_text(encoding="utf-8"))
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            assert cell.get("outputs") == [], f"{path.name}: a cell has outputs"
            assert cell.get("execution_count") is None, f"{path.name}: execution counts"
        src = "".join(cell["source"])
        for needle in ("/work/", "/home/", "/Users/", "site-packages", "C:\\\\"):
            assert needle not in src, f"{path.name}: machine path {needle!r} in a cell"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_executes(path: Path) -> None:
    import nbformat
    from nbclient import NotebookClient

    assert (SAMPLES_DIR / "prepared").is_dir(), "data_samples/prepared is missing"
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    )
    client.execute()  # raises CellExecutionError naming the failing cell
    errors = [
        o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"
    ]
    assert not errors
    # issue 28: nothing on stderr (tqdm's IProgress warning came through transformers' import)
    stderr = [
        o.get("text", "")
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.outputs
        if o.output_type == "stream" and o.get("name") == "stderr"
    ]
    assert not stderr, stderr


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_log_axes_go_through_one_helper_that_hides_minor_labels(path: Path) -> None:
    """Issue 28: minor tick labels of log axes (2x10^2, 3x10^2 …) overlapped."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    code = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    helper = [c for c in code if "def log_x(ax)" in c]
    assert len(helper) == 1 and "set_minor_formatter(NullFormatter())" in helper[0]
    rest = "\n".join(c.replace(helper[0], "") for c in code)
    assert 'set_xscale("log")' not in rest


def test_the_notebook_extra_holds_what_runs_the_notebooks() -> None:
    """Issue 28: the notebook runner was only in [test]."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+

    extras = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    names = {d.split(">")[0].split("=")[0].split("[")[0] for d in extras["notebook"]}
    assert {"nbclient", "nbformat", "ipykernel"} <= names
    assert "distprompt[notebook]" in extras["test"]
