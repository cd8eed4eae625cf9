"""DATA as fsspec URLs: the same shards, names, rows and suite as the local paths."""

from __future__ import annotations

import importlib.util
from dataclasses import replace
from pathlib import Path
from typing import Any

import fsspec
import pytest

from distprompt import build_suite
from distprompt.errors import CorruptStreamError, InputError
from distprompt.read.scan import Partial, scan
from distprompt.read.shards import discover_shards, iter_lines

from factories import chat_rows, write_shard


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory, qwen_tokenizer: Any) -> Path:
    """Two sources in plain, gzip and zstd shards, one of them a cut .zst file."""
    root = tmp_path_factory.mktemp("remote") / "prepared"
    rows = chat_rows(qwen_tokenizer, "chat", 30) + chat_rows(qwen_tokenizer, "code", 20)
    write_shard(root / "A1_chat" / "part0.jsonl", rows[0:30:3])
    write_shard(root / "A1_chat" / "part1.jsonl.gz", rows[1:30:3])
    write_shard(root / "A1_chat" / "part2.jsonl.zst", rows[2:30:3])
    write_shard(root / "B1_code" / "part0.jsonl.zst", rows[30:])  # no tokenized_data.*: all read
    cut = write_shard(root / "B1_code" / "cut.jsonl.zst", rows[30:40])
    cut.write_bytes(cut.read_bytes()[:-40])  # a truncated zstd file: counted when skipping
    (root / "B1_code" / "notes.txt").write_text("not a shard", encoding="utf-8")
    return root


def test_url_folder_reads_only_tokenized_data_when_it_has_them(
    tmp_path: Path, qwen_tokenizer: Any
) -> None:
    from distprompt.read.shards import find_shards

    rows = chat_rows(qwen_tokenizer, "chat", 4)
    write_shard(tmp_path / "prepared" / "A1_chat" / "tokenized_data.jsonl", rows)
    write_shard(tmp_path / "answers.jsonl", rows[:1])
    warnings: list[str] = []
    found = find_shards(tmp_path.as_uri(), warn=warnings.append)
    assert [s.name for s in found.shards] == ["prepared/A1_chat/tokenized_data.jsonl"]
    assert found.ignored == ("answers.jsonl",)
    assert len(warnings) == 1 and "answers.jsonl" in warnings[0]
    with pytest.raises(InputError, match="--glob"):
        find_shards(tmp_path.as_uri(), glob="*.jsonl")


def _summary(p: Partial) -> dict[str, Any]:
    return {
        "stats": {s: (st.rows, sorted(st.prompt_lengths.items())) for s, st in p.stats.items()},
        "pools": {s: [(c.key, c.provenance) for c in b.candidates()] for s, b in p.pools.items()},
        "skipped": dict(p.tally.skipped),
        "first_skip": dict(p.tally.first_skip),
        "shard_rows": dict(p.shard_rows),
    }


def test_file_url_gives_the_local_shards_and_suite(
    corpus: Path, tmp_path: Path, qwen_dir: Path
) -> None:
    url = corpus.as_uri()
    local, remote = discover_shards(corpus), discover_shards(url)
    assert [(s.name, s.size) for s in remote] == [(s.name, s.size) for s in local]
    assert all(s.url is not None and s.url.startswith("file://") for s in remote)
    assert local[0].url is None
    kw: dict[str, Any] = {"max_candidates": 8, "on_error": "skip"}
    assert _summary(scan(remote, **kw)) == _summary(scan(local, **kw))
    a = build_suite(corpus, tokenizer=qwen_dir, per_source=3, on_error="skip")
    b = build_suite(url, tokenizer=qwen_dir, per_source=3, on_error="skip")
    a.save(tmp_path / "a")
    b.save(tmp_path / "b")
    for f in sorted((tmp_path / "a").rglob("*")):
        if f.is_file() and f.name != "manifest.json":  # the manifest names DATA as given
            assert f.read_bytes() == (tmp_path / "b" / f.relative_to(tmp_path / "a")).read_bytes()
    assert (a.manifest.data, b.manifest.data) == (str(corpus), url)
    assert replace(a.manifest, data="") == replace(b.manifest, data="")
    assert a.manifest.counts.skipped == {"corrupt_stream": 1}


def test_memory_filesystem_reads_like_the_disk(corpus: Path) -> None:
    fs = fsspec.filesystem("memory")
    for f in corpus.rglob("*"):
        if f.is_file():
            fs.pipe(f"/distprompt-test/{f.relative_to(corpus).as_posix()}", f.read_bytes())
    try:
        remote = discover_shards("memory:///distprompt-test")
        local = discover_shards(corpus)
        assert [s.name for s in remote] == [s.name for s in local]
        kw: dict[str, Any] = {"max_candidates": 8, "on_error": "skip"}
        assert _summary(scan(remote, **kw)) == _summary(scan(local, **kw))
        cut = next(s for s in remote if s.name == "B1_code/cut.jsonl.zst")
        with pytest.raises(CorruptStreamError, match=r"^B1_code/cut\.jsonl\.zst:\d+: "):
            list(iter_lines(cut))
    finally:
        fs.rm("/distprompt-test", recursive=True)


def test_url_globs_and_several_urls_are_named_like_local_ones(corpus: Path) -> None:
    pattern = corpus.as_uri() + "/*/part*"
    assert [s.name for s in discover_shards(pattern)] == [
        s.name for s in discover_shards(str(corpus) + "/*/part*")
    ]
    several = [(corpus / "A1_chat").as_uri(), (corpus / "B1_code" / "cut.jsonl.zst").as_uri()]
    local = [str(corpus / "A1_chat"), str(corpus / "B1_code" / "cut.jsonl.zst")]
    assert [s.name for s in discover_shards(several)] == [s.name for s in discover_shards(local)]
    # A local path among URLs is read as file://
    mixed = [several[0], local[1]]
    assert [s.name for s in discover_shards(mixed)] == [s.name for s in discover_shards(local)]


def test_url_problems_say_what_to_do(corpus: Path) -> None:
    with pytest.raises(InputError, match="found nothing at that URL"):
        discover_shards(corpus.as_uri() + "/missing")
    with pytest.raises(InputError, match="fsspec knows"):
        discover_shards("nosuchprotocol://bucket/prepared")
    with pytest.raises(InputError, match="found none"):
        discover_shards(corpus.as_uri() + "/*/*.txt")
    with pytest.raises(InputError, match="one filesystem"):
        discover_shards([corpus.as_uri(), "memory:///elsewhere"])


@pytest.mark.skipif(
    importlib.util.find_spec("s3fs") is not None, reason="s3fs is installed here: no message"
)
def test_missing_backend_names_the_package() -> None:
    with pytest.raises(InputError, match="pip install s3fs"):
        discover_shards("s3://some-bucket/prepared")
