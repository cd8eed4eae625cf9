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


def test_errors_through_the_api_name_arguments_and_through_the_cli_options(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 28: `suite.save(busy)` told a Python user to pass `--overwrite`."""
    from distprompt import Suite
    from distprompt.cli import main

    from factories import suite_item

    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine")
    with pytest.raises(OutputError) as caught:
        Suite([suite_item(0)], manifest={}).save(busy)
    assert "`overwrite=True`" in str(caught.value) and "--" not in str(caught.value)
    assert "choose another `out`" in str(caught.value)
    # The CLI runs the same library code and keeps the option the user typed.
    assert main(["report", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err
    assert "--out" in err and "`out`" not in err


@pytest.mark.parametrize(
    ("message", "api"),
    [
        ("fix the row or run with --on-error skip", 'fix the row or run with `on_error="skip"`'),
        ("or --no-tokenizer-check to write", "or `check_tokenizer=False` to write"),
        (
            "expected --total (3) >= --min-per-source (2)",
            "expected `total` (3) >= `min_per_source` (2)",
        ),
        ("check with `distprompt inspect DATA --tokenizer TOK`", None),
    ],
)
def test_api_message_renames_options_outside_commands(message: str, api: str | None) -> None:
    from distprompt.errors import api_message

    assert api_message(message) == (message if api is None else api)
    assert api_message(api_message(message)) == api_message(message)  # idempotent when nested
