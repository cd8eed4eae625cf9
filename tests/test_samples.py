"""``data_samples/`` is made from data: ``scripts/make_samples.py`` tokenizes the conversations
of ``data_samples/conversations/`` into exactly the committed shards and README."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest

from conftest import SAMPLES_DIR


def _files(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "conversations" not in p.relative_to(root).parts
    }


@pytest.mark.slow  # tokenizes all 1,212 rows with Qwen3 (~30 s)
def test_regenerated_samples_are_the_committed_bytes(
    tmp_path: Path, make_samples: ModuleType
) -> None:
    make_samples.main(["--out", str(tmp_path)])
    got, want = _files(tmp_path), _files(SAMPLES_DIR)
    assert sorted(got) == sorted(want)
    assert len(want) == 11  # ten shards and the README
    for name in want:
        assert got[name] == want[name], name


def test_conversations_match_the_shards_row_for_row(make_samples: ModuleType) -> None:
    """One conversation line per shard line; exact duplicates where the shard repeats a line."""
    loaded = make_samples.load_conversations()
    assert [name for name, _, _ in loaded] == sorted(
        p.name for p in (SAMPLES_DIR / "prepared").iterdir()
    )
    for name, source, convs in loaded:
        lines = (SAMPLES_DIR / "prepared" / name / "tokenized_data.jsonl").read_bytes().splitlines()
        assert len(convs) == len(lines), name
        for ln, conv in enumerate(convs, 1):
            assert conv["source"] == source
            assert conv["messages"][-1]["role"] == "assistant"
            if conv["dup"] is not None:
                assert lines[ln - 1] == lines[conv["dup"] - 1], (name, ln)
        assert json.loads(lines[0])["source"] == source
