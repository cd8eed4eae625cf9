"""Turn recovery for every tool-call style, learned from probe renders of templates never seen.

The templates under ``tests/templates/`` were written for these tests, one per style in use today
(XML parameters, key/value tags with and without newlines, section tokens with a call counter,
system prompt and tools in the last user turn); see ``tests/styles.py``. Nothing in distprompt
knows any of them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from distprompt import build_suite
from distprompt.pipeline.manifest import template_summary
from distprompt.recover.template import TemplateProfile, learn_template
from distprompt.recover.turns import RecoveredTurns, recover_turns
from styles import STYLES, as_read, prompt_cuts, sample_conversations, shape, style_tokenizer

MIN_SHARE = 0.98
N_CONVERSATIONS = 40  # about 125 tool-call prompts per style


@pytest.fixture(scope="module", params=sorted(STYLES))
def style(request: pytest.FixtureRequest, qwen_tokenizer: Any) -> tuple[str, Any, TemplateProfile]:
    tok = style_tokenizer(qwen_tokenizer, request.param)
    return request.param, tok, learn_template(tok)


def _ids(tok: Any, msgs: list[dict[str, Any]], tools: Any, **kw: Any) -> list[int]:
    text = tok.apply_chat_template(
        msgs, tools=tools, add_generation_prompt=True, tokenize=False, **kw
    )
    return list(tok.encode(text, add_special_tokens=False))


def _rerender(tok: Any, rec: RecoveredTurns) -> list[int]:
    return _ids(
        tok,
        list(rec.messages),
        list(rec.tools) if rec.tools else None,
        **(rec.chat_template_kwargs or {}),
    )


def _markers(tok: Any) -> list[str]:
    added = [str(t.content) for t in tok.added_tokens_decoder.values()]
    return [t for t in added if t in tok.chat_template and t not in ("<think>", "</think>")]


def _tool_call_prompts(n: int, seed: int = 0) -> list[tuple[list[dict[str, Any]], Any]]:
    """Every prompt cut of the sampled conversations whose history holds a tool call."""
    out = []
    for msgs, tools in sample_conversations(n, seed=seed):
        for k in prompt_cuts(msgs):
            if any(m.get("tool_calls") for m in msgs[:k]):
                out.append((msgs[:k], tools))
    return out


def test_profile_learns_the_argument_style(style: tuple[str, Any, TemplateProfile]) -> None:
    name, _tok, p = style
    assert p.supports_tool_calls and p.supports_tools
    assert p.arguments_style == (
        "keys" if name in ("xml_params", "kv_tags", "kv_tags_compact") else "json"
    )
    assert p.failed_probes == ()
    assert len({n for n, _ in p.probes}) == len(p.probes)


def test_multi_turn_tool_call_prompts_come_back_as_turns(
    style: tuple[str, Any, TemplateProfile], capsys: pytest.CaptureFixture[str]
) -> None:
    """Done-when of issue 11: >= 98% structured, same roles and tool names, id-for-id."""
    name, tok, p = style
    prompts = _tool_call_prompts(N_CONVERSATIONS)
    assert len(prompts) >= 100
    good = 0
    markers = _markers(tok)
    for msgs, tools in prompts:
        ids = _ids(tok, msgs, tools)
        rec = recover_turns(ids, tokenizer=tok, profile=p)
        ok = (
            rec.structure == "turns"
            and rec.fidelity == "tokens"
            and shape(rec.messages) == shape(as_read(msgs, rec))
            and _rerender(tok, rec) == ids
        )
        good += ok
        if rec.structure == "turns":
            # Template markers never end up inside a structured item's messages.
            for m in rec.messages:
                for mk in markers:
                    assert mk not in str(m.get("content") or ""), (name, mk, m)
    share = good / len(prompts)
    with capsys.disabled():
        print(f"\n[styles] {name}: structure turns + same shape + id-for-id {good}/{len(prompts)}")
    assert share >= MIN_SHARE, (name, good, len(prompts))


def test_argument_values_come_back_typed(style: tuple[str, Any, TemplateProfile]) -> None:
    name, tok, p = style
    checked = 0
    for msgs, tools in _tool_call_prompts(12, seed=3):
        rec = recover_turns(_ids(tok, msgs, tools), tokenizer=tok, profile=p)
        for got, want in zip(rec.messages, as_read(msgs, rec), strict=True):
            calls = zip(got.get("tool_calls") or (), want.get("tool_calls") or (), strict=True)
            for c_got, c_want in calls:
                assert c_got["function"] == c_want["function"], name
                checked += 1
    assert checked >= 20


def test_last_turn_reasoning_is_recovered(style: tuple[str, Any, TemplateProfile]) -> None:
    _name, tok, p = style
    if "reasoning_content" not in tok.chat_template:
        pytest.skip("this template never renders reasoning")
    msgs = [
        {"role": "user", "content": "Wetter in Zürich?"},
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": "Call the weather tool twice.",
            "tool_calls": [
                {"type": "function", "function": {"name": "get_weather", "arguments": {"q": c}}}
                for c in ("Zürich", "東京")
            ],
        },
        {"role": "tool", "content": '{"t": 3}'},
        {"role": "tool", "content": '{"t": 18}'},
    ]
    rec = recover_turns(_ids(tok, msgs, None), tokenizer=tok, profile=p)
    assert rec.fidelity == "tokens" and rec.structure == "turns", rec.reason
    assert rec.messages[1]["reasoning_content"] == "Call the weather tool twice."
    assert [m["role"] for m in rec.messages] == ["user", "assistant", "tool", "tool"]


def test_last_turn_prompt_after_earlier_reasoning(style: tuple[str, Any, TemplateProfile]) -> None:
    # Training on the last turn: earlier assistant turns had reasoning the template drops or
    # writes as an empty marker; the prompt still re-renders.
    name, tok, p = style
    msgs, tools = sample_conversations(1, seed=11)[0]
    earlier = [
        {**m, "reasoning_content": "Earlier thought."} if m["role"] == "assistant" else m
        for m in msgs
    ]
    cut = max(prompt_cuts(earlier))
    ids = _ids(tok, earlier[:cut], tools)
    rec = recover_turns(ids, tokenizer=tok, profile=p)
    assert rec.fidelity == "tokens" and rec.structure == "turns", (name, rec.reason)
    assert _rerender(tok, rec) == ids


def test_template_markers_never_in_structured_content(
    style: tuple[str, Any, TemplateProfile],
) -> None:
    name, tok, p = style
    bos = tok.bos_token
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    rec = recover_turns(_ids(tok, msgs, None), tokenizer=tok, profile=p)
    assert rec.structure == "turns" and list(rec.messages) == as_read(msgs, rec), name
    if bos:
        assert bos in p.markers


def test_mistral_style_moves_tools_back_and_keeps_the_system_prompt_as_read(
    qwen_tokenizer: Any,
) -> None:
    """System prompt and tools live in the LAST user turn: the tools come back as tools; the
    system prompt, joined to the user text by a blank line, is one of two readings of the same
    tokens: the user one is kept and the ambiguity recorded (issue 27)."""
    tok = style_tokenizer(qwen_tokenizer, "mistral_last")
    p = learn_template(tok)
    msgs, tools = sample_conversations(30, seed=5)[0]
    while not any(m["role"] == "system" for m in msgs):
        msgs, tools = sample_conversations(1, seed=len(msgs) + 7)[0]
    n_user = 0
    for k in prompt_cuts(msgs):
        ids = _ids(tok, msgs[:k], tools)
        assert tok.decode(ids).startswith("<s>")
        rec = recover_turns(ids, tokenizer=tok, profile=p)
        assert rec.fidelity == "tokens" and rec.structure == "turns", rec.reason
        assert [a.reading for a in rec.ambiguities] == ["user"]
        want = as_read(msgs[:k], rec)
        assert shape(rec.messages) == shape(want)
        assert [m["content"] for m in rec.messages if m["role"] == "user"] == [
            m["content"] for m in want if m["role"] == "user"
        ]
        assert rec.tools is not None and list(rec.tools) == tools
        assert all("<s>" not in str(m.get("content")) for m in rec.messages)
        n_user = max(n_user, sum(m["role"] == "user" for m in rec.messages))
    assert n_user >= 1


def test_suffix_switch_is_recovered_as_template_kwargs(qwen_tokenizer: Any) -> None:
    # enable_thinking=False appends /nothink to every user turn and an empty think block to the
    # generation prompt: a switch with an automaton of its own.
    tok = style_tokenizer(qwen_tokenizer, "kv_tags")
    p = learn_template(tok)
    assert any(kw == (("enable_thinking", False),) for kw, _ in p.switch_tables)
    for msgs, tools in _tool_call_prompts(4, seed=2)[:8]:
        ids = _ids(tok, msgs, tools, enable_thinking=False)
        rec = recover_turns(ids, tokenizer=tok, profile=p)
        assert rec.fidelity == "tokens" and rec.structure == "turns", rec.reason
        assert rec.chat_template_kwargs == {"enable_thinking": False}
        users = [m["content"] for m in rec.messages if m["role"] == "user"]
        assert users == [m["content"] for m in msgs if m["role"] == "user"]  # no /nothink
        assert _rerender(tok, rec) == ids


def test_string_switch_is_recovered(qwen_tokenizer: Any) -> None:
    tok = style_tokenizer(qwen_tokenizer, "xml_params")
    p = learn_template(tok)
    msgs, tools = _tool_call_prompts(3, seed=4)[0]
    # A string-valued switch, found among the strings the template compares it with.
    assert any(kw == (("reasoning_effort", "none"),) for _, _, kw in p.generation_variants)
    ids = _ids(tok, msgs, tools, reasoning_effort="none")
    rec = recover_turns(ids, tokenizer=tok, profile=p)
    assert rec.fidelity == "tokens" and rec.structure == "turns", rec.reason
    assert rec.chat_template_kwargs == {"reasoning_effort": "none"}
    default = recover_turns(_ids(tok, msgs, tools), tokenizer=tok, profile=p)
    assert default.chat_template_kwargs is None


def test_template_summary_lists_each_probe_once(
    qwen_tokenizer: Any, deepseek_tokenizer: Any
) -> None:
    # DeepSeek-V3 refuses dict arguments and renders string ones: the probes passed in the end.
    for tok in (qwen_tokenizer, deepseek_tokenizer, style_tokenizer(qwen_tokenizer, "kv_tags")):
        summary = template_summary(learn_template(tok))
        assert summary is not None
        assert summary["supports_tool_calls"] is True
        assert summary["failed_probes"] == []
        assert set(summary["probes"].values()) == {"ok"}
        assert "calls" in summary["probes"]


def test_refused_probe_is_listed_once(qwen_tokenizer: Any) -> None:
    tok = style_tokenizer(qwen_tokenizer, "kv_tags")
    tok.chat_template = tok.chat_template.replace(
        "{%- elif m.role == 'tool' -%}",
        "{%- elif m.role == 'tool' -%}{{- raise_exception('no tool role') -}}",
    )
    p = learn_template(tok)
    summary = template_summary(p)
    assert summary is not None
    assert summary["failed_probes"] == sorted(set(summary["failed_probes"]))
    assert "calls" in summary["failed_probes"] and summary["probes"]["calls"] == "refused"
    assert summary["probes"]["base_sys"] == "ok"


# --------------------------------------------------------------------------- end to end


def _rows(tok: Any, source: str, n: int, *, seed: int) -> list[dict[str, Any]]:
    """Last-turn training rows: the prompt ends at the generation prompt of the final answer."""
    rows = []
    for i, (msgs, tools) in enumerate(sample_conversations(n, seed=seed)):
        kw: dict[str, Any] = {"enable_thinking": False} if i % 4 == 3 else {}
        prompt = tok.apply_chat_template(
            msgs[:-1], tools=tools, add_generation_prompt=True, tokenize=False, **kw
        )
        p_ids = tok.encode(prompt, add_special_tokens=False)
        r_ids = tok.encode(msgs[-1]["content"], add_special_tokens=False)
        ids = p_ids + r_ids
        rows.append(
            {
                "input_ids": ids,
                "loss_mask": [0] * len(p_ids) + [1] * len(r_ids),
                "seq_len": len(ids),
                "n_prompt_tokens": len(p_ids),
                "n_response_tokens": len(r_ids),
                "source": source,
            }
        )
    return rows


def test_key_value_corpus_end_to_end(tmp_path: Path, qwen_tokenizer: Any) -> None:
    """The issue's case: a GLM-style corpus; every tool-call prompt comes back structured."""
    tok = style_tokenizer(qwen_tokenizer, "kv_tags")
    shard = tmp_path / "prepared" / "A1_agent" / "tokenized_data.jsonl"
    shard.parent.mkdir(parents=True)
    rows = _rows(tok, "agent", 30, seed=9)
    shard.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    suite = build_suite(tmp_path, tokenizer=tok, per_source=1000)
    items = list(suite)
    assert len(items) >= 25
    entry = suite.manifest.sources["agent"]
    assert entry.structure == {"turns": len(items)}
    assert entry.fidelity == {"tokens": len(items)}
    assert all(it.structure == "turns" for it in items)
    assert any(it.chat_template_kwargs == {"enable_thinking": False} for it in items)
    template = suite.manifest.template
    assert template["arguments_style"] == "keys" and template["failed_probes"] == []
    assert "enable_thinking" in template["switches"]
    assert suite.report is not None
    assert suite.report.overall["recovery"] == {
        "items": len(items),
        "tokens": 1.0,
        "turns": 1.0,
        "ambiguous": 0,
    }
    out = suite.save(tmp_path / "out")
    run = (out / "RUN.md").read_text(encoding="utf-8")
    assert "are flat" not in run and "not token-exact" not in run
    assert "| **overall** |" in (out / "report.md").read_text(encoding="utf-8")
    openai = (out / "openai.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(openai) == len(items)


@pytest.mark.parametrize("where", ["first", "last", "only"])
def test_calls_without_arguments_come_back(
    style: tuple[str, Any, TemplateProfile], where: str
) -> None:
    # Key by key, a call without arguments writes no key: its own literals, learned too.
    name, tok, p = style
    bare = {"type": "function", "function": {"name": "submit", "arguments": {}}}
    full = {
        "type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Zürich"}},
    }
    calls = {"first": [bare, full], "last": [full, bare], "only": [bare]}[where]
    msgs = [
        {"role": "user", "content": "Go."},
        {"role": "assistant", "content": "", "tool_calls": calls},
        *({"role": "tool", "content": f"result {i}"} for i in range(len(calls))),
    ]
    rec = recover_turns(_ids(tok, msgs, None), tokenizer=tok, profile=p)
    assert rec.fidelity == "tokens" and rec.structure == "turns", (name, rec.reason)
    got = [c["function"] for c in rec.messages[1]["tool_calls"]]
    assert got == [c["function"] for c in calls], name
