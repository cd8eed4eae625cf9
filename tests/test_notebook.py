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
