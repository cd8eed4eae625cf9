"""The output folder: refused before any work when unusable, replaced in one rename, and every
OSError of writing surfaces as an OutputError that says what to do."""

from __future__ import annotations

from pathlib import Path

import pytest

from distprompt import OutputError
from distprompt.write.out_dir import (
    MANIFEST_NAME,
    atomic_write_bytes,
    check_out_dir,
    prepare_out_dir,
)


def test_a_file_or_an_occupied_folder_is_refused(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(OutputError, match="found a file"):
        check_out_dir(tmp_path / "f", overwrite=False)
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine")
    with pytest.raises(OutputError, match="--overwrite"):
        check_out_dir(busy, overwrite=False)
    with pytest.raises(OutputError, match="never deletes"):
        check_out_dir(busy, overwrite=True)
    check_out_dir(tmp_path / "new" / "deeper", overwrite=False)


def test_prepare_replaces_a_previous_output_only_on_success(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / MANIFEST_NAME).write_text("old")
    with pytest.raises(RuntimeError), prepare_out_dir(out, overwrite=True) as tmp:
        (tmp / MANIFEST_NAME).write_text("half")
        raise RuntimeError("interrupted")
    assert (out / MANIFEST_NAME).read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no temp folder left
    with prepare_out_dir(out, overwrite=True) as tmp:
        (tmp / MANIFEST_NAME).write_text("new")
    assert (out / MANIFEST_NAME).read_text() == "new"


def test_a_folder_that_cannot_be_made_is_an_output_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(OutputError, match="expected a writable folder"):
        atomic_write_bytes(tmp_path / "file" / "sub" / "a.json", b"{}")
    out = tmp_path / "file" / "sub" / "out"
    with pytest.raises(OutputError, match="is a file"), prepare_out_dir(out, overwrite=False):
        pass
