"""Chat-turn recovery on real tokenizers (Qwen3, DeepSeek-V3) and on templates never seen before."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from distprompt.recover.template import TemplateProfile, learn_template
from distprompt.recover.turns import RecoveredTurns, recover_turns

Msg = dict[str, Any]

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"enum": ["C", "F"]}},
            "required": ["city"],
        },
    },
}
SEARCH = {
    "type": "function",
    "function": {
        "name": "search_code",
        "description": "Grep the repository.",
        "parameters": {"type": "object", "properties": {"pattern": {"type": "string"}}},
    },
}

# Templates written for this test only: their markers are plain text to the Qwen vocabulary.
LLAMA3_STYLE = (
    "{{ '<|begin_of_text|>' }}{% for m in messages %}"
    "{{ '<|start_header_id|>' + m['role'] + '<|end_header_id|>\\n\\n' + m['content'] }}"
    "{{ '<|eot_id|>' }}"
    "{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"
)
MISTRAL_STYLE = (
    "{% for m in messages %}{% if m['role'] == 'system' %}"
    "{{ '[SYSTEM_PROMPT]' + m['content'] + '[/SYSTEM_PROMPT]' }}"
    "{% elif m['role'] == 'user' %}{{ '[INST] ' + m['content'] + ' [/INST]' }}"
    "{% elif m['role'] == 'assistant' %}{{ m['content'] + '</s>' }}"
    "{% else %}{{ raise_exception('Only system, user and assistant roles are supported') }}"
    "{% endif %}{% endfor %}"
)


# --------------------------------------------------------------------------- factories


def sys_(text: str = "You are a careful assistant.") -> Msg:
    return {"role": "system", "content": text}


def user(text: str) -> Msg:
    return {"role": "user", "content": text}


def asst(text: str, **extra: Any) -> Msg:
    return {"role": "assistant", "content": text, **extra}


def tool(text: str) -> Msg:
    return {"role": "tool", "content": text}


def call(name: str, args: dict[str, Any], *, as_string: bool) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args) if as_string else args},
    }


def conversations(profile: TemplateProfile) -> dict[str, tuple[list[Msg], list[Any] | None]]:
    """Named conversations; tool-call arguments take the form the template accepts."""
    s = profile.tool_arguments_as_string
    return {
        "single_with_system": ([sys_(), user("What is 2 + 2?"), asst("4.")], None),
        "no_system": ([user("Name a prime number."), asst("7")], None),
        "multi_turn": (
            [
                sys_(),
                user("Plan a trip to Rome."),
                asst("Day 1: Colosseum. Day 2: Vatican."),
                user("Add a day for food."),
                asst("Day 3: Trastevere food tour."),
                user("Now make it five days."),
                asst("Days 4-5: Ostia and Tivoli."),
                user("Thanks!"),
                asst("Enjoy!"),
            ],
            None,
        ),
        "tools_multi_step": (
            [
                sys_("You can call tools."),
                user("Is it warmer in Paris or Lyon? Also find TODOs."),
                asst(
                    "Checking Paris first.",
                    tool_calls=[call("get_weather", {"city": "Paris"}, as_string=s)],
                ),
                tool('{"temp_c": 12, "sky": "rain"}'),
                asst(
                    "",
                    tool_calls=[
                        call("get_weather", {"city": "Lyon", "unit": "C"}, as_string=s),
                        call("search_code", {"pattern": "TODO|FIXME"}, as_string=s),
                    ],
                ),
                tool('{"temp_c": 15}'),
                tool("src/app.py:12: # TODO retry"),
                asst("Lyon is warmer (15 °C vs 12 °C); one TODO in src/app.py."),
                user("Great, thanks."),
                asst("You're welcome."),
            ],
            [WEATHER, SEARCH],
        ),
        "non_ascii": (
            [
                sys_("你是一个乐于助人的助手。"),
                user("请用中文解释量子纠缠 🤔🌌"),
                asst("量子纠缠是两个粒子之间的关联……✨"),
                user("Merci ! Ça marche — naïve café 😀👍🏽"),
                asst("De rien 🙂"),
            ],
            None,
        ),
        "code_and_json": (
            [
                user('Fix this:\n```python\ndef f(x):\n    return {"a": [x, {"b": x}]}\n```'),
                asst('Use `dict(a=[x])`:\n```json\n{"name": "x", "arguments": {"k": "}"}}\n```'),
                user("And in C? `int main(){ return 0; }` and {{ jinja }} {% raw %}"),
                asst("int main(void) {\n    return 0;\n}\n"),
            ],
            None,
        ),
        "earlier_reasoning": (
            [
                user("Is 91 prime?"),
                asst("<think>\n91 = 7 * 13.\n</think>\n\nNo, 91 = 7 × 13."),
                user("And 97?"),
                asst("Yes, 97 is prime."),
            ],
            None,
        ),
        "reasoning_in_tool_step": (
            [
                user("What's the weather in Oslo?"),
                asst(
                    "",
                    reasoning_content="The user wants weather; call the tool.",
                    tool_calls=[call("get_weather", {"city": "Oslo"}, as_string=s)],
                ),
                tool('{"temp_c": -3}'),
                asst("It is -3 °C in Oslo."),
            ],
            [WEATHER],
        ),
    }


def prompt_cuts(msgs: list[Msg]) -> list[int]:
    """Every k such that msgs[:k] is a prompt: the next message is an assistant turn."""
    return [k for k in range(1, len(msgs)) if msgs[k]["role"] == "assistant"]


def render_ids(tok: Any, msgs: list[Msg], tools: list[Any] | None) -> list[int]:
    text = tok.apply_chat_template(msgs, tools=tools, add_generation_prompt=True, tokenize=False)
    return list(tok.encode(text, add_special_tokens=False))


def rerender(tok: Any, rec: RecoveredTurns) -> list[int]:
    return render_ids(tok, list(rec.messages), list(rec.tools) if rec.tools else None)


def same_content(got: Msg, want: Msg, *, earlier: bool) -> bool:
    """Contents match; for an earlier turn whose reasoning the template drops, the survivor does."""
    if earlier and "</think>" in str(want["content"]):
        survivor = str(want["content"]).split("</think>")[-1]
        return str(got["content"]).lstrip("\n") == survivor.lstrip("\n")
    return bool(got["content"] == want["content"])


@pytest.fixture(scope="session")
def profiles(qwen_tokenizer: Any, deepseek_tokenizer: Any) -> dict[int, TemplateProfile]:
    return {id(t): learn_template(t) for t in (qwen_tokenizer, deepseek_tokenizer)}


@pytest.fixture(scope="session")
def any_profile(any_tokenizer: Any, profiles: dict[int, TemplateProfile]) -> TemplateProfile:
    return profiles[id(any_tokenizer)]


# --------------------------------------------------------------------------- round trips


@pytest.mark.parametrize(
    "name",
    [
        "single_with_system",
        "no_system",
        "multi_turn",
        "tools_multi_step",
        "non_ascii",
        "code_and_json",
        "earlier_reasoning",
        "reasoning_in_tool_step",
    ],
)
def test_recovers_every_prompt_to_tokens(
    any_tokenizer: Any, any_profile: TemplateProfile, name: str
) -> None:
    msgs, tools = conversations(any_profile)[name]
    for k in prompt_cuts(msgs):
        ids = render_ids(any_tokenizer, msgs[:k], tools)
        rec = recover_turns(ids, tokenizer=any_tokenizer, profile=any_profile)
        assert rec.fidelity == "tokens", (name, k, rec.reason)
        assert rec.reason is None
        assert rerender(any_tokenizer, rec) == ids
        if any_profile.supports_tools and tools:
            assert rec.tools is not None and list(rec.tools) == tools
        assert [m["role"] for m in rec.messages] == [m["role"] for m in msgs[:k]]
        for i, (got, want) in enumerate(zip(rec.messages, msgs[:k], strict=True)):
            later_user = any(m["role"] == "user" for m in msgs[i + 1 : k])
            if want.get("content"):
                assert same_content(got, want, earlier=later_user), (got, want)
            for c_got, c_want in zip(
                got.get("tool_calls", []), want.get("tool_calls", []), strict=True
            ):
                assert c_got["function"] == c_want["function"]


def test_reasoning_after_last_query_is_recovered(qwen_tokenizer: Any) -> None:
    p = learn_template(qwen_tokenizer)
    msgs, tools = conversations(p)["reasoning_in_tool_step"]
    ids = render_ids(qwen_tokenizer, msgs[:3], tools)
    rec = recover_turns(ids, tokenizer=qwen_tokenizer, profile=p)
    assert rec.fidelity == "tokens"
    assert rec.messages[1]["reasoning_content"] == "The user wants weather; call the tool."


def test_non_thinking_prompt_reports_its_template_switch(qwen_tokenizer: Any) -> None:
    # Qwen3 data rendered with enable_thinking=False ends in an empty think block.
    p = learn_template(qwen_tokenizer)
    msgs, tools = conversations(p)["tools_multi_step"]
    for k in prompt_cuts(msgs):
        text = qwen_tokenizer.apply_chat_template(
            msgs[:k], tools=tools, add_generation_prompt=True, tokenize=False, enable_thinking=False
        )
        ids = qwen_tokenizer.encode(text, add_special_tokens=False)
        rec = recover_turns(ids, tokenizer=qwen_tokenizer, profile=p)
        assert rec.fidelity == "tokens", rec.reason
        assert rec.chat_template_kwargs == {"enable_thinking": False}
        again = qwen_tokenizer.apply_chat_template(
            list(rec.messages),
            tools=list(rec.tools or []),
            add_generation_prompt=True,
            tokenize=False,
            **rec.chat_template_kwargs,
        )
        assert again == text
    default = recover_turns(
        render_ids(qwen_tokenizer, msgs[:1], None), tokenizer=qwen_tokenizer, profile=p
    )
    assert default.chat_template_kwargs is None


def test_earlier_reasoning_left_in_prompt_still_round_trips_on_qwen(qwen_tokenizer: Any) -> None:
    # Data built turn by turn keeps reasoning the template would drop; an empty
    # reasoning_content keeps the template from splitting it off, so this reaches `tokens`.
    p = learn_template(qwen_tokenizer)
    kept = asst("<think>\nCheck 7.\n</think>\n\n91 = 7 × 13.", reasoning_content="")
    ids = render_ids(qwen_tokenizer, [user("Is 91 prime?"), kept, user("And 97?")], None)
    assert "Check 7." in qwen_tokenizer.decode(ids)
    rec = recover_turns(ids, tokenizer=qwen_tokenizer, profile=p)
    assert rec.fidelity == "tokens", rec.reason
    assert "Check 7." in rec.messages[1]["content"]


#: Two DeepSeek-V3 user turns with a reasoning reply between them, up to the second question.
_DS_TWO_TURNS = (
    "<｜begin▁of▁sentence｜><｜User｜>Is 91 prime?<｜Assistant｜><think>\nCheck 7.\n</think>"
    "\n\n91 = 7 × 13.<｜end▁of▁sentence｜><｜User｜>And 97?"
)


def test_earlier_reasoning_template_cannot_render_falls_back_to_flat(
    deepseek_tokenizer: Any,
) -> None:
    # DeepSeek-V3's template drops earlier reasoning: no structured reading re-renders, so the
    # declared fallback keeps the exact text in one user message and says so (`flat`).
    p = learn_template(deepseek_tokenizer)
    text = _DS_TWO_TURNS + "<｜Assistant｜>"
    ids = deepseek_tokenizer.encode(text, add_special_tokens=False)
    rec = recover_turns(ids, tokenizer=deepseek_tokenizer, profile=p)
    assert rec.fidelity == "tokens" and rec.structure == "flat"
    assert len(rec.messages) == 1 and "<｜Assistant｜>" in rec.messages[0]["content"]
    assert rerender(deepseek_tokenizer, rec) == ids


def test_inexact_reading_says_why(deepseek_tokenizer: Any) -> None:
    # A prompt cut before its generation prompt has no reading: flat, inexact, and says where.
    p = learn_template(deepseek_tokenizer)
    text = _DS_TWO_TURNS  # no generation prompt
    ids = deepseek_tokenizer.encode(text, add_special_tokens=False)
    rec = recover_turns(ids, tokenizer=deepseek_tokenizer, profile=p)
    assert rec.fidelity == "text" and rec.structure == "flat"
    assert rec.reason is not None
    assert "no turn structure recognised" in rec.reason
    assert "first differing token at index" in rec.reason


# --------------------------------------------------------------------------- loss mask


def assistant_mask(tok: Any, ids: list[int], msgs: list[Msg]) -> list[int]:
    """1 on the tokens of each earlier assistant content, located in the decoded prompt."""
    text = tok.decode(ids, skip_special_tokens=False)
    offsets = tok(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    spans, at = [], 0
    for m in msgs:
        if m["role"] == "assistant" and m["content"]:
            start = text.index(m["content"], at)
            spans.append((start, start + len(m["content"])))
            at = start + len(m["content"])
    return [int(any(a < e and b > s for s, e in spans)) for a, b in offsets]


def test_loss_mask_confirms_assistant_turns(
    any_tokenizer: Any, any_profile: TemplateProfile
) -> None:
    msgs, _ = conversations(any_profile)["multi_turn"]
    ids = render_ids(any_tokenizer, msgs[:-1], None)
    mask = assistant_mask(any_tokenizer, ids, msgs[:-1])
    assert sum(mask) > 0
    rec = recover_turns(ids, tokenizer=any_tokenizer, profile=any_profile, loss_mask=mask)
    assert rec.fidelity == "tokens"
    assert [m["role"] for m in rec.messages] == [m["role"] for m in msgs[:-1]]


def test_loss_mask_locates_a_turn_that_quotes_the_template(
    any_tokenizer: Any, any_profile: TemplateProfile
) -> None:
    # An assistant turn quoting the template's own turn markers reads as three turns; the mask
    # (1 over the whole quote) rules the fake user turn out.
    markers = {(p, n): lit for p, n, _, lit in any_profile.transitions}
    quote = (
        "Example:"
        + markers[("assistant", "user")]
        + "fake question"
        + markers[("user", "assistant")]
    )
    msgs = [user("Show me a transcript."), asst(quote + " fake answer"), user("Thanks.")]
    ids = render_ids(any_tokenizer, msgs, None)
    without = recover_turns(ids, tokenizer=any_tokenizer, profile=any_profile)
    assert len(without.messages) == 5  # exact tokens, but the turn structure is wrong
    mask = assistant_mask(any_tokenizer, ids, msgs)
    rec = recover_turns(ids, tokenizer=any_tokenizer, profile=any_profile, loss_mask=mask)
    assert rec.fidelity == "tokens"
    assert [m["role"] for m in rec.messages] == ["user", "assistant", "user"]
    assert rec.messages[1]["content"] == quote + " fake answer"


def test_loss_mask_of_wrong_length_is_rejected(
    any_tokenizer: Any, any_profile: TemplateProfile
) -> None:
    ids = render_ids(any_tokenizer, [user("hi")], None)
    with pytest.raises(ValueError, match="loss_mask"):
        recover_turns(ids, tokenizer=any_tokenizer, profile=any_profile, loss_mask=[0])


# --------------------------------------------------------------------------- degraded cases


def test_unrecognised_prompt_is_kept_as_text(
    any_tokenizer: Any, any_profile: TemplateProfile
) -> None:
    ids = any_tokenizer.encode("just some raw text, no template", add_special_tokens=False)
    rec = recover_turns(ids, tokenizer=any_tokenizer, profile=any_profile)
    assert rec.fidelity == "text"
    assert rec.reason is not None and "no turn structure recognised" in rec.reason
    assert rec.messages == ({"role": "user", "content": "just some raw text, no template"},)


def test_non_canonical_ids_are_lossy(any_tokenizer: Any, any_profile: TemplateProfile) -> None:
    # "hello" split by hand into two pieces: decoding and re-encoding merges them again.
    ids = render_ids(any_tokenizer, [user("hello")], None)
    word = any_tokenizer.encode("hello", add_special_tokens=False)
    pieces = any_tokenizer.encode("hel", add_special_tokens=False) + any_tokenizer.encode(
        "lo", add_special_tokens=False
    )
    assert len(word) == 1 and pieces != word
    i = ids.index(word[0])
    odd = ids[:i] + pieces + ids[i + 1 :]
    rec = recover_turns(odd, tokenizer=any_tokenizer, profile=any_profile)
    assert rec.fidelity == "lossy"
    assert rec.reason is not None and f"index {i}" in rec.reason


# --------------------------------------------------------------------------- unseen templates


@pytest.fixture(scope="module", params=["llama3_style", "mistral_style"])
def unseen_tokenizer(request: pytest.FixtureRequest, qwen_tokenizer: Any) -> Any:
    tok = copy.deepcopy(qwen_tokenizer)
    tok.chat_template = LLAMA3_STYLE if request.param == "llama3_style" else MISTRAL_STYLE
    return tok


def test_unseen_template_is_recovered_from_probes_alone(unseen_tokenizer: Any) -> None:
    p = learn_template(unseen_tokenizer)
    assert not p.supports_tools and not p.supports_tool_calls and not p.reasoning_rendered
    base = conversations(p)
    base["empty_assistant"] = (
        [user("Say nothing."), asst(""), user("Now say hi."), asst("hi")],
        None,
    )
    names = ("single_with_system", "no_system", "multi_turn", "non_ascii", "code_and_json")
    for name in (*names, "empty_assistant"):
        msgs, _ = base[name]
        for k in prompt_cuts(msgs):
            ids = render_ids(unseen_tokenizer, msgs[:k], None)
            rec = recover_turns(ids, tokenizer=unseen_tokenizer, profile=p)
            assert rec.fidelity == "tokens", (name, k, rec.reason)
            assert list(rec.messages) == msgs[:k]


def test_unseen_template_markers(unseen_tokenizer: Any) -> None:
    p = learn_template(unseen_tokenizer)
    markers = p.role_markers()
    if "[INST]" in unseen_tokenizer.chat_template:
        assert p.generation_prompt == ""
        assert markers["user"] == "[INST] "
        assert "tool_def" not in markers
    else:
        assert p.generation_prompt == "<|start_header_id|>assistant<|end_header_id|>\n\n"
        assert (
            markers["system"] == "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
        )


# --------------------------------------------------------------------------- property


# Letters, digits, punctuation, spaces and newlines; no '<', '|', '[' etc. (symbol classes), so no
# content can spell a template marker.
CONTENT = st.text(
    st.characters(
        codec="utf-8", categories=("L", "N", "Pd", "Po", "Ps", "Pe", "Zs"), include_characters="\n"
    ).filter(lambda c: c not in "[]"),
    max_size=40,
)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_random_contents_round_trip(
    any_tokenizer: Any, any_profile: TemplateProfile, data: st.DataObject
) -> None:
    turns = data.draw(st.lists(st.tuples(CONTENT, CONTENT), min_size=1, max_size=3))
    msgs: list[Msg] = [sys_(data.draw(CONTENT.filter(bool)))] if data.draw(st.booleans()) else []
    for q, a in turns:
        msgs += [user(q), asst(a)]
    msgs = msgs[:-1]
    ids = render_ids(any_tokenizer, msgs, None)
    rec = recover_turns(ids, tokenizer=any_tokenizer, profile=any_profile)
    assert rec.fidelity == "tokens", rec.reason
    assert rerender(any_tokenizer, rec) == ids


# --------------------------------------------------------------------------- figures


def test_fidelity_rates(
    qwen_tokenizer: Any,
    deepseek_tokenizer: Any,
    profiles: dict[int, TemplateProfile],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Share of `tokens` over every prompt cut of every test conversation, per tokenizer."""
    rates: dict[str, tuple[int, int]] = {}
    for label, tok in (("qwen3", qwen_tokenizer), ("deepseek-v3", deepseek_tokenizer)):
        p = profiles[id(tok)]
        total = exact = 0
        for msgs, tools in conversations(p).values():
            for k in prompt_cuts(msgs):
                rec = recover_turns(render_ids(tok, msgs[:k], tools), tokenizer=tok, profile=p)
                total += 1
                exact += rec.fidelity == "tokens"
        rates[label] = (exact, total)
    with capsys.disabled():
        for label, (exact, total) in rates.items():
            print(f"\n[turns] {label}: tokens fidelity {exact}/{total} = {exact / total:.0%}")
    assert all(exact == total for exact, total in rates.values())
