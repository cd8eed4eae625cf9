"""build_suite end to end on small corpora made with the real tokenizers."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import orjson
import pytest

from distprompt import Suite, build_suite
from distprompt.errors import ConfigError, DataError, OutputError, TokenizerError
from distprompt.read.shards import open_shard

from factories import chat_rows, make_corpus, write_shard


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory, qwen_tokenizer) -> Path:  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("corpus")
    return make_corpus(root, qwen_tokenizer, {"chat": 60, "code": 40, "tiny": 4}, dup_every=7)


def test_counts_quota_and_shortfall(corpus: Path, qwen_dir: Path) -> None:
    warnings: list[str] = []
    suite = build_suite(
        corpus, tokenizer=qwen_dir, per_source=8, recover_turns=False, warn=warnings.append
    )
    by_source: dict[str, int] = {}
    for it in suite:
        by_source[it.source] = by_source.get(it.source, 0) + 1
    assert by_source == {"chat": 8, "code": 8, "tiny": 4}
    m = suite.manifest
    assert m.sources["chat"].rows == 60 + len(range(0, 60, 7))
    assert m.sources["chat"].unique_prompts == 60
    assert m.sources["chat"].duplicate_rows == len(range(0, 60, 7))
    assert m.sources["tiny"].selected == 4
    assert any("'tiny'" in w and "4 short" in w for w in warnings)
    assert m.warnings == tuple(warnings)
    # weights (corpus rows represented) sum to the source's rows, cluster sizes to the candidates
    for src in by_source:
        items = [it for it in suite if it.source == src]
        assert abs(sum(it.weight for it in items) - m.sources[src].rows) < 1e-6
        assert sum(it.cluster_size for it in items) == m.sources[src].candidates


def test_items_point_back_at_their_rows(corpus: Path, qwen_dir: Path, qwen_tokenizer) -> None:  # type: ignore[no-untyped-def]
    suite = build_suite(corpus, tokenizer=qwen_dir, per_source=5, recover_turns=False)
    for it in suite:
        with open_shard(corpus / it.provenance.shard) as fh:
            fh.seek(it.provenance.offset)
            obj = orjson.loads(fh.readline())
        assert obj["source"] == it.source
        assert tuple(obj["input_ids"][: obj["n_prompt_tokens"]]) == it.prompt_ids
        assert it.n_prompt_tokens == obj["n_prompt_tokens"]
        assert it.prompt == qwen_tokenizer.decode(list(it.prompt_ids), skip_special_tokens=False)
        assert it.prompt.endswith("<|im_start|>assistant\n")
        # max_tokens: the first assistant span after the prompt
        assert it.max_tokens == sum(obj["loss_mask"][obj["n_prompt_tokens"] :])
        assert obj["input_ids"][obj["n_prompt_tokens"] :][: it.max_tokens]


def test_total_allocation(corpus: Path, qwen_dir: Path) -> None:
    suite = build_suite(
        corpus, tokenizer=qwen_dir, total=12, allocation="equal", recover_turns=False
    )
    m = suite.manifest.sources
    assert sum(s.target for s in m.values()) == 12
    assert {s: v.target for s, v in m.items()} == {"chat": 4, "code": 4, "tiny": 4}


def test_same_result_for_any_shard_order_and_workers(
    tmp_path: Path, qwen_dir: Path, qwen_tokenizer
) -> None:  # type: ignore[no-untyped-def]
    rows = chat_rows(qwen_tokenizer, "chat", 50)
    files = [write_shard(tmp_path / f"part{i}.jsonl", rows[i::3]) for i in range(3)]

    def ids(s: Suite) -> list[str]:
        return [it.id for it in s]

    a = build_suite([str(f) for f in files], tokenizer=qwen_dir, per_source=6, recover_turns=False)
    b = build_suite(
        [str(f) for f in reversed(files)],
        tokenizer=qwen_dir,
        per_source=6,
        recover_turns=False,
        workers=2,
    )
    assert ids(a) == ids(b)
    assert [it.provenance for it in a] == [it.provenance for it in b]
    assert a.manifest == b.manifest
    # The seed reaches every random choice: a random selection changes with it.
    r0, r1 = (
        build_suite(
            tmp_path, tokenizer=qwen_dir, per_source=6, recover_turns=False, method="random", seed=s
        )
        for s in (0, 1)
    )
    assert ids(r0) != ids(r1)


def test_vocabulary_mismatch_names_tokenizer_and_row(corpus: Path, deepseek_dir: Path) -> None:
    # Qwen3 ids (special tokens at 151643+) do not fit DeepSeek-V3's 128815 ids: the first row
    # is a bad row (strict), and skipping leaves no row in the vocabulary (the check fails).
    with pytest.raises(DataError) as ei:
        build_suite(corpus, tokenizer=deepseek_dir, per_source=3, recover_turns=False)
    msg = str(ei.value)
    assert msg.startswith("A1_chat/tokenized_data.jsonl:1:")
    assert str(deepseek_dir) in msg and ei.value.reason == "id_out_of_vocab"
    with pytest.raises(TokenizerError, match="vocabulary check failed"):
        build_suite(
            corpus, tokenizer=deepseek_dir, per_source=3, recover_turns=False, on_error="skip"
        )


def test_deepseek_corpus(tmp_path: Path, deepseek_dir: Path, deepseek_tokenizer) -> None:  # type: ignore[no-untyped-def]
    write_shard(
        tmp_path / "B1_ds" / "tokenized_data.jsonl", chat_rows(deepseek_tokenizer, "ds", 30)
    )
    suite = build_suite(tmp_path, tokenizer=deepseek_dir, per_source=5, recover_turns=False)
    assert len(suite) == 5
    for it in suite:
        assert it.prompt.startswith("<｜begin▁of▁sentence｜>")
        assert it.prompt.endswith("<｜Assistant｜>")


def test_bad_row_policy(tmp_path: Path, qwen_dir: Path, qwen_tokenizer) -> None:  # type: ignore[no-untyped-def]
    rows = chat_rows(qwen_tokenizer, "chat", 20)
    bad = dict(rows[3])
    bad["seq_len"] = 1
    write_shard(tmp_path / "s.jsonl", [*rows[:10], bad, *rows[10:]])
    with pytest.raises(DataError, match=r"^s.jsonl:11: expected seq_len"):
        build_suite(tmp_path, tokenizer=qwen_dir, per_source=3, recover_turns=False)
    suite = build_suite(
        tmp_path, tokenizer=qwen_dir, per_source=3, recover_turns=False, on_error="skip"
    )
    assert suite.manifest.counts.rows == 20
    assert suite.manifest.counts.skipped == {"seq_len_mismatch": 1}
    assert suite.manifest.counts.first_skipped == {"seq_len_mismatch": "s.jsonl:11"}
    assert any("skipped 1 bad rows" in w for w in suite.manifest.warnings)


def test_config_errors_before_reading(tmp_path: Path, qwen_dir: Path) -> None:
    with pytest.raises(ConfigError, match="on_error"):
        build_suite(tmp_path / "missing", tokenizer=qwen_dir, on_error="ignore")
    with pytest.raises(ConfigError, match="per_source"):
        build_suite(tmp_path / "missing", tokenizer=qwen_dir, per_source=0)


def test_save_load_roundtrip_and_refuse_occupied(
    corpus: Path, qwen_dir: Path, tmp_path: Path
) -> None:
    suite = build_suite(corpus, tokenizer=qwen_dir, per_source=4)
    out = suite.save(tmp_path / "out")
    back = Suite.load(out)
    assert [it.to_dict() for it in back] == [it.to_dict() for it in suite]
    assert back.manifest.sources == suite.manifest.sources
    df = back.to_polars()
    assert df.height == len(suite)
    assert {"id", "source", "prompt", "shard", "line", "offset", "weight"} <= set(df.columns)
    with pytest.raises(OutputError, match="`overwrite=True`"):
        suite.save(out)
    suite.save(out, overwrite=True)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_byte_identical_outputs(corpus: Path, qwen_dir: Path, tmp_path: Path) -> None:
    outs = []
    for i in range(2):
        s = build_suite(corpus, tokenizer=qwen_dir, per_source=5, seed=3)
        outs.append(s.save(tmp_path / f"o{i}"))
    for name in ("suite.jsonl", "manifest.json"):
        assert (outs[0] / name).read_bytes() == (outs[1] / name).read_bytes()
    manifest = orjson.loads((outs[0] / "manifest.json").read_bytes())
    assert manifest["tokenizer"]["sha256"]
    assert manifest["corpus"]["fingerprint"]
    assert manifest["config"]["seed"] == 3


@pytest.mark.parametrize("workers", [2, 3])
@pytest.mark.parametrize("during_pass", [True, False])
def test_selection_and_plots_in_worker_processes_write_the_same_files(
    corpus: Path,
    qwen_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    workers: int,
    during_pass: bool,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A large corpus selects its sources in threads with one worker (one thread for those
    # whose shards are read during the pass, two for the others after it) and with two, in
    # worker processes with more, and any
    # large corpus draws its plots in a fresh process; every file (suite, exports, report,
    # PNGs, manifest) must be the bytes of the run in this process.
    from distprompt.pipeline import schedule

    here = build_suite(corpus, tokenizer=qwen_dir, per_source=5, seed=3).save(tmp_path / "a")
    monkeypatch.setattr(schedule, "OVERLAP_BYTES", 0)
    if not during_pass:
        monkeypatch.setattr(schedule.EarlySelection, "on_shard", lambda self, part: None)
    else:  # the pass ends once the thread has decoded what it selected
        real_close = schedule.EarlySelection.close

        def close_when_done(self) -> None:  # type: ignore[no-untyped-def]
            for job in self._jobs.values():
                job.future.result()
            real_close(self)

        monkeypatch.setattr(schedule.EarlySelection, "close", close_when_done)
    from distprompt.engine import pools as engine_pools

    pools: list[str] = []
    real_pool = engine_pools.open_pool

    @contextlib.contextmanager
    def recording(side, **kw):  # type: ignore[no-untyped-def]
        with real_pool(side, **kw) as pool:
            pools.append(type(pool).__name__)
            yield pool

    monkeypatch.setattr(engine_pools, "open_pool", recording)
    with caplog.at_level("INFO", logger="distprompt.pipeline"):
        one = build_suite(corpus, tokenizer=qwen_dir, per_source=5, seed=3, workers=1)
    if during_pass:  # read back and decoded in the thread too
        assert "decoded during the pass: 2 of the 2 sources selected then" in caplog.text
    assert one._plots is not None  # the plots in a fresh process
    suite = build_suite(corpus, tokenizer=qwen_dir, per_source=5, seed=3, workers=workers)
    assert suite._plots is not None
    # One worker: selection in threads (2 of the 3 sources during the pass, the one of the
    # shard read last after it) beside the checks and the decoding; two: threads; three:
    # processes.
    assert pools == [
        "ThreadPoolExecutor",
        "ThreadPoolExecutor" if workers == 2 else "ProcessPoolExecutor",
    ]
    names = sorted(str(p.relative_to(here)) for p in here.rglob("*") if p.is_file())
    assert any(n.endswith(".png") for n in names)
    for there in (one.save(tmp_path / "c"), suite.save(tmp_path / "b")):
        assert names == sorted(str(p.relative_to(there)) for p in there.rglob("*") if p.is_file())
        for name in names:
            assert (here / name).read_bytes() == (there / name).read_bytes(), name


@pytest.mark.parametrize("case", ["more rows later", "another quota"])
def test_a_source_selected_during_the_pass_is_used_only_if_nothing_changed(
    tmp_path: Path,
    qwen_dir: Path,
    qwen_tokenizer,  # type: ignore[no-untyped-def]
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    case: str,
) -> None:
    # A source is selected during the pass once a shard ends that added no row to it; it is
    # selected again after the pass if a later shard added rows to it, or if its quota is not
    # the final one (a total split by rows): the same files as a run without.
    from distprompt.pipeline import schedule

    a, b, c, d = (
        chat_rows(qwen_tokenizer, s, n) for s, n in (("a", 50), ("b", 15), ("c", 10), ("d", 2))
    )
    # Read in the order A1 A2 A3 A4: by size, but the smallest (A3) just before the largest.
    if case == "more rows later":  # a in A1 and in A4: selected after A2, then more rows
        layout, kw = {"A1": a[:6], "A2": b, "A3": d, "A4": a[6:] + c}, {"per_source": 5}
        said, unused = "2 of 4 sources", 1  # b and d used
    else:  # b and c selected with a total of 12 split over the sources read, then a comes
        layout, kw = {"A1": b[:6], "A2": c, "A3": d, "A4": a}, {"total": 12}
        said, unused = "1 of 4 sources", 2  # d used
    root = tmp_path / "prepared"
    for name, rows in layout.items():
        write_shard(root / name / "tokenized_data.jsonl", rows)
    size = {n: (root / n / "tokenized_data.jsonl").stat().st_size for n in layout}
    assert size["A3"] < size["A1"] < size["A2"] < size["A4"]
    here = build_suite(root, tokenizer=qwen_dir, seed=3, **kw).save(tmp_path / "here")
    monkeypatch.setattr(schedule, "OVERLAP_BYTES", 0)
    with caplog.at_level("INFO", logger="distprompt.pipeline"):
        suite = build_suite(root, tokenizer=qwen_dir, seed=3, workers=1, **kw)
    assert f"submitted during the pass and still right: {said}" in caplog.text
    assert f"; {unused} submitted then, not used" in caplog.text
    there = suite.save(tmp_path / "there")
    for name in ("suite.jsonl", "manifest.json", "report.json", "openai.jsonl"):
        assert (here / name).read_bytes() == (there / name).read_bytes(), name


def test_one_source_is_selected_at_a_time_during_the_pass_and_two_after_it(
    tmp_path: Path,
    qwen_dir: Path,
    qwen_tokenizer,  # type: ignore[no-untyped-def]
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # One worker: the selection thread works beside the pass's worker process, the second
    # selection thread only once the pass is over (its worker's core is free then); sources
    # submitted during the pass but not started by its end are selected with the rest, the
    # largest first. The same files either way.
    import threading
    import time

    from distprompt.pipeline import schedule

    root = tmp_path / "prepared"
    for i, (src, n) in enumerate((("a", 12), ("b", 14), ("c", 16), ("d", 18), ("e", 40))):
        write_shard(root / f"A{i}" / "tokenized_data.jsonl", chat_rows(qwen_tokenizer, src, n))
    here = build_suite(root, tokenizer=qwen_dir, seed=3, per_source=4).save(tmp_path / "here")

    over = threading.Event()
    lock = threading.Lock()
    running = {"now": 0, "during": 0, "after": 0}
    real_job, real_close = schedule.select_job, schedule.EarlySelection.close

    def select_job(*args, **kwargs):  # type: ignore[no-untyped-def]
        with lock:
            running["now"] += 1
            when = "after" if over.is_set() else "during"
            running[when] = max(running[when], running["now"])
        try:
            # during the pass, the first source's selection lasts until the pass is over, so
            # that the next ones are still queued then; after it, long enough to overlap
            if not over.wait(timeout=30):
                raise AssertionError("the pass did not end")
            time.sleep(0.2)
            return real_job(*args, **kwargs)
        finally:
            with lock:
                running["now"] -= 1

    def close(self) -> None:  # type: ignore[no-untyped-def]
        over.set()
        real_close(self)

    monkeypatch.setattr(schedule, "select_job", select_job)
    monkeypatch.setattr(schedule.EarlySelection, "close", close)
    monkeypatch.setattr(schedule, "OVERLAP_BYTES", 0)
    with caplog.at_level("INFO", logger="distprompt.pipeline"):
        suite = build_suite(root, tokenizer=qwen_dir, seed=3, per_source=4, workers=1)
    assert (running["during"], running["after"]) == (1, 2)
    assert "submitted during the pass and still right: 4 of 5 sources" in caplog.text
    assert "run with the rest); 0 submitted then, not used" in caplog.text
    there = suite.save(tmp_path / "there")
    for name in ("suite.jsonl", "manifest.json", "report.json", "openai.jsonl"):
        assert (here / name).read_bytes() == (there / name).read_bytes(), name


def test_plots_are_drawn_from_a_report_made_before_the_items(
    corpus: Path, qwen_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # On a large corpus the plots are drawn (elsewhere) from a report made as soon as every
    # source is selected, with the counts instead of the items: they are the final report's.
    from distprompt.pipeline import plots as plot_processes
    from distprompt.pipeline import schedule
    from distprompt.write.render import plots

    seen: list = []

    class Recording(plot_processes.PlotProcess):
        def send(self, report) -> None:  # type: ignore[no-untyped-def]
            seen.append(report)
            super().send(report)

    monkeypatch.setattr(schedule, "OVERLAP_BYTES", 0)
    monkeypatch.setattr(plot_processes, "PlotProcess", Recording)
    suite = build_suite(corpus, tokenizer=qwen_dir, per_source=5, seed=3)
    (early,) = seen
    final = suite.report
    assert final is not None and early.examples != final.examples  # made without the items
    assert early.sources["chat"]["selected"] == final.sources["chat"]["selected"] == 5
    assert plots(early) == plots(final)
    assert suite._plots is not None and suite._plots() == plots(final)
    # the export draws them in one process; split over two they are the same
    two = plot_processes.PlotProcess(2)
    two.send(early)
    assert two() == plots(early)


@pytest.mark.parametrize("workers", [1, 2])
def test_a_failed_plot_process_is_said_and_the_plots_drawn_here(
    corpus: Path,
    qwen_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    workers: int,
) -> None:
    from distprompt.pipeline import schedule
    from distprompt.write.render import plots

    monkeypatch.setattr(schedule, "OVERLAP_BYTES", 0)
    monkeypatch.setattr(sys, "executable", "/bin/false")  # the process fails
    suite = build_suite(corpus, tokenizer=qwen_dir, per_source=5, seed=3, workers=workers)
    assert suite.report is not None
    with caplog.at_level("WARNING", logger="distprompt.pipeline.plots"):
        out = suite.save(tmp_path / "o")
    assert "the plot process failed (exit code 1); the plots are drawn here" in caplog.text
    for name, png in plots(suite.report).items():
        assert (out / name).read_bytes() == png


def test_manifest_reports_template_and_fidelity(corpus: Path, qwen_dir: Path) -> None:
    suite = build_suite(corpus, tokenizer=qwen_dir, per_source=4)
    m = suite.manifest
    assert m.template["generation_prompt"] == "<|im_start|>assistant\n"
    assert m.template["drops_earlier_reasoning"] is True  # Qwen3 strips earlier <think>
    assert all(it.fidelity == "tokens" for it in suite)
    assert m.fidelity_issues == ()
    assert sum(sum(s.fidelity.values()) for s in m.sources.values()) == len(suite)
    off = build_suite(corpus, tokenizer=qwen_dir, per_source=4, recover_turns=False)
    assert off.manifest.template is None
    assert all(it.messages is None and it.fidelity is None for it in off)


def test_max_output_tokens_caps_max_tokens_only(corpus: Path, qwen_dir: Path) -> None:
    free = build_suite(corpus, tokenizer=qwen_dir, per_source=6, recover_turns=False)
    capped = build_suite(
        corpus, tokenizer=qwen_dir, per_source=6, recover_turns=False, max_output_tokens=10
    )
    assert [it.id for it in free] == [it.id for it in capped]
    assert any(it.max_tokens > 10 for it in free)
    for a, b in zip(free, capped, strict=True):
        assert b.max_tokens == min(a.max_tokens, 10)
        assert b.n_response_tokens == a.n_response_tokens  # stays as recorded
    assert capped.manifest.config["max_output_tokens"] == 10


def test_dataset_root_reads_the_shards_not_the_other_jsonl(
    tmp_path: Path,
    qwen_dir: Path,
    qwen_tokenizer,
    capsys: pytest.CaptureFixture[str],  # type: ignore[no-untyped-def]
) -> None:
    # A normal dataset folder: the shards under prepared/, an answer key and raw conversations
    # beside them. The root gives the same suite as prepared/ and names the ignored files.
    from distprompt import inspect_corpus
    from distprompt.cli import main

    prepared = make_corpus(tmp_path / "root", qwen_tokenizer, {"chat": 20, "code": 12})
    root = prepared.parent
    (root / "answers.jsonl").write_text('{"question": "2 + 2?", "answer": "4"}\n')
    write_shard(root / "raw" / "conversations.jsonl", [{"messages": [{"role": "user"}]}])
    kw = {"tokenizer": qwen_dir, "per_source": 5, "recover_turns": False}
    warnings: list[str] = []
    a = build_suite(root, warn=warnings.append, **kw)  # type: ignore[arg-type]
    b = build_suite(prepared, **kw)  # type: ignore[arg-type]

    def key(s: Suite, prefix: str) -> list[tuple[object, ...]]:
        return [
            (it.id, it.prompt, it.provenance.shard.removeprefix(prefix), it.provenance.line)
            for it in s
        ]

    assert key(a, "prepared/") == key(b, "")
    assert a.manifest.counts == b.manifest.counts
    assert a.manifest.corpus.ignored == ("answers.jsonl", "raw/conversations.jsonl")
    assert b.manifest.corpus.ignored == ()
    listed = [w for w in warnings if "answers.jsonl" in w]
    assert len(listed) == 1 and "raw/conversations.jsonl" in listed[0]
    # inspect reads the same shards and lists the same files
    info = inspect_corpus(root)
    assert info.rows == 32 and info.ignored == ("answers.jsonl", "raw/conversations.jsonl")
    assert "ignored 2 other *.jsonl file(s)" in info.table()
    # the CLI: once on stderr, in the manifest; --glob chooses explicitly
    out = tmp_path / "out"
    argv = ["export", str(root), "-t", str(qwen_dir), "--out", str(out), "--no-turns"]
    capsys.readouterr()
    assert main([*argv, "--per-source", "5", "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert err.count("answers.jsonl") == 1 and "ignored 2 other *.jsonl file(s)" in err
    assert orjson.loads((out / "manifest.json").read_bytes())["corpus"]["ignored"] == [
        "answers.jsonl",
        "raw/conversations.jsonl",
    ]
    assert main([*argv, "--overwrite", "--glob", "*.jsonl", "--no-progress"]) == 2
    assert "answers.jsonl:1: expected" in capsys.readouterr().err


def test_a_compressed_corpus_is_judged_large_by_what_it_holds() -> None:
    # A compressed shard counts as several times its size on disk: the benchmark's 1.5 GB of
    # rows are 40 MB as .jsonl.zst, and took the small-corpus path (no parallel selection).
    from distprompt.pipeline import schedule
    from distprompt.records import Shard

    mib = 1 << 20
    big = schedule.OVERLAP_BYTES

    def shard(name: str, size: int) -> Shard:
        return Shard(Path(name), name, size)

    assert not schedule.is_large([shard("a.jsonl", big // 2)])
    assert schedule.is_large([shard("a.jsonl", big // 2), shard("b.jsonl", big // 2)])
    assert schedule.is_large([shard("a.jsonl.zst", big // schedule.COMPRESSED_FACTOR)])
    assert schedule.is_large([shard("a.jsonl.gz", big // 2)])
    assert not schedule.is_large([shard("a.jsonl.gz", mib)])


_THREADS_SCRIPT = r"""
import json, sys
import numpy  # numpy's OpenBLAS only: scipy's is loaded later, as in a pass
from threadpoolctl import threadpool_info
from distprompt.engine.pools import SidePool, open_pool
from distprompt.pipeline import schedule

