"""RUN.md against what the pinned clients really do (sglang 0.5.23, vllm 0.33.0, guidellm 0.8.1,
aiperf 0.13.0): each test stands for one way RUN.md was wrong when run against them, on the
generated text and counts, without the clients (``scripts/check_clients.py`` runs the clients)."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import orjson
import pytest

from distprompt.write.clients import sharegpt_drops
from distprompt.write.export import write_exports
from distprompt.write.formats import CLIENT_VERSIONS
from distprompt.write.runmd import run_md
from test_export import make_item, suite_items

# ``guidellm run --help`` of 0.8.1: the options a RUN.md command may use.
GUIDELLM_081_OPTIONS = {"--backend", "--tokenizer", "--data", "--profile", "--constraint"}


def _blocks(text: str) -> list[str]:
    return [b.replace("\\\n", " ") for b in re.findall(r"```bash\n(.*?)\n```", text, re.S)]


def _requests(text: str) -> list[int]:
    return [int(n) for n in re.findall(r"Requests sent: \*\*(\d+)\*\*", text)]


# 1. GuideLLM 0.8.1 has no --target/--model/--processor/--request-type/--max-requests.
def test_guidellm_command_uses_only_options_of_0_8_1() -> None:
    items = suite_items()
    text = run_md(items, formats=["guidellm"], tokenizer_name="tok")
    cmds = [c for c in _blocks(text) if c.startswith("guidellm run")]
    assert len(cmds) == 2
    for cmd, fmt in zip(cmds, ("/v1/chat/completions", "/v1/completions"), strict=True):
        argv = shlex.split(cmd)
        opts = {a for a in argv if a.startswith("--")}
        assert opts <= GUIDELLM_081_OPTIONS, opts - GUIDELLM_081_OPTIONS
        backend = json.loads(argv[argv.index("--backend") + 1])
        assert backend["kind"] == "openai_http" and backend["request_format"] == fmt
        assert backend["target"] == "<URL>" and backend["model"] == "<MODEL>"
        assert argv[argv.index("--tokenizer") + 1] == "kind=huggingface_auto,model=tok"
        assert argv[argv.index("--profile") + 1] == "kind=synchronous"
        assert argv[argv.index("--constraint") + 1] == f"kind=max_requests,count={len(items)}"
        assert json.loads(argv[argv.index("--data") + 1]) == {
            "kind": "json_file",
            "path": "guidellm.jsonl",
        }
    # On chat the row without messages fails; on completions every row goes.
    assert _requests(text) == [5, 6]


# 2. SGLang speed-bench calls apply_chat_template with no keyword arguments.
def test_speed_bench_is_not_said_to_render_with_enable_thinking_false() -> None:
    kw = {"enable_thinking": False}
    items = [make_item(i) for i in range(3)]
    items = [
        type(it)(**{**{f: getattr(it, f) for f in it.__slots__}, "chat_template_kwargs": kw})
        for it in items
    ]
    text = run_md(items, formats=["by_source"], tokenizer_name="tok")
    assert "enable_thinking=False" not in text.replace("`enable_thinking`", "")
    assert "renders with the template's defaults" in text
    assert "`enable_thinking` that 3 of 3" in text
    spec = next(c for c in _blocks(text) if "spec_bench" in c)
    argv = shlex.split(spec)
    assert json.loads(argv[argv.index("--chat-template-kwargs") + 1]) == kw
    speed = next(c for c in _blocks(text) if "speed-bench" in c)
    assert "chat-template-kwargs" not in speed  # SGLang has no such flag
    # Without template switches there is nothing to warn about.
    plain = run_md([make_item(0)], formats=["by_source"], tokenizer_name="tok")
    assert "renders with the template's defaults.**" not in plain


def _with(item: Any, **changes: Any) -> Any:
    return type(item)(**{**{f: getattr(item, f) for f in item.__slots__}, **changes})


# 3. SGLang's sharegpt loader always drops prompts or outputs under 2 tokens.
def test_sglang_sharegpt_drops_one_token_items(qwen_tokenizer: Any) -> None:
    hello = make_item(0, messages=[{"role": "user", "content": "Hello"}])
    ok = make_item(1, response="A longer answer than one token.")
    short_out = make_item(2, response="Yes")
    assert len(qwen_tokenizer.encode("Hello")) == 1 and len(qwen_tokenizer.encode("Yes")) == 1
    drops = sharegpt_drops([hello, ok, short_out], qwen_tokenizer)["sglang"]
    assert drops.total == 2 and drops.ids == (hello.id, short_out.id)
    text = run_md(
        [hello, ok, short_out], formats=["sharegpt"], tokenizer_name="t", tokenizer=qwen_tokenizer
    )
    assert "SGLang `sharegpt` drops 2 of 3 items silently" in text
    assert "filters only with `--sharegpt-context-len`" not in text
    assert _requests(text)[0] == 1  # the SGLang command


# 4. vLLM re-tokenizes the sharegpt text with special tokens; n_prompt_tokens is not its length.
def test_vllm_sharegpt_drops_use_vllms_own_tokenization(qwen_tokenizer: Any) -> None:
    system = {"role": "system", "content": "You are helpful. " * 300}
    items = [
        # Long recorded prompt (system prompt), short human turn: vLLM keeps it.
        make_item(
            0,
            messages=[system, {"role": "user", "content": "What is two plus two?"}],
            n_prompt_tokens=1500,
        ),
        # Short recorded length, long human turn: vLLM drops it (prompt > 1024).
        make_item(1, messages=[{"role": "user", "content": "word " * 1100}], n_prompt_tokens=3),
        # Three-token human turn: under vLLM's minimum of 4.
        make_item(2, messages=[{"role": "user", "content": "Hi there"}]),
    ]
    p0 = len(qwen_tokenizer("What is two plus two?").input_ids)
    assert p0 >= 4
    v = sharegpt_drops(items, qwen_tokenizer)["vllm"]
    assert (v.total, v.reasons["prompt < 4"], v.reasons["prompt > 1024"]) == (2, 1, 1)
    # The n_prompt_tokens estimate would have dropped items 0 and 2 instead.
    assert sharegpt_drops(items, qwen_tokenizer)["vllm"].ids == (items[1].id, items[2].id)
    text = run_md(items, formats=["sharegpt"], tokenizer_name="t", tokenizer=qwen_tokenizer)
    assert "vLLM `sharegpt` drops 2 of 3 items silently" in text
    assert "estimated from `n_prompt_tokens`" not in text
    assert _requests(text)[1] == 1


def test_sharegpt_counts_unknown_without_a_tokenizer() -> None:
    text = run_md(suite_items(), formats=["sharegpt"], tokenizer_name="t")
    assert "drop counts unknown" in text
    assert "Requests sent: up to 5" in text


def test_sharegpt_output_lengths_are_said_to_be_the_retokenized_response(
    qwen_tokenizer: Any,
) -> None:
    resp = "Sure, here it is."
    n = len(qwen_tokenizer.encode(resp))
    items = [make_item(i, response=resp, max_tokens=n + 1) for i in range(4)]
    text = run_md(items, formats=["sharegpt"], tokenizer_name="t", tokenizer=qwen_tokenizer)
    assert "differs for 4 of 4 items (4 items 1 token shorter: the response text has no " in text
    assert "so it is one short" in text


def test_a_larger_sharegpt_length_gap_is_explained_by_lost_special_tokens(
    qwen_tokenizer: Any,
) -> None:
    """Issue 28: GLM-4.5-style suites are 3 to 17 tokens short (thinking and tool-call tags are
    special tokens the detokenized reply loses); RUN.md said "usually one short"."""
    resp = "Sure, here it is."
    n = len(qwen_tokenizer.encode(resp))
    items = [make_item(i, response=resp, max_tokens=n + 3 + i) for i in range(2)]
    text = run_md(items, formats=["sharegpt"], tokenizer_name="t", tokenizer=qwen_tokenizer)
    assert "1 item 4 tokens shorter, 1 item 3 tokens shorter" in text
    assert "thinking or tool-call tags" in text and "one short" not in text
    assert "difference: items" not in text


def test_overlapping_drop_counts_are_said_to_overlap(qwen_tokenizer: Any) -> None:
    """Issue 28: "prompt > 1024: 6, prompt + output > 2048: 3" of 8 dropped read as 9."""
    long = make_item(0, messages=[{"role": "user", "content": "word " * 2100}])
    ok = make_item(1)
    text = run_md([long, ok], formats=["sharegpt"], tokenizer_name="t", tokenizer=qwen_tokenizer)
    assert "vLLM `sharegpt` drops 1 of 2 items silently" in text
    assert "these counts overlap" in text


def test_run_md_says_where_to_run_and_whose_tokenizer_path_it_is() -> None:
    """Issue 28: RUN.md did not say to cd into the suite, and printed the builder's venv path
    with no word on it."""
    items = suite_items()
    text = run_md(items, formats=["openai"], tokenizer_name="/opt/venv/site-packages/tok")
    assert "run every command from this folder (`cd` into it first)" in text
    assert "the path where this suite was built; on another machine" in text
    hub = run_md(items, formats=["openai"], tokenizer_name="Qwen/Qwen3-8B")
    assert "the path where this suite was built" not in hub


def test_guidellm_is_not_recommended_for_exact_prompts_of_tool_items() -> None:
    """Issue 28: GuideLLM's chat requests carry no `tools`, yet RUN.md recommended it for exact
    prompts of every item."""
    tool = {"type": "function", "function": {"name": "f", "parameters": {}}}
    sys_msg = {"role": "system", "content": "Be brief."}
    items = [
        make_item(0, messages=[sys_msg, {"role": "user", "content": "Hi?"}], tools=[tool]),
        make_item(1, messages=[sys_msg, {"role": "user", "content": "Ho?"}]),
    ]
    text = run_md(items, formats=["sharegpt", "guidellm"], tokenizer_name="t")
    assert "GuideLLM too, except for the 1 item with tool definitions" in text
    assert "or GuideLLM for exact prompts" not in text


# 5. AIPerf sends a turn without output_length with no max_completion_tokens at all.
def test_aiperf_multi_turn_gives_every_turn_an_output_length(
    tmp_path: Path, qwen_tokenizer: Any
) -> None:
    items = suite_items()
    write_exports(items, tmp_path, formats=["aiperf"], tokenizer_name="t", tokenizer=qwen_tokenizer)
    rows = [
        orjson.loads(x)
        for x in (tmp_path / "aiperf_multi_turn.jsonl").read_bytes().split(b"\n")
        if x
    ]
    turns = [t for r in rows for t in r["turns"] if t.get("role") != "system"]
    assert len(turns) > len(rows)  # some sessions have earlier turns
    assert all(isinstance(t.get("output_length"), int) and t["output_length"] >= 1 for t in turns)
    multi = next(r for r in rows if r["session_id"] == "ultrachat-0001")
    # The earlier turn asks for the recorded reply that followed it ("First answer." + end).
    assert (
        multi["turns"][1]["output_length"]
        == len(qwen_tokenizer.encode("First answer.", add_special_tokens=False)) + 1
    )
    assert multi["turns"][2]["output_length"] == 64
    text = (tmp_path / "RUN.md").read_text()
    assert "AIPerf's default output length" not in text
    assert "no `max_completion_tokens` at all" in text
    assert _requests(text) == [len(rows), len(turns)]


def test_aiperf_is_not_told_to_run_offline() -> None:
    text = run_md(suite_items(), formats=["aiperf"], tokenizer_name="t")
    assert "do not set `HF_HUB_OFFLINE=1`" in text
    assert not any("HF_HUB_OFFLINE=1 " in c for c in _blocks(text))


def test_the_two_aiperf_runs_write_to_their_own_artifact_folders() -> None:
    """Issue 28: both AIPerf commands wrote to AIPerf's default folder, the second over the
    first."""
    text = run_md(suite_items(), formats=["aiperf"], tokenizer_name="t")
    dirs = [
        re.search(r"--artifact-dir (\S+)", c).group(1)  # type: ignore[union-attr]
        for c in _blocks(text)
        if c.startswith("aiperf profile")
    ]
    assert len(dirs) == 2 and len(set(dirs)) == 2, dirs
    assert f"distprompt bench-import {dirs[1]} --suite ." in text


# 6. Temperature was never set in the vLLM, GuideLLM and AIPerf commands.
@pytest.mark.parametrize("temperature", [0.0, 0.7])
def test_every_command_sets_the_temperature(tmp_path: Path, temperature: float) -> None:
    items = suite_items()
    write_exports(items, tmp_path, tokenizer_name="tok", temperature=temperature)
    text = (tmp_path / "RUN.md").read_text()
    t = "0" if temperature == 0 else repr(temperature)
    assert f"sets `temperature` {t} explicitly" in text
    cmds = _blocks(text)
    assert cmds
    for cmd in cmds:
        argv = shlex.split(cmd)
        if argv[0] == "vllm":
            assert argv[argv.index("--temperature") + 1] == t
        elif argv[0] == "aiperf":
            assert argv[argv.index("--extra-inputs") + 1] == f"temperature:{t}"
        elif argv[0] == "guidellm":
            backend = json.loads(argv[argv.index("--backend") + 1])
            assert backend["extras"]["body"]["temperature"] == temperature
        elif "--backend" in argv and argv[argv.index("--backend") + 1] == "sglang":
            assert argv[argv.index("--temperature") + 1] == t
        else:  # SGLang's OpenAI backends ignore --temperature
            body = json.loads(argv[argv.index("--extra-request-body") + 1])
            assert body == {"temperature": temperature}
    rows = [orjson.loads(x) for x in (tmp_path / "openai.jsonl").read_bytes().split(b"\n") if x]
    assert all(r["temperature"] == temperature for r in rows)


def test_negative_temperature_is_refused(tmp_path: Path) -> None:
    from distprompt.errors import ConfigError

    with pytest.raises(ConfigError, match="temperature"):
        write_exports(suite_items(), tmp_path, temperature=-1.0)


def test_run_md_names_the_checked_versions_and_every_command_has_a_count() -> None:
    text = run_md(
        suite_items(),
        formats=list(CLIENT_VERSIONS and [])
        or ["openai", "vllm_custom", "sharegpt", "guidellm", "aiperf", "by_source"],
        tokenizer_name="t",
    )
    for k, v in CLIENT_VERSIONS.items():
        assert f"{k} {v}" in text
    assert "scripts/check_clients.py" in text
    assert text.count("```bash") == len(re.findall(r"```\n\n(?:Requests sent: )", text))


def test_llama_class_over_byte_level_tokenizer_is_warned(
    tmp_path: Path, deepseek_dir: Path, qwen_dir: Path
) -> None:
    # The DeepSeek-V3 folder names LlamaTokenizerFast: transformers 5.19 (the clients') then
    # tokenizes every text differently, and the clients' sharegpt drops differed (99 vs 100 kept).
    items = suite_items()
    text = run_md(items, formats=["sharegpt"], tokenizer_name=str(deepseek_dir))
    assert "**Client tokenizer class.**" in text and "`LlamaTokenizerFast`" in text
    assert "Client tokenizer class" not in run_md(
        items, formats=["sharegpt"], tokenizer_name=str(qwen_dir)
    )
    import shutil

    fixed = tmp_path / "tok"
    shutil.copytree(deepseek_dir, fixed)
    cfg = json.loads((fixed / "tokenizer_config.json").read_text())
    cfg["tokenizer_class"] = "TokenizersBackend"
    (fixed / "tokenizer_config.json").write_text(json.dumps(cfg))
    assert "Client tokenizer class" not in run_md(
        items, formats=["sharegpt"], tokenizer_name=str(fixed)
    )


def test_notices_open_run_md_in_their_order_and_leave_the_rest_as_it_was(tmp_path: Path) -> None:
    """What the suite says first (rows skipped, a failed tokenizer check) is rendered with RUN.md,
    not written into it afterwards: below the heading, each block after a blank line, in order."""
    items = suite_items()
    plain = tmp_path / "plain"
    noted = tmp_path / "noted"
    write_exports(items, plain, formats=["openai"], tokenizer_name="tok")
    write_exports(
        items, noted, formats=["openai"], tokenizer_name="tok", notices=[["> a", "> a2"], ["> b"]]
    )
    base = (plain / "RUN.md").read_text(encoding="utf-8").split("\n")
    got = (noted / "RUN.md").read_text(encoding="utf-8").split("\n")
    assert got == [base[0], "", "> a", "> a2", "", "> b", *base[1:]]
