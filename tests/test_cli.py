"""The CLI, in-process and as a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from distprompt.cli import main

from factories import make_corpus


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory, qwen_tokenizer) -> Path:  # type: ignore[no-untyped-def]
    return make_corpus(tmp_path_factory.mktemp("cli"), qwen_tokenizer, {"chat": 30, "code": 12})


def test_export_in_process(corpus: Path, qwen_dir: Path, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "out"
    code = main(
        [
            "export",
            str(corpus),
            "--tokenizer",
            str(qwen_dir),
            "--per-source",
            "15",
            "--out",
            str(out),
            "--seed",
            "2",
        ]
    )
    err = capsys.readouterr().err
    assert code == 0, err
    lines = (out / "suite.jsonl").read_bytes().splitlines()
    assert len(lines) == 15 + 12
    item = orjson.loads(lines[0])
    for key in (
        "id",
        "source",
        "prompt",
        "n_prompt_tokens",
        "n_response_tokens",
        "cluster",
        "cluster_size",
        "weight",
        "provenance",
    ):
        assert key in item
    assert set(item["provenance"]) == {"shard", "line", "offset"}
    manifest = orjson.loads((out / "manifest.json").read_bytes())
    assert manifest["config"]["seed"] == 2
    # summary table and shortfall warning on stderr
    assert "source" in err and "selected" in err
    assert "'code': quota 15 but only 12" in err
    # an occupied OUT is refused before any reading
    assert main(["export", str(corpus), "--tokenizer", str(qwen_dir), "--out", str(out)]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert (
        main(
            [
                "export",
                str(corpus),
                "--tokenizer",
                str(qwen_dir),
                "--out",
                str(out),
                "--overwrite",
                "--total",
                "10",
                "--allocation",
                "sqrt",
            ]
        )
        == 0
    )
    assert len((out / "suite.jsonl").read_bytes().splitlines()) == 10


def test_bad_input_exit_code_and_one_line(tmp_path: Path, qwen_dir: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    shard = tmp_path / "d" / "s.jsonl"
    shard.parent.mkdir()
    shard.write_text('{"input_ids": [1, 2]}\n')
    code = main(
        ["export", str(tmp_path / "d"), "--tokenizer", str(qwen_dir), "--out", str(tmp_path / "o")]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert err.strip().splitlines() == [
        "error: s.jsonl:1: expected keys input_ids, loss_mask, seq_len, n_prompt_tokens, "
        "n_response_tokens, source, found 'loss_mask' missing; fix the row or run with "
        "--on-error skip"
    ]
    assert not (tmp_path / "o").exists()
    assert (
        main(
            [
                "export",
                str(tmp_path / "d"),
                "--tokenizer",
                str(tmp_path / "nope"),
                "--out",
                str(tmp_path / "o"),
            ]
        )
        == 2
    )
    assert "--tokenizer" in capsys.readouterr().err


def test_usage_error(capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["export", "x", "--tokenizer", "t", "--out", "o", "--per-source", "0"]) == 2
    assert main(["export", "x", "--tokenizer", "t", "--out", "o", "--formats", "bogus"]) == 2
    assert "bogus" in capsys.readouterr().err


def test_subprocess_module_and_help(corpus: Path, qwen_dir: Path, tmp_path: Path) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    r = subprocess.run(
        [sys.executable, "-m", "distprompt", "--help"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert r.returncode == 0 and "export" in r.stdout
    out = tmp_path / "o"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "distprompt",
            "export",
            str(corpus),
            "--tokenizer",
            str(qwen_dir),
            "--per-source",
            "5",
            "--out",
            str(out),
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    assert (out / "manifest.json").is_file()
    assert "Traceback" not in r.stderr


def test_the_command_imports_scikit_learn_without_pandas() -> None:
    # scikit-learn imports pandas when it is installed (76 MB, 0.6 s); the command's process
    # refuses that one import, and scikit-learn works as without pandas; pandas still imports.
    pytest.importorskip("pandas")
    code = (
        "import sys\n"
        "from distprompt import cli\n"
        "cli._keep_pandas_out()\n"
        "import numpy as np\n"
        "from sklearn.decomposition import TruncatedSVD\n"
        "from sklearn.utils import fixes\n"
        "assert fixes.pd is None and 'pandas' not in sys.modules\n"
        "x = TruncatedSVD(2, random_state=0).fit_transform(np.eye(5))\n"
        "import pandas\n"
        "print(x.shape, pandas.__name__)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["(5,", "2)", "pandas"]


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--per-source", "10", "--total", "30"], "either per_source or total, found both"),
        (["--min-per-source", "3"], "expected min_per_source with total"),
        (["--per-source", "5", "--min-per-source", "2"], "expected min_per_source with total"),
    ],
)
def test_options_that_would_be_ignored_together_exit_2(
    args: list[str], said: str, corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 28: --per-source beside --total, and --min-per-source without --total, were
    silently ignored. Refused before the tokenizer is loaded or a shard read."""
    out = tmp_path / "out"
    assert main(["export", str(corpus), "-t", "no/such-tokenizer", "--out", str(out), *args]) == 2
    assert said in capsys.readouterr().err
    assert not out.exists()
