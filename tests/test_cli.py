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


def _unopenable_data(tmp_path: Path) -> Path:
    """A DATA folder whose one shard fails the moment it is opened (not gzip inside)."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "tokenized_data.jsonl.gz").write_bytes(b"not gzip at all\n")
    return data


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--temperature", "nan"], "--temperature"),
        (["--temperature", "inf"], "expected temperature to be a finite number >= 0, found inf"),
        (["--temperature", "-0.5"], "--temperature"),
        (["--formats", "openai,csv"], "formats: expected names from openai"),
        (["--near-duplicate", "nan"], "--near-duplicate"),
        (["--near-duplicate", "1.5"], "expected near_duplicate to be a number in (0, 1]"),
        (["--length-weight", "nan"], "--length-weight"),
        (["--seed", str(2**63)], "expected seed to be an integer in [0, 2**63)"),
        (["--glob", " "], "expected glob to be None or a non-empty pattern"),
        (["--method", "medoids"], "--method"),
        (["--workers", "0"], "--workers"),
        (["--engine", "spark"], "--engine"),
    ],
)
def test_a_bad_option_exits_2_before_any_shard_is_opened(
    args: list[str], said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 31: the temperature was checked when the client files were written, after the
    pass. Every option is now checked first: with a shard that fails as soon as it is opened
    and a tokenizer that does not exist, the option is what the one error line names."""
    data, out = _unopenable_data(tmp_path), tmp_path / "out"
    assert main(["export", str(data), "-t", str(tmp_path / "no-tok"), "-o", str(out), *args]) == 2
    err = capsys.readouterr().err
    assert said in err, err
    assert "tokenized_data" not in err and "no-tok" not in err, err
    assert not out.exists() and list(tmp_path.iterdir()) == [data]


def test_the_unopenable_shard_of_those_tests_does_fail(
    tmp_path: Path, qwen_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """What the test above would say, had a shard been opened: the shard's own error."""
    data, out = _unopenable_data(tmp_path), tmp_path / "out"
    assert main(["export", str(data), "-t", str(qwen_dir), "-o", str(out)]) == 2
    assert "tokenized_data.jsonl.gz" in capsys.readouterr().err
    assert main(["inspect", str(data)]) == 0  # inspect counts a corrupt stream, never stops
    assert "tokenized_data.jsonl.gz" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--glob", " "], "expected glob to be None or a non-empty pattern"),
        (["--workers", "0"], "--workers"),
        (["--engine", "spark"], "--engine"),
    ],
)
def test_a_bad_option_of_inspect_exits_2_before_any_shard_is_opened(
    args: list[str], said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["inspect", str(_unopenable_data(tmp_path)), *args]) == 2
    err = capsys.readouterr().err
    assert said in err and "tokenized_data" not in err, err  # no warning of the shard either


def test_output_options_reach_the_files_through_config(
    corpus: Path, qwen_dir: Path, tmp_path: Path
) -> None:
    """--formats, --temperature and --ignore-eos are Config fields now; the files still say
    them, and the manifest's config records only what decides the suite's content."""
    out = tmp_path / "out"
    args = ["--per-source", "3", "--formats", "openai, sharegpt,openai", "--temperature", "0.7"]
    code = main(["export", str(corpus), "-t", str(qwen_dir), "-o", str(out), "--ignore-eos", *args])
    assert code == 0
    row = orjson.loads((out / "openai.jsonl").read_bytes().splitlines()[0])
    assert (row["temperature"], row["ignore_eos"]) == (0.7, True)
    manifest = orjson.loads((out / "manifest.json").read_bytes())
    assert sorted(manifest["files"]) == ["openai", "report", "run_md", "sharegpt"]
    recorded = set(manifest["config"])
    assert not recorded & {"formats", "temperature", "ignore_eos", "overwrite", "progress"}
    assert {"seed", "per_source", "glob", "recover_turns"} <= recorded
