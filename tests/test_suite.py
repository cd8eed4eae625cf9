"""Tests for :mod:`distprompt.write.suite`: the Suite saved, loaded and summarized."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from distprompt.errors import InputError, OutputError
from distprompt.write.out_dir import MANIFEST_NAME
from distprompt.write.suite import SUITE_NAME, SUITE_PARQUET, Suite

from factories import chat_rows, suite_item


@pytest.fixture
def suite(qwen_tokenizer: Any, qwen_dir: Path) -> Suite:
    """Three items decoded from real Qwen3 rows, with the manifest fields the summary reads
    (a fresh one per test: ``save`` records its files in the manifest)."""
    items = []
    for i, row in enumerate(chat_rows(qwen_tokenizer, "chat", 3, seed=2)):
        ids = row["input_ids"][: row["n_prompt_tokens"]]
        items.append(
            suite_item(
                i,
                source="chat",
                prompt=qwen_tokenizer.decode(ids, skip_special_tokens=False),
                n_prompt_tokens=len(ids),
                n_response_tokens=row["n_response_tokens"],
                max_tokens=row["n_response_tokens"],
                cluster=i,
                weight=1 / 3,
                prompt_ids=tuple(ids),
                fidelity="tokens" if i else "text",
            )
        )
    manifest = {
        "tokenizer": {"name": str(qwen_dir)},
        "sources": {
            "chat": {
                "rows": 7,
                "unique_prompts": 6,
                "candidates": 6,
                "target": 3,
                "selected": 3,
                "fidelity": {"tokens": 2, "text": 1},
            }
        },
        "counts": {"skipped": {"bad_json": 1}},
    }
    return Suite(items, manifest)


def test_save_writes_the_files_and_a_manifest_listing_them(
    suite: Suite, qwen_tokenizer: Any, tmp_path: Path
) -> None:
    out = suite.save(tmp_path / "out", tokenizer=qwen_tokenizer)
    manifest = orjson.loads((out / MANIFEST_NAME).read_bytes())
    listed = {name for names in manifest["files"].values() for name in names}
    on_disk = {str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()}
    assert on_disk == listed | {SUITE_NAME, SUITE_PARQUET, MANIFEST_NAME}
    assert "run_md" in manifest["files"] and "report" not in manifest["files"]
    lines = (out / SUITE_NAME).read_bytes().splitlines()
    assert [orjson.loads(line)["id"] for line in lines] == ["chat-0", "chat-1", "chat-2"]
    assert manifest["sources"] == suite.manifest.to_dict()["sources"]
    assert not [p for p in tmp_path.iterdir() if p.name != "out"]  # no temp folder left


def test_load_gives_back_the_items_and_manifest(
    suite: Suite, qwen_tokenizer: Any, tmp_path: Path
) -> None:
    out = suite.save(tmp_path / "out", formats=["token_ids"], tokenizer=qwen_tokenizer)
    back = Suite.load(out)
    assert [it.to_dict() for it in back] == [it.to_dict() for it in suite]
    assert back.manifest.to_dict() == orjson.loads((out / MANIFEST_NAME).read_bytes())
    assert back.report is None and len(back) == 3 and back[1].id == "chat-1"
    assert sorted(back.manifest.files) == ["run_md", "token_ids"]


def test_save_refuses_an_existing_folder_unless_overwrite(
    suite: Suite, qwen_tokenizer: Any, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / MANIFEST_NAME).write_text("old")
    with pytest.raises(OutputError, match="`overwrite=True`"):
        suite.save(out, formats=["token_ids"], tokenizer=qwen_tokenizer)
    assert (out / MANIFEST_NAME).read_text() == "old"
    suite.save(out, formats=["token_ids"], tokenizer=qwen_tokenizer, overwrite=True)
    assert len(Suite.load(out)) == 3


def test_load_refuses_what_is_not_a_complete_suite(
    suite: Suite, qwen_tokenizer: Any, tmp_path: Path
) -> None:
    with pytest.raises(InputError, match="expected a suite folder"):
        Suite.load(tmp_path)
    out = suite.save(tmp_path / "out", formats=["token_ids"], tokenizer=qwen_tokenizer)
    (out / SUITE_NAME).write_bytes((out / SUITE_NAME).read_bytes() + b'{"id": 1}\n')
    with pytest.raises(InputError, match=f"{SUITE_NAME}:4: expected a suite item"):
        Suite.load(out)


def test_summary_names_the_table_the_skips_and_the_caveat(suite: Suite) -> None:
    text = suite.summary("somewhere")
    head, row, *rest = text.splitlines()
    assert head.split() == [
        "source",
        "rows",
        "unique",
        "cands",
        "target",
        "selected",
        "take-all",
        "strata",
        "exact%",
        "turns%",
    ]
    assert row.split() == ["chat", "7", "6", "6", "3", "3", "-", "-", "67", "-"]
    # issue 28: every column a reader cannot guess is explained under the table
    legend = next(ln for ln in rest if ln.startswith("unique:"))
    for col in ("cands:", "target:", "exact%:", "turns%:"):
        assert col in legend, col
    assert "skipped rows: bad_json=1" in rest
    assert rest[-1].startswith("wrote 3 items to somewhere — only 2 of 3 items (67%)")
    assert repr(suite) == "Suite(3 items from 1 sources)"


def test_run_md_names_the_rows_skipped_at_export(tmp_path: Path) -> None:
    """Issue 28: rows skipped under --on-error skip were absent from RUN.md."""
    from factories import suite_item

    manifest = {
        "counts": {
            "skipped": {"bad_json": 2, "id_out_of_vocab": 1},
            "first_skipped": {"bad_json": "A1_c/tokenized_data.jsonl:7"},
        }
    }
    out = Suite([suite_item(0)], manifest=manifest).save(tmp_path / "o", formats=["token_ids"])
    head = (out / "RUN.md").read_text(encoding="utf-8").split("## Warnings")[0]
    assert "3 bad rows skipped at export" in head
    assert "bad_json: 2 (first at A1_c/tokenized_data.jsonl:7), id_out_of_vocab: 1" in head


def _rich_suite(suite: Suite) -> Suite:
    """The fixture's items with every field a client file reads filled in."""
    from dataclasses import replace

    from distprompt.records import Ambiguity

    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    msgs = (
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi — ünïcode ✓"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "content": "42", "tool_call_id": "c1"},
    )
    amb = Ambiguity(kind="system_in_user", message=1, separator="\n\n", reading="user", evidence=0)
    items = list(suite.items)
    items[0] = replace(
        items[0], messages=msgs, tools=(tool,), response="ok", response_ids=(5, 6),
        chat_template_kwargs={"enable_thinking": False}, ambiguities=(amb,), stratum="len0",
    )  # fmt: skip
    items[1] = replace(items[1], messages=msgs[:2], response_ids=(), stratum="take-all")
    return Suite(items, suite.manifest)


