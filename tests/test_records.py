"""Tests for :mod:`distprompt.records`: the records handed between steps."""

from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path

import numpy as np
import orjson

from distprompt.records import (
    FEATURE_HEAD,
    FEATURE_TAIL,
    Provenance,
    SourceStats,
    SuiteItem,
    feature_window,
    histogram_quantiles,
    is_shard_file,
)

from factories import candidate, suite_item


def test_feature_window_keeps_short_prompts_and_the_ends_of_long_ones() -> None:
    short = np.arange(FEATURE_HEAD + FEATURE_TAIL)
    assert feature_window(short) is short
    long = np.arange(3 * (FEATURE_HEAD + FEATURE_TAIL))
    w = feature_window(long)
    assert w.shape == (FEATURE_HEAD + FEATURE_TAIL,)
    assert np.array_equal(w[:FEATURE_HEAD], long[:FEATURE_HEAD])
    assert np.array_equal(w[FEATURE_HEAD:], long[-FEATURE_TAIL:])


def test_candidate_lengths_and_features_with_and_without_held_ids() -> None:
    c = candidate(1, n_prompt=2000, n_resp=7)
    assert c.loaded and c.n_prompt_tokens == 2000 and c.first_response_length == 7
    assert c.feature_ids.shape == (FEATURE_HEAD + FEATURE_TAIL,)
    slim = dataclasses.replace(
        c,
        prompt_ids=None,
        prompt_mask=None,
        response_ids=None,
        window=c.feature_ids,
        n_prompt=2000,
        n_first_response=7,
    )
    assert not slim.loaded
    assert (slim.n_prompt_tokens, slim.first_response_length) == (2000, 7)
    assert np.array_equal(slim.feature_ids, c.feature_ids)


def test_suite_item_survives_a_json_line() -> None:
    item = suite_item(
        1,
        source="chat",
        prompt="<|im_start|>user\nhé 🎉<|im_end|>\n",
        n_prompt_tokens=3,
        n_response_tokens=5,
        max_tokens=5,
        weight=0.25,
        provenance=Provenance("a/b.jsonl", 3, 120),
        prompt_ids=(1, 2, 3),
        messages=({"role": "user", "content": "hé 🎉"},),
        fidelity="tokens",
        chat_template_kwargs={"enable_thinking": False},
        structure="turns",
    )
    line = orjson.dumps(item.to_dict())
    assert SuiteItem.from_dict(orjson.loads(line)) == item
    assert list(orjson.loads(line))[:3] == ["id", "source", "prompt"]  # fixed key order
    with_reply = dataclasses.replace(item, response_ids=(7, 8, 151645))
    d = orjson.loads(orjson.dumps(with_reply.to_dict()))
    assert list(d)[-2:] == ["prompt_ids", "response_ids"]
    assert SuiteItem.from_dict(d) == with_reply


def test_a_suite_line_without_response_ids_reads_as_none() -> None:
    d = suite_item(1).to_dict()
    del d["response_ids"]  # a suite written before they were kept
    assert SuiteItem.from_dict(d).response_ids is None


def test_source_stats_merge_adds_every_counter() -> None:
    a = SourceStats(rows=2, prompt_tokens=10, prompt_lengths=Counter({5: 2}))
    b = SourceStats(rows=1, prompt_tokens=7, prompt_lengths=Counter({5: 1, 7: 1}))
    b.flags["long"] += 1
    merged = a.merge(b)
    assert merged is a
    assert (a.rows, a.prompt_tokens) == (3, 17)
    assert a.prompt_lengths == Counter({5: 3, 7: 1}) and a.flags == Counter({"long": 1})


def test_histogram_quantiles_are_exact() -> None:
    counts = {10: 1, 20: 2, 40: 1}
    assert histogram_quantiles(counts, [0, 0.25, 0.5, 0.75, 1]) == [10, 10, 20, 20, 40]
    assert histogram_quantiles({n: 1 for n in range(1, 101)}, [0.9]) == [90]
    assert histogram_quantiles({3: 0}, [0.5]) == []


def test_is_shard_file_by_suffix() -> None:
    assert is_shard_file(Path("x/tokenized_data.jsonl"))
    assert is_shard_file(Path("a.jsonl.gz")) and is_shard_file(Path("a.jsonl.zst"))
    assert not is_shard_file(Path("a.json")) and not is_shard_file(Path("a.jsonl.bz2"))
