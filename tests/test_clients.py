"""Tests for :mod:`distprompt.write.clients`: the clients' own ``sharegpt.json`` drop rules."""

from __future__ import annotations

from typing import Any

from distprompt.write.clients import sharegpt_drops, sharegpt_lengths
from test_export import make_item


def test_lengths_are_the_retokenized_human_and_gpt_turns(any_tokenizer: Any) -> None:
    item = make_item(0, messages=[{"role": "user", "content": "What is two plus two?"}])
    (p, o), *_ = sharegpt_lengths([item], any_tokenizer)
    assert p == len(any_tokenizer.encode("What is two plus two?"))
    assert o == len(any_tokenizer.encode("Sure, here it is."))


def test_kept_items_ask_for_the_retokenized_response(qwen_tokenizer: Any) -> None:
    item = make_item(0, max_tokens=64, response="An answer of a few tokens.")
    drops = sharegpt_drops([item], qwen_tokenizer)
    want = len(qwen_tokenizer.encode("An answer of a few tokens."))
    for client in ("vllm", "sglang"):
        d = drops[client]
        assert d.computed and d.total == 0 and d.ids == ()
        assert d.kept_out_lens == {item.id: want} and want != 64


def test_a_pair_is_counted_under_each_reason_it_breaks(qwen_tokenizer: Any) -> None:
    # One-token prompt and one-token response: below both clients' minimums, on both sides.
    item = make_item(0, messages=[{"role": "user", "content": "Hello"}], response="Yes")
    drops = sharegpt_drops([item], qwen_tokenizer)
    assert drops["vllm"].total == 1 and drops["vllm"].ids == (item.id,)
    assert drops["vllm"].reasons == {
        "prompt < 4": 1,
        "prompt > 1024": 0,
        "prompt + output > 2048": 0,
        "output < 4": 1,
    }
    assert drops["sglang"].reasons == {"prompt < 2": 1, "output < 2": 1}
    assert drops["vllm"].kept_out_lens == {} == drops["sglang"].kept_out_lens


def test_without_a_tokenizer_nothing_is_counted() -> None:
    items = [make_item(0, max_tokens=0), make_item(1, max_tokens=9)]
    for d in sharegpt_drops(items, None).values():
        assert not d.computed and d.total == 0
        assert d.kept_out_lens == {items[0].id: 1, items[1].id: 9}  # out_len: at least 1


def test_lengths_in_one_batch_are_those_of_one_text_at_a_time(any_tokenizer: Any) -> None:
    # The batch call (a fast tokenizer on every core) counts what `encode` of each text counts,
    # special tokens included; an object with only `encode` is counted one text at a time.
    texts = ["", "Hello", "Ünïcödé — 漢字 and code: def f(x):\n    return x", " lead space"]
    items = [
        make_item(i, messages=[{"role": "user", "content": t}], response=texts[-1 - i])
        for i, t in enumerate(texts)
    ]
    want = [
        (len(any_tokenizer.encode(t)), len(any_tokenizer.encode(texts[-1 - i])))
        for i, t in enumerate(texts)
    ]
    assert sharegpt_lengths(items, any_tokenizer) == want

    class EncodeOnly:
        def encode(self, text: str) -> list[int]:
            return any_tokenizer.encode(text)

    assert sharegpt_lengths(items, EncodeOnly()) == want