def _as_jsonl(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows of suite.parquet as suite.jsonl holds them (JSON columns parsed, numpy undone)."""
    from distprompt.write.suite import JSON_COLUMNS

    def plain(v: Any) -> Any:
        if isinstance(v, float) and v != v:  # pandas reads a null string as NaN
            return None
        if hasattr(v, "tolist"):
            return v.tolist()
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        return v

    out = []
    for r in rows:
        d = {k: plain(v) for k, v in r.items()}
        for k in JSON_COLUMNS:
            d[k] = orjson.loads(d[k]) if d[k] is not None else None
        out.append(d)
    return out


def test_suite_parquet_loads_equal_to_suite_jsonl(
    suite: Suite, qwen_tokenizer: Any, tmp_path: Path
) -> None:
    import datasets
    import pandas as pd
    import polars as pl
    import pyarrow.parquet as pq

    out = _rich_suite(suite).save(tmp_path / "out", tokenizer=qwen_tokenizer)
    want = [orjson.loads(line) for line in (out / SUITE_NAME).read_bytes().splitlines()]
    path = out / "suite.parquet"
    schema = pq.read_schema(path)
    assert str(schema.field("prompt_ids").type) == "list<element: int32>"
    assert str(schema.field("weight").type) == "double"
    assert schema.names == list(want[0])  # the columns in the order of a suite.jsonl item
    hf = datasets.load_dataset(
        "parquet", data_files=str(path), split="train", cache_dir=str(tmp_path / "c")
    )
    loaded = {
        "pandas": pd.read_parquet(path).to_dict("records"),
        "polars": pl.read_parquet(path).to_dicts(),
        "datasets": hf.to_list(),
    }
    for name, rows in loaded.items():
        assert _as_jsonl(rows) == want, name
    assert want[0]["messages"][2]["tool_calls"][0]["function"]["name"] == "f"


def test_to_hf_and_back(suite: Suite) -> None:
    rich = _rich_suite(suite)
    ds = rich.to_hf()
    assert ds.num_rows == 3 and ds.features["prompt_ids"].feature.dtype == "int32"
    back = Suite.from_hf(ds.filter(lambda r: r["stratum"] is not None), manifest={"x": 1})
    assert list(back) == list(rich)[:2] and back.manifest.to_dict() == {"x": 1}
    with pytest.raises(InputError, match="row 1: expected a suite item"):
        Suite.from_hf(ds.remove_columns("prompt_ids"))
