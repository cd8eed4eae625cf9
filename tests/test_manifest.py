"""Tests for :mod:`distprompt.manifest`: the manifest as typed frozen records whose
``to_dict`` is ``manifest.json`` byte for byte, and which read older and newer files."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import orjson
import pytest

from distprompt import Suite, build_suite
from distprompt.errors import InputError
from distprompt.manifest import Design, Manifest, Quantiles, SourceEntry, TokenizerCheck
from distprompt.write.out_dir import MANIFEST_NAME
from distprompt.write.suite import SUITE_NAME

from factories import make_corpus, suite_item

#: The keys of a fresh export's manifest, in the order build_manifest always wrote them
#: (``files`` last: Suite.save adds it).
KEYS = [
    "distprompt_version", "versions", "config", "data", "tokenizer", "corpus", "counts",
    "tokenizer_check", "sources", "warnings", "template", "fidelity_issues", "files",
]  # fmt: skip


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory, qwen_tokenizer: Any, qwen_dir: Path) -> Path:
    root = tmp_path_factory.mktemp("manifest")
    corpus = make_corpus(root, qwen_tokenizer, {"chat": 30, "code": 12}, dup_every=5)
    suite = build_suite(corpus, tokenizer=qwen_dir, per_source=4)
    return suite.save(root / "out")


def test_a_saved_manifest_round_trips_byte_for_byte(saved: Path) -> None:
    raw = (saved / MANIFEST_NAME).read_bytes()
    written = orjson.loads(raw)
    m = Manifest.from_dict(written)
    assert m.to_dict() == written
    assert list(m.to_dict()) == KEYS
    assert m.absent == () and m.extra == {}
    back = Suite.load(saved)
    assert back.manifest == m
    assert back.manifest_bytes() == raw
    # the records readers use, typed
    chat = m.sources["chat"]
    assert isinstance(chat, SourceEntry) and isinstance(chat.design, Design)
    assert chat.rows == 30 + len(range(0, 30, 5)) and chat.selected == 4
    assert isinstance(chat.prompt_tokens, Quantiles) and chat.prompt_tokens.max is not None
    assert m.counts.rows == sum(s.rows for s in m.sources.values())
    assert isinstance(m.tokenizer_check, TokenizerCheck) and m.tokenizer_check.passed is True
    assert m.tokenizer_check.checks["vocabulary"].checked == m.counts.rows
    assert m.files is not None and "run_md" in m.files


def test_a_built_manifest_is_the_saved_one_before_its_files(
    saved: Path, qwen_dir: Path, qwen_tokenizer: Any, tmp_path: Path
) -> None:
    """build_manifest's record writes what it always wrote: the keys in order, ``files`` only
    once the suite is saved."""
    corpus = make_corpus(tmp_path, qwen_tokenizer, {"chat": 30, "code": 12}, dup_every=5)
    built = build_suite(corpus, tokenizer=qwen_dir, per_source=4).manifest
    assert built.files is None
    assert list(built.to_dict()) == KEYS[:-1]
    written = orjson.loads((saved / MANIFEST_NAME).read_bytes())
    assert built.sources == Manifest.from_dict(written).sources


def test_the_records_are_frozen_and_slotted(saved: Path) -> None:
    m = Suite.load(saved).manifest
    entry = m.sources["chat"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.counts = m.counts  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        entry.rows = 0  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        entry.design.residual.rows = 0.0  # type: ignore[misc]
    for record in (m, entry, entry.design, entry.prompt_tokens, m.counts, m.tokenizer):
        assert not hasattr(record, "__dict__")
    # a changed manifest is a new record; the old one is as it was
    listed = m.with_files({"openai": ("openai.jsonl",)})
    assert listed.files == {"openai": ("openai.jsonl",)} and m.files != listed.files


def _older_manifest() -> dict[str, Any]:
    """A manifest as an earlier version wrote it: no ``template``, ``tokenizer_check``,
    ``fidelity_issues`` or ``files``; a source without ``unique_exact``, ``structure``,
    ``ambiguities``, ``first_reply_tokens`` and ``design``; plus keys this version does not
    know (at the top and in a source)."""
    quantiles = {"min": 1, "p50": 1, "p90": 1, "p99": 1, "max": 1}
    return {
        "distprompt_version": "0.0.9",
        "config": {"seed": 0, "per_source": 2},
        "data": ["a", "b"],
        "tokenizer": {"name": "", "kind": "folder", "sha256": None, "vocab_size": 10},
        "counts": {"rows": 5, "items": 2, "skipped": {"invalid_json": 1}},
        "sources": {
            "s": {
                "rows": 5,
                "unique_prompts": 4,
                "duplicate_rows": 1,
                "candidates": 4,
                "target": 2,
                "selected": 2,
                "prompt_tokens": quantiles,
                "response_tokens": {},
                "fidelity": {"tokens": 1, "text": 1},
                "legacy_note": "kept",
            }
        },
        "warnings": ["an old warning"],
        "future_section": {"x": [1, 2]},
    }


def test_an_older_manifest_loads_and_is_written_back_unchanged(tmp_path: Path) -> None:
    old = _older_manifest()
    out = tmp_path / "old"
    out.mkdir()
    items = [suite_item(0), suite_item(1)]
    (out / SUITE_NAME).write_bytes(b"".join(orjson.dumps(it.to_dict()) + b"\n" for it in items))
    raw = orjson.dumps(old, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2) + b"\n"
    (out / MANIFEST_NAME).write_bytes(raw)

    suite = Suite.load(out)
    m = suite.manifest
    assert suite.manifest_bytes() == raw
    assert m.to_dict() == old
    # what the older version did not write reads as the default, and is listed as absent
    assert m.tokenizer_check is None and m.template is None and m.files is None
    assert {"template", "tokenizer_check", "versions", "corpus"} <= set(m.absent)
    s = m.sources["s"]
    assert s.unique_exact is True and s.design == Design() and s.ambiguities == {}
    assert {"unique_exact", "design", "structure", "first_reply_tokens"} <= set(s.absent)
    assert s.response_tokens.absent == ("min", "p50", "p90", "p99", "max")
    assert m.counts.first_skipped == {} and m.counts.skipped == {"invalid_json": 1}
    # what this version does not know is kept
    assert m.extra == {"future_section": {"x": [1, 2]}}
    assert s.extra == {"legacy_note": "kept"}
    assert m.data == ("a", "b")
    # and the readers work on it
    text = suite.summary(out)
    assert "only 1 of 2 items (50%) are token-exact" in text
    assert "skipped rows: invalid_json=1" in text


def test_a_mapping_given_to_suite_is_read_as_a_manifest() -> None:
    suite = Suite([suite_item(0)], {"counts": {"rows": 3}, "x": 1})
    assert suite.manifest.counts.rows == 3 and suite.manifest.extra == {"x": 1}
    assert suite.manifest.to_dict() == {"counts": {"rows": 3}, "x": 1}
    assert Manifest.empty().to_dict() == {}
    assert Quantiles.of([]).to_dict() == {}
    assert Quantiles.of([1, 2, 3, 4, 5]).to_dict() == {
        "min": 1, "p50": 2, "p90": 3, "p99": 4, "max": 5,
    }  # fmt: skip


@pytest.mark.parametrize(
    "manifest", [b"[1, 2]", b'{"sources": {"s": 3}}', b'{"sources": [1]}', b"{not json"]
)
def test_a_manifest_that_is_not_one_is_refused(tmp_path: Path, manifest: bytes) -> None:
    (tmp_path / SUITE_NAME).write_bytes(orjson.dumps(suite_item(0).to_dict()) + b"\n")
    (tmp_path / MANIFEST_NAME).write_bytes(manifest)
    with pytest.raises(InputError, match="expected a distprompt manifest"):
        Suite.load(tmp_path)
