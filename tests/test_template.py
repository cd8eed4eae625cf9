"""Tests for :mod:`distprompt.recover.template`: template profiles learned from probe renders."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from distprompt.errors import TemplateError
from distprompt.recover.template import learn_template
from test_turns import WEATHER


def test_qwen_profile_is_learned_from_probes(qwen_tokenizer: Any) -> None:
    p = learn_template(qwen_tokenizer)
    assert p.generation_prompt == "<|im_start|>assistant\n"
    assert p.supports_system and p.supports_tools and p.supports_tool_calls
    assert not p.tool_arguments_as_string
    assert p.reasoning_rendered and p.reasoning_tags == ("<think>", "</think>")
    assert p.drops_earlier_reasoning
    assert p.role_markers()["user"] == "<|im_start|>user\n"
    assert not p.template_adds_bos


def test_deepseek_profile_is_learned_from_probes(deepseek_tokenizer: Any) -> None:
    p = learn_template(deepseek_tokenizer)
    assert p.generation_prompt == "<｜Assistant｜>"
    assert p.template_adds_bos and p.bos_token == "<｜begin▁of▁sentence｜>"
    assert p.supports_tool_calls and p.tool_arguments_as_string
    assert not p.supports_tools  # this template never prints tool definitions
    assert not p.reasoning_rendered and p.drops_earlier_reasoning
    assert p.role_markers()["user"] == "<｜begin▁of▁sentence｜><｜User｜>"


def test_profile_is_hashable_and_deterministic(any_tokenizer: Any) -> None:
    assert learn_template(any_tokenizer) == learn_template(any_tokenizer)
    assert hash(learn_template(any_tokenizer))


def test_no_chat_template_raises(qwen_tokenizer: Any) -> None:
    tok = copy.deepcopy(qwen_tokenizer)
    tok.chat_template = None
    with pytest.raises(TemplateError, match="chat template"):
        learn_template(tok)


def _tool_conversation(as_string: bool) -> list[dict[str, Any]]:
    args: Any = {"city": "Paris"}
    return [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "type": "function",
                    "function": {
                        "name": "get_weather",
                        "arguments": json.dumps(args) if as_string else args,
                    },
                }
            ],
        },
        {"role": "tool", "content": "18 C, sunny"},
        {"role": "assistant", "content": "18 C and sunny."},
        {"role": "user", "content": "Thanks."},
    ]


def test_learned_markers_are_in_the_rendered_text_of_a_probe(any_tokenizer: Any) -> None:
    p = learn_template(any_tokenizer)
    text = any_tokenizer.apply_chat_template(
        _tool_conversation(p.tool_arguments_as_string),
        tools=[WEATHER],
        tokenize=False,
        add_generation_prompt=True,
    )
    assert p.markers and all(m in text for m in p.markers), [m for m in p.markers if m not in text]
    added = set(any_tokenizer.get_added_vocab())
    assert all(m in added or m == p.bos_token for m in p.markers)
    assert text.endswith(p.generation_prompt)
    # the learned literals between slots spell out a plain render
    lit = {(prev, nxt): literal for prev, nxt, _new, literal in reversed(p.transitions)}
    plain = any_tokenizer.apply_chat_template(
        _tool_conversation(False)[:2], tokenize=False, add_generation_prompt=True
    )
    assert plain == (
        lit[("^", "system")]
        + "Be brief."
        + lit[("system", "user")]
        + "Weather in Paris?"
        + lit[("user", "$")]
    )
    assert not any(m in "Weather in Paris? 18 C, sunny" for m in p.markers)
    assert ("base_sys", "ok") in p.probes and not p.failed_probes
