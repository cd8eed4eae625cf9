"""inspect: corpus figures from one pass, anomalies, and the tokenizer checks."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from distprompt import TokenizerError, inspect_corpus
from distprompt.cli import main
from distprompt.corpus import length_quantiles
from distprompt.recover.checks import learn_markers

from factories import make_corpus, sized_row, write_shard


@pytest.fixture(scope="module")
def crafted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("crafted")
    # Source "alpha": prompt lengths 1..100, response 2 x prompt, one trained turn each.
    write_shard(root / "a" / "alpha.jsonl", [sized_row("alpha", n, 2 * n) for n in range(1, 101)])
    # Source "beta": 10 distinct prompts, each 5 times (40 duplicate rows), two trained turns.
    beta = [sized_row("beta", 10 + i, 5, runs=2) for _ in range(5) for i in range(10)]
    write_shard(root / "b" / "beta.jsonl.gz", beta)
    # A shard with known anomalies: bad JSON (line 2), blank (3), missing key (4), a row whose
    # lengths do not add up (5, a bad row: where its prompt ends is in doubt), a good row (6).
    bad = sized_row("alpha", 5, 5, base=99)
    bad["n_response_tokens"] = 4
    lines = [
        json.dumps(sized_row("alpha", 3, 3, base=98)),
        '{"input_ids": [1, 2',
        "",
        json.dumps({k: v for k, v in sized_row("alpha", 4, 4).items() if k != "source"}),
        json.dumps(bad),
        json.dumps(sized_row("alpha", 6, 6, base=97)),
    ]
    (root / "c").mkdir()
    (root / "c" / "odd.jsonl").write_text("\n".join(lines) + "\n")
    return root


def test_length_quantiles_nearest_rank() -> None:
    q = length_quantiles({n: 1 for n in range(1, 101)})
    assert q is not None
    assert (q.min, q.p50, q.p90, q.p99, q.max) == (1, 50, 90, 99, 100)
    assert q.mean == pytest.approx(50.5)
    q = length_quantiles({10: 98, 1000: 2})  # 2% of rows are long: only max and p99 see them
    assert q is not None and (q.p50, q.p90, q.p99, q.max) == (10, 10, 1000, 1000)
    assert length_quantiles({}) is None


def test_inspect_figures_on_crafted_shards(crafted: Path) -> None:
    info = inspect_corpus(crafted)
    assert [s.name for s in info.shards] == ["a/alpha.jsonl", "b/beta.jsonl.gz", "c/odd.jsonl"]
    assert info.bytes == sum(p.stat().st_size for p in crafted.rglob("*") if p.is_file())
    assert info.shards[1].bytes == (crafted / "b" / "beta.jsonl.gz").stat().st_size
    assert [s.rows for s in info.shards] == [100, 50, 2]
    assert info.rows == 152

    alpha, beta = info.sources["alpha"], info.sources["beta"]
    assert alpha.rows == 102 and beta.rows == 50
    assert alpha.share_rows == pytest.approx(102 / 152)
    # alpha: 100 crafted rows of 3n tokens + 6 + 12 from odd.jsonl; beta: 5 x sum(15..24)
    alpha_tokens = 3 * sum(range(1, 101)) + 6 + 12
    beta_tokens = 5 * sum(range(15, 25))
    assert (alpha.tokens, beta.tokens) == (alpha_tokens, beta_tokens)
    assert alpha.share_tokens == pytest.approx(alpha_tokens / (alpha_tokens + beta_tokens))

    b = beta.prompt_tokens
    assert b is not None and (b.min, b.p50, b.p90, b.max) == (10, 14, 18, 19)
    assert beta.response_tokens is not None and beta.response_tokens.max == 5
    assert beta.unique_prompts == 10 and beta.unique_exact and beta.duplicate_rows == 40
    assert beta.trained_turns == {
        "total": 100,
        "mean": 2.0,
        "max": 2,
        "rows_multi": 50,
        "rows_none": 0,
    }
    assert alpha.trained_turns["total"] == 102 and alpha.trained_turns["rows_multi"] == 0
    assert alpha.duplicate_rows == 0
    only_crafted = inspect_corpus(crafted / "a")
    q = only_crafted.sources["alpha"].prompt_tokens
    assert q is not None and (q.p50, q.p90, q.p99, q.max) == (50, 90, 99, 100)
    r = only_crafted.sources["alpha"].total_tokens
    assert r is not None and (r.p50, r.max) == (150, 300)

    # Anomalies by kind, with the first shard:line; skipped rows are out of every figure.
    an = {k: (a.count, a.first, a.skipped) for k, a in info.anomalies.items()}
    assert an == {
        "invalid_json": (1, "c/odd.jsonl:2", True),
        "blank_line": (1, "c/odd.jsonl:3", False),  # noted, not a row
        "missing_source": (1, "c/odd.jsonl:4", True),
        "length_sum_mismatch": (1, "c/odd.jsonl:5", True),
    }
    assert info.skipped_rows == 3
    assert alpha.flags == {}
    assert info.tokenizer is None and info.mismatch is None


def test_inspect_json_and_table(crafted: Path) -> None:
    info = inspect_corpus(crafted)
    d = orjson.loads(orjson.dumps(info.to_dict()))
    assert set(d["sources"]) == {"alpha", "beta"}
    beta = d["sources"]["beta"]
    for key in (
        "rows",
        "share_rows",
        "share_tokens",
        "prompt_tokens",
        "response_tokens",
        "total_tokens",
        "trained_turns",
        "duplicate_rows",
        "unique_prompts",
    ):
        assert key in beta
    assert set(beta["prompt_tokens"]) >= {"p50", "p90", "p99", "max"}
    assert d["rows"] == 152 and d["n_shards"] == 3
    assert d["anomalies"]["invalid_json"] == {"count": 1, "first": "c/odd.jsonl:2", "skipped": True}
    hist = info.to_dict(histograms=True)["sources"]["beta"]["prompt_lengths"]
    assert hist == {str(n): 5 for n in range(10, 20)}
    table = info.table()
    assert "alpha" in table and "beta" in table and "invalid_json" in table
    assert "c/odd.jsonl:2" in table
    assert table.splitlines()[0].endswith(", 3 bad lines skipped")


def test_one_bad_line_is_one_line_in_the_table(tmp_path: Path) -> None:
    """Issue 28: the table said "1 bad lines skipped"."""
    from factories import shard_with

    shard_with(tmp_path / "A1_chat" / "tokenized_data.jsonl", b"{not json")
    first = inspect_corpus(tmp_path, on_error="skip").table().splitlines()[0]
    assert first.endswith(", 1 bad line skipped"), first


def test_inspect_same_for_any_worker_count(crafted: Path) -> None:
    one = inspect_corpus(crafted).to_dict(histograms=True)
    two = inspect_corpus(crafted, workers=2).to_dict(histograms=True)
    assert one == two


def test_learn_markers(qwen_tokenizer: Any, deepseek_tokenizer: Any) -> None:
    start, gen = learn_markers(qwen_tokenizer)
    assert qwen_tokenizer.decode(list(start)) == "<|im_start|>"
    assert qwen_tokenizer.decode(list(gen)) == "<|im_start|>assistant\n"
    start, gen = learn_markers(deepseek_tokenizer)
    assert list(start) == [deepseek_tokenizer.bos_token_id]
    assert deepseek_tokenizer.decode(list(gen)) == "<｜Assistant｜>"


@pytest.fixture(scope="module")
def qwen_corpus(tmp_path_factory: pytest.TempPathFactory, qwen_tokenizer: Any) -> Path:
    return make_corpus(tmp_path_factory.mktemp("qwen"), qwen_tokenizer, {"chat": 20, "code": 8})


@pytest.fixture(scope="module")
def deepseek_corpus(tmp_path_factory: pytest.TempPathFactory, deepseek_tokenizer: Any) -> Path:
    return make_corpus(tmp_path_factory.mktemp("ds"), deepseek_tokenizer, {"chat": 20})


def test_matching_tokenizer_passes(qwen_corpus: Path, qwen_dir: Path) -> None:
    info = inspect_corpus(qwen_corpus, tokenizer=qwen_dir)
    assert info.tokenizer is not None
    checks = {c.name: c for c in info.tokenizer.checks}
    assert all(c.passed for c in checks.values()), [c.detail for c in checks.values()]
    assert checks["template_markers"].failed == 0 and checks["template_markers"].checked == 28
    assert info.sources["chat"].round_trip == 1.0
    assert info.sources["chat"].round_trip_sampled == 20
    assert info.mismatch is None
    info.raise_for_mismatch()


def test_deepseek_data_with_qwen_tokenizer_fails(deepseek_corpus: Path, qwen_dir: Path) -> None:
    # DeepSeek ids are all inside Qwen's larger vocabulary: the template markers give it away.
    info = inspect_corpus(deepseek_corpus, tokenizer=qwen_dir)
    assert info.tokenizer is not None
    checks = {c.name: c for c in info.tokenizer.checks}
    assert checks["vocabulary"].passed is True
    markers = checks["template_markers"]
    assert markers.passed is False and markers.failed == 20
    assert markers.first == "A1_chat/tokenized_data.jsonl:1"
    assert markers.by_source == {"chat": 20}
    assert checks["round_trip"].passed is False
    with pytest.raises(TokenizerError) as exc:
        info.raise_for_mismatch()
    msg = str(exc.value)
    assert "template_markers check failed" in msg and "A1_chat/tokenized_data.jsonl:1" in msg
    assert "'<|im_start|>assistant\\n'" in msg


def test_qwen_data_with_deepseek_tokenizer_fails(qwen_corpus: Path, deepseek_dir: Path) -> None:
    info = inspect_corpus(qwen_corpus, tokenizer=deepseek_dir)
    assert info.tokenizer is not None
    checks = {c.name: c for c in info.tokenizer.checks}
    vocab = checks["vocabulary"]
    assert vocab.passed is False and vocab.failed == 28 and vocab.checked == 28
    assert vocab.first == "A1_chat/tokenized_data.jsonl:1"
    assert info.mismatch is not None
    assert "vocabulary check failed" in info.mismatch
    assert f"vocabulary size {info.tokenizer.vocab_size}" in info.mismatch
    # out-of-vocabulary rows are bad rows: counted and left out of the figures, as export does
    assert info.rows == 0 and info.skipped_rows == 28
    assert info.anomalies["id_out_of_vocab"].skipped
    assert checks["template_markers"].passed is None and checks["round_trip"].passed is None


def test_a_few_bad_rows_do_not_fail_the_check(
    tmp_path: Path, qwen_tokenizer: Any, qwen_dir: Path
) -> None:
    from factories import chat_rows

    rows = chat_rows(qwen_tokenizer, "chat", 150)
    stray = dict(rows[0], input_ids=[5, 6, 7, *rows[0]["input_ids"][3:]])  # start marker lost
    write_shard(tmp_path / "d" / "s.jsonl", [*rows, stray])
    info = inspect_corpus(tmp_path / "d", tokenizer=qwen_dir)
    assert info.tokenizer is not None
    markers = {c.name: c for c in info.tokenizer.checks}["template_markers"]
    assert markers.passed is True and markers.failed == 1 and markers.first == "s.jsonl:151"
    assert info.anomalies["template_start_missing"].first == "s.jsonl:151"
    assert info.mismatch is None


def test_cli_inspect_json_in_process(qwen_corpus: Path, qwen_dir: Path, capsys: Any) -> None:
    assert main(["inspect", str(qwen_corpus), "--tokenizer", str(qwen_dir), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert set(d["sources"]) == {"chat", "code"}
    assert d["sources"]["chat"]["rows"] == 20
    assert d["sources"]["chat"]["share_rows"] == pytest.approx(20 / 28, abs=1e-6)
    assert d["tokenizer"]["checks"]["template_markers"]["passed"] is True
    assert main(["inspect", str(qwen_corpus)]) == 0
    assert "chat" in capsys.readouterr().out


@pytest.mark.slow  # CLI inspect runs with two tokenizers (~5 s)
def test_cli_inspect_mismatch_exits_2(deepseek_corpus: Path, qwen_dir: Path) -> None:
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "distprompt",
            "inspect",
            str(deepseek_corpus),
            "--tokenizer",
            str(qwen_dir),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 2, r.stderr
    assert "chat" in r.stdout  # the figures are still shown
    assert "template_markers check failed" in r.stderr
    assert "A1_chat/tokenized_data.jsonl:1" in r.stderr


def test_gzip_shard_bytes_are_on_disk_size(tmp_path: Path) -> None:
    data = (json.dumps(sized_row("s", 4, 4)) + "\n").encode()
    p = tmp_path / "x.jsonl.gz"
    p.write_bytes(gzip.compress(data))
    info = inspect_corpus(p)
    assert info.bytes == p.stat().st_size and info.rows == 1