assert "scipy.linalg" not in sys.modules, "scipy imported before the pool"
seen = {}
def fake_select(cands, quota, config, stats, heavy=(), shards=None):
    seen["threads"] = [(i["user_api"], i["num_threads"]) for i in threadpool_info()]
    return [], None
schedule.select_source = fake_select
with open_pool(SidePool.for_workers(1)) as pool:  # before scipy is imported, as the early one
    pool.submit(schedule.select_job, "s", None, None, None, []).result()
print(json.dumps(seen["threads"]))
"""


def test_selection_threads_run_blas_and_openmp_on_one_thread() -> None:
    """The selection pool is entered while another thread may still import scipy and
    scikit-learn (the early selection during the pass): scipy's OpenBLAS and OpenMP, loaded
    after, are on one thread in the selection threads too. Both are asked for two threads
    first, so that one thread is the limit's doing, not the machine's default."""
    import json
    import os
    import subprocess
    import sys

    import distprompt

    src = str(Path(distprompt.__file__).parents[1])  # the distprompt under test
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "2", "OMP_NUM_THREADS": "2", "PYTHONPATH": src}
    out = subprocess.run(
        [sys.executable, "-c", _THREADS_SCRIPT], env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    threads = json.loads(out.stdout.strip().splitlines()[-1])
    assert {api for api, _ in threads} == {"blas", "openmp"}
    assert [n for _, n in threads] == [1] * len(threads), threads
