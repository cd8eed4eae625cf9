"""Client-format exports: each layout checked against what the client's loader does."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import orjson
import pytest

from distprompt.errors import ConfigError
from distprompt.records import Provenance, SuiteItem
from distprompt.write import formats
from distprompt.write.export import write_exports
from distprompt.write.formats import FORMATS
from distprompt.write.runmd import run_md

# --------------------------------------------------------------------------------------------
# Factories
# --------------------------------------------------------------------------------------------

SYSTEM = "You are a careful assistant."
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


def render(messages: list[dict[str, Any]], *, bos: str = "") -> str:
    """A ChatML-like rendering, enough to stand for a decoded prompt span."""
    parts = [bos]
    for m in messages:
        content = m.get("content") or ""
        if m.get("tool_calls"):
            content += "".join(
                "<tool_call>" + json.dumps(c["function"], ensure_ascii=False) + "</tool_call>"
                for c in m["tool_calls"]
            )
        parts.append(f"<|im_start|>{m['role']}\n{content}<|im_end|>\n")
    parts.append("<|im_start|>assistant\n")
    return "".join(parts)


def make_item(
    n: int,
    *,
    source: str = "glaive",
    messages: list[dict[str, Any]] | None = None,
    no_messages: bool = False,
    tools: list[dict[str, Any]] | None = None,
    n_prompt_tokens: int | None = None,
    max_tokens: int = 64,
    fidelity: str | None = "tokens",
    bos: str = "",
    response: str = "Sure, here it is.",
) -> SuiteItem:
    if messages is None:
        messages = [{"role": "user", "content": f"Question number {n}?"}]
    prompt = render(messages, bos=bos)
    n_prompt = n_prompt_tokens if n_prompt_tokens is not None else 10 + n
    return SuiteItem(
        id=f"{source}-{n:04d}",
        source=source,
        prompt=prompt,
        n_prompt_tokens=n_prompt,
        n_response_tokens=max_tokens,
        max_tokens=max_tokens,
        cluster=n % 3,
        cluster_size=2,
        weight=0.25,
        provenance=Provenance(shard=f"{source}/tokenized_data.jsonl", line=n + 1, offset=100 * n),
        prompt_ids=tuple(range(1000 + n, 1000 + n + n_prompt)),
        response=response,
        messages=None if no_messages else tuple(messages),
        tools=tuple(tools) if tools else None,
        fidelity=fidelity,
        fidelity_reason=None if fidelity == "tokens" else "whitespace differs",
    )


def suite_items() -> list[SuiteItem]:
    """Single-turn, multi-turn with system, tool calling, long, non-ASCII, no messages."""
    return [
        make_item(0),
        make_item(
            1,
            source="ultrachat",
            messages=[
                {"role": "system", "content": SYSTEM},
                {"role": "user", "content": "First question?"},
                {"role": "assistant", "content": "First answer."},
                {"role": "user", "content": "Second question?"},
            ],
        ),
        make_item(
            2,
            source="glaive",
            tools=[WEATHER_TOOL],
            messages=[
                {"role": "system", "content": SYSTEM},
                {"role": "user", "content": "Weather in Zürich?"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_0",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": {"city": "Zürich"}},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "call_0", "content": '{"temp": 21}'},
            ],
        ),
        make_item(3, source="deepswekimi", n_prompt_tokens=1800, max_tokens=900),
        make_item(
            4,
            source="sharegpt",
            messages=[{"role": "user", "content": "日本語で説明してください — ünïcødé ✓"}],
            response="はい、説明します。",
        ),
        make_item(5, source="kimik25", no_messages=True, fidelity=None),
    ]


@pytest.fixture
def items() -> list[SuiteItem]:
    return suite_items()


@pytest.fixture
def out(tmp_path: Path, items: list[SuiteItem]) -> Path:
    write_exports(items, tmp_path, tokenizer_name="Qwen/Qwen3-8B")
    return tmp_path


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def chat_items(items: list[SuiteItem]) -> list[SuiteItem]:
    return [it for it in items if it.messages]


# --------------------------------------------------------------------------------------------
# Formats and files
# --------------------------------------------------------------------------------------------


def test_unknown_format_raises_config_error_naming_valid_ones(
    tmp_path: Path, items: list[SuiteItem]
) -> None:
    with pytest.raises(ConfigError, match="vllm_custom") as exc:
        write_exports(items, tmp_path, formats=["openai", "csv"])
    assert "'csv'" in str(exc.value)
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ConfigError):
        run_md(items, formats=["nope"], tokenizer_name="")
    with pytest.raises(ValueError):  # ConfigError is a ValueError
        formats.check_formats(["sharegpt", "jsonl"])


def test_returns_every_file_written_and_nothing_else(
    tmp_path: Path, items: list[SuiteItem]
) -> None:
    files = write_exports(items, tmp_path)
    assert set(files) == {*FORMATS, "run_md"}
    listed = sorted(p for paths in files.values() for p in paths)
    on_disk = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file())
    assert listed == on_disk
    assert files["openai"] == ["openai.jsonl", "provenance.jsonl"]
    assert files["aiperf"] == ["aiperf.jsonl", "aiperf_multi_turn.jsonl"]
    assert files["run_md"] == ["RUN.md"]


def test_chosen_formats_only(tmp_path: Path, items: list[SuiteItem]) -> None:
    files = write_exports(items, tmp_path, formats=["vllm_custom"])
    assert files == {"vllm_custom": ["vllm_custom.jsonl"], "run_md": ["RUN.md"]}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["RUN.md", "vllm_custom.jsonl"]
    text = (tmp_path / "RUN.md").read_text()
    assert "vllm bench serve" in text and "sglang.bench_serving" not in text


def test_same_items_give_byte_identical_files(tmp_path: Path, items: list[SuiteItem]) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    write_exports(items, a, tokenizer_name="tok")
    write_exports(list(items), b, tokenizer_name="tok")
    files_a = {p.relative_to(a): p.read_bytes() for p in a.rglob("*") if p.is_file()}
    files_b = {p.relative_to(b): p.read_bytes() for p in b.rglob("*") if p.is_file()}
    assert files_a == files_b
    write_exports(items, a, tokenizer_name="tok")  # rewrite in place: same bytes, no temp left
    assert {p.relative_to(a): p.read_bytes() for p in a.rglob("*") if p.is_file()} == files_a


def test_non_ascii_is_kept_as_utf8(out: Path) -> None:
    for name in ("openai.jsonl", "sharegpt.json", "vllm_custom.jsonl", "guidellm.jsonl"):
        raw = (out / name).read_bytes()
        assert "日本語".encode() in raw, name
        assert b"\\u" not in raw, name


# --------------------------------------------------------------------------------------------
# SGLang openai.jsonl + provenance.jsonl
# --------------------------------------------------------------------------------------------

# What SGLang's openai loader does not forward into the request body.
SGLANG_CONSUMED = {"messages", "max_tokens", "max_completion_tokens", "model"}
SGLANG_REQUEST_KEYS = {"temperature", "ignore_eos", "tools", "chat_template_kwargs"}


def test_openai_rows_hold_only_request_keys(out: Path, items: list[SuiteItem]) -> None:
    rows = read_jsonl(out / "openai.jsonl")
    chat = chat_items(items)
    assert len(rows) == len(chat)  # the messages=None item is left out
    for row, it in zip(rows, chat, strict=True):
        forwarded = set(row) - SGLANG_CONSUMED
        assert forwarded <= SGLANG_REQUEST_KEYS
        assert set(row) == {"messages", "max_tokens", "ignore_eos", "temperature"} | (
            {"tools"} if it.tools else set()
        )
        assert isinstance(row["max_tokens"], int) and row["max_tokens"] == it.max_tokens
        assert row["ignore_eos"] is False
        assert row["temperature"] == 0.0  # greedy, explicitly
        assert row["messages"]  # SGLang drops rows with empty messages silently
        assert [m["role"] for m in row["messages"]] == [m["role"] for m in it.messages or ()]


def test_openai_tool_call_arguments_are_json_strings(out: Path) -> None:
    rows = read_jsonl(out / "openai.jsonl")
    tool_row = next(r for r in rows if "tools" in r)
    assert tool_row["tools"] == [WEATHER_TOOL]
    call = tool_row["messages"][2]["tool_calls"][0]
    assert isinstance(call["function"]["arguments"], str)
    assert call["function"]["arguments"] == '{"city": "Zürich"}'
    assert json.loads(call["function"]["arguments"]) == {"city": "Zürich"}


def test_missing_tool_call_ids_are_filled_consistently(tmp_path: Path) -> None:
    # Turn recovery gives no ids when the template does not render them; servers require them.
    messages = [
        {"role": "user", "content": "Two cities?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"type": "function", "function": {"name": "get_weather", "arguments": "{}"}},
                {"function": {"name": "get_weather", "arguments": {"city": "Oslo"}}},
            ],
        },
        {"role": "tool", "content": "a"},
        {"role": "tool", "content": "b"},
    ]
    write_exports([make_item(0, messages=messages, tools=[WEATHER_TOOL])], tmp_path)
    (row,) = read_jsonl(tmp_path / "openai.jsonl")
    calls = row["messages"][1]["tool_calls"]
    assert [c["id"] for c in calls] == ["call_1_0", "call_1_1"]
    assert all(c["type"] == "function" for c in calls)
    assert calls[0]["function"]["arguments"] == "{}"  # strings are left as they are
    assert [m["tool_call_id"] for m in row["messages"][2:]] == ["call_1_0", "call_1_1"]
    (g,) = read_jsonl(tmp_path / "guidellm.jsonl")
    assert g["messages"] == row["messages"]


def test_recorded_tool_call_ids_are_kept(out: Path) -> None:
    rows = read_jsonl(out / "openai.jsonl")
    tool_row = next(r for r in rows if "tools" in r)
    assert tool_row["messages"][2]["tool_calls"][0]["id"] == "call_0"
    assert tool_row["messages"][3]["tool_call_id"] == "call_0"


def test_provenance_aligned_line_by_line(out: Path, items: list[SuiteItem]) -> None:
    rows = read_jsonl(out / "openai.jsonl")
    prov = read_jsonl(out / "provenance.jsonl")
    chat = chat_items(items)
    assert len(prov) == len(rows) == len(chat)
    for p, it in zip(prov, chat, strict=True):
        assert set(p) == {"id", "source", "cluster", "weight", "provenance", "fidelity"}
        assert p["id"] == it.id
        assert p["provenance"] == it.provenance.to_dict()


def test_ignore_eos_true_reaches_every_client(tmp_path: Path, items: list[SuiteItem]) -> None:
    write_exports(items, tmp_path, ignore_eos=True)
    assert all(r["ignore_eos"] is True for r in read_jsonl(tmp_path / "openai.jsonl"))
    assert all(r["extra"] == {"ignore_eos": True} for r in read_jsonl(tmp_path / "aiperf.jsonl"))
    sessions = read_jsonl(tmp_path / "aiperf_multi_turn.jsonl")
    assert all(s["turns"][-1]["extra"] == {"ignore_eos": True} for s in sessions)
    text = (tmp_path / "RUN.md").read_text()
    assert "--ignore-eos" in text and "--disable-ignore-eos" not in text


# --------------------------------------------------------------------------------------------
# vLLM custom
# --------------------------------------------------------------------------------------------


def test_vllm_custom_loads_like_vllm(out: Path, items: list[SuiteItem]) -> None:
    import pandas as pd

    # vLLM's CustomDataset: pd.read_json(lines=True), needs 'prompt', integer 'output_tokens'.
    df = pd.read_json(out / "vllm_custom.jsonl", lines=True)
    assert "prompt" in df.columns
    assert pd.api.types.is_integer_dtype(df["output_tokens"])
    assert len(df) == len(items)  # every item, with or without messages
    assert list(df["prompt"]) == [it.prompt for it in items]
    assert list(df["output_tokens"]) == [it.max_tokens for it in items]
    assert list(df["id"]) == [it.id for it in items]


def test_zero_output_length_is_raised_to_one(tmp_path: Path) -> None:
    it = make_item(0, max_tokens=0)
    write_exports([it], tmp_path)
    assert read_jsonl(tmp_path / "vllm_custom.jsonl")[0]["output_tokens"] == 1
    assert read_jsonl(tmp_path / "aiperf.jsonl")[0]["output_length"] == 1
    assert read_jsonl(tmp_path / "openai.jsonl")[0]["max_tokens"] == 1
    assert read_jsonl(tmp_path / "token_ids.jsonl")[0]["num_output_tokens"] == 1
    assert read_jsonl(tmp_path / "guidellm.jsonl")[0]["output_tokens_count"] == 1
    assert "recorded an empty response" in (tmp_path / "RUN.md").read_text()


# --------------------------------------------------------------------------------------------
# ShareGPT, token ids
# --------------------------------------------------------------------------------------------


def test_sharegpt_is_one_array_of_two_turn_conversations(out: Path, items: list[SuiteItem]) -> None:
    data = json.loads((out / "sharegpt.json").read_text(encoding="utf-8"))
    assert isinstance(data, list)
    chat = chat_items(items)
    assert [d["id"] for d in data] == [it.id for it in chat]
    for d, it in zip(data, chat, strict=True):
        assert set(d) == {"id", "conversations"}
        human, gpt = d["conversations"][:2]  # both loaders read the first two turns
        assert human["from"] == "human" and gpt["from"] == "gpt"
        assert gpt["value"] == it.response
        assert "<|im_start|>" not in human["value"]  # raw text: the client templates it
    by_id = {d["id"]: d for d in data}
    assert by_id["ultrachat-0001"]["conversations"][0]["value"] == "Second question?"


def test_empty_suite_sharegpt_is_an_empty_array(tmp_path: Path) -> None:
    write_exports([make_item(0, no_messages=True)], tmp_path, formats=["sharegpt"])
    assert json.loads((tmp_path / "sharegpt.json").read_text()) == []


def test_token_ids_layout(out: Path, items: list[SuiteItem]) -> None:
    rows = read_jsonl(out / "token_ids.jsonl")
    assert len(rows) == len(items)
    for row, it in zip(rows, items, strict=True):
        assert set(row) == {"input_tokens", "num_output_tokens", "id"}
        assert row["input_tokens"] == list(it.prompt_ids)
        assert all(isinstance(t, int) for t in row["input_tokens"])
        assert isinstance(row["num_output_tokens"], int) and row["num_output_tokens"] >= 1


# --------------------------------------------------------------------------------------------
# GuideLLM
# --------------------------------------------------------------------------------------------

# GuideLLM's default column names and matching rule (GenerativeColumnMapper).
GUIDELLM_DEFAULTS = {
    "prompt_tokens_count_column": ["prompt_tokens_count", "input_tokens_count"],
    "output_tokens_count_column": ["output_tokens_count", "completion_tokens_count"],
    "prefix_column": ["system_prompt", "system", "prefix"],
    "text_column": [
        "prompt",
        "instruction",
        "question",
        "input",
        "context",
        "content",
        "conversation",
        "turn",
        "text",
    ],
    "raw_messages_column": ["messages", "chat_messages"],
    "image_column": ["image", "picture", "photo", "img"],
    "video_column": ["video", "clip", "movie", "footage", "mp4", "mov", "avi"],
    "audio_column": ["audio", "sound", "voice", "speech", "wav", "mp3"],
    "tools_column": ["tools", "functions", "tool_definitions"],
    "tool_response_column": ["tool_response", "tool_result", "tool_output"],
    "tool_choice_column": ["tool_choice"],
    "relative_timestamp_column": ["relative_timestamp"],
    "requeue_delay_column": ["requeue_delay"],
    "request_duration_column": ["duration", "request_duration"],
    "conversation_turns_column": ["conversation_turns"],
    "model_column": ["model"],
}
GUIDELLM_PATTERN = r"^(?P<full_name>(?P<match_name>({name})(es|s)?)([-_](?P<turn>\d+))?)$"


def guidellm_mapping(columns: list[str]) -> dict[str, list[str]]:
    text = "\n".join(columns)
    found: dict[str, list[str]] = {}
    for col_type, names in GUIDELLM_DEFAULTS.items():
        pattern = GUIDELLM_PATTERN.format(name="|".join(re.escape(n) for n in names))
        base = re.search(pattern, text, re.M | re.I)
        if not base:
            continue
        turn_pattern = GUIDELLM_PATTERN.format(name=base.group("match_name"))
        found[col_type] = [
            m.group("full_name") for m in re.finditer(turn_pattern, text, re.M | re.I)
        ]
    return found


def test_guidellm_columns_match_only_what_they_should(out: Path, items: list[SuiteItem]) -> None:
    rows = read_jsonl(out / "guidellm.jsonl")
    assert len(rows) == len(items)
    columns = list(rows[0])
    assert all(list(r) == columns for r in rows)
    assert guidellm_mapping(columns) == {
        "text_column": ["prompt"],
        "raw_messages_column": ["messages"],
        "output_tokens_count_column": ["output_tokens_count"],
    }
    assert "prefix" not in columns and "system" not in columns  # never prefix + rendered prompt
    for row, it in zip(rows, items, strict=True):
        assert row["prompt"] == it.prompt
        assert isinstance(row["output_tokens_count"], int)
        assert row["dp_id"] == it.id
        assert (row["messages"] is None) == (it.messages is None)


def test_guidellm_file_loads_with_datasets_json(out: Path, items: list[SuiteItem]) -> None:
    from datasets import load_dataset

    # GuideLLM's json_file deserializer is load_dataset("json", data_files=path).
    ds = load_dataset("json", data_files=str(out / "guidellm.jsonl"), split="train")
    assert ds.num_rows == len(items)
    assert ds["dp_id"] == [it.id for it in items]
    tool_row = ds[[it.id for it in items].index("glaive-0002")]
    args = tool_row["messages"][2]["tool_calls"][0]["function"]["arguments"]
    assert json.loads(args) == {"city": "Zürich"}


# --------------------------------------------------------------------------------------------
# AIPerf
# --------------------------------------------------------------------------------------------


def check_aiperf_turn(turn: dict[str, Any]) -> None:
    """AIPerf's SingleTurn rules that abort the whole load when broken."""
    assert turn.get("text"), "at least one modality must be provided"
    if "output_length" in turn:
        assert isinstance(turn["output_length"], int) and turn["output_length"] > 0
    if "extra" in turn:
        assert isinstance(turn["extra"], dict)


def test_aiperf_single_turn_rows(out: Path, items: list[SuiteItem]) -> None:
    rows = read_jsonl(out / "aiperf.jsonl")
    chat = chat_items(items)
    assert [r["id"] for r in rows] == [it.id for it in chat]
    for row, it in zip(rows, chat, strict=True):
        check_aiperf_turn(row)
        assert set(row) == {"text", "output_length", "id", "source"}  # no extra: ignore_eos off
        assert row["output_length"] == it.max_tokens
        assert "<|im_start|>" not in row["text"]


def test_aiperf_multi_turn_sessions(out: Path, items: list[SuiteItem]) -> None:
    sessions = read_jsonl(out / "aiperf_multi_turn.jsonl")
    chat = chat_items(items)
    assert [s["session_id"] for s in sessions] == [it.id for it in chat]
    assert len({s["session_id"] for s in sessions}) == len(sessions)  # no merged sessions
    for s, it in zip(sessions, chat, strict=True):
        turns = s["turns"]
        assert turns
        for t in turns:
            check_aiperf_turn(t)
        if turns[0].get("role") == "system":
            # AIPerf hoists a leading system turn only when it carries nothing but text.
            assert set(turns[0]) == {"role", "text"}
            turns = turns[1:]
        assert turns[-1]["output_length"] == it.max_tokens
        # AIPerf sends a turn without output_length with no max_completion_tokens at all.
        assert all(t["output_length"] >= 1 for t in turns)
    multi = next(s for s in sessions if s["session_id"] == "ultrachat-0001")
    assert multi["turns"] == [
        {"role": "system", "text": SYSTEM},
        {"text": "First question?", "output_length": 64},  # no tokenizer: the item's length
        {"text": "Second question?", "output_length": 64},
    ]


# --------------------------------------------------------------------------------------------
# by_source
# --------------------------------------------------------------------------------------------


def test_by_source_layout(out: Path, items: list[SuiteItem]) -> None:
    files = sorted(p.name for p in (out / "by_source").iterdir())
    assert files == ["deepswekimi.jsonl", "glaive.jsonl", "sharegpt.jsonl", "ultrachat.jsonl"]
    glaive = read_jsonl(out / "by_source" / "glaive.jsonl")
    assert [r["question_id"] for r in glaive] == ["glaive-0000", "glaive-0002"]
    for r in glaive:
        assert set(r) == {"question_id", "category", "turns"}
        assert r["category"] == "glaive"
        assert len(r["turns"]) == 1 and "<|im_start|>" not in r["turns"][0]
    assert glaive[1]["turns"] == ["Weather in Zürich?"]  # first user turn, raw
    ultra = read_jsonl(out / "by_source" / "ultrachat.jsonl")
    assert ultra[0]["turns"] == ["First question?"]


def test_by_source_file_names_are_safe_and_distinct(tmp_path: Path) -> None:
    sources = ["../evil", "a/b", "a_b", "Glaive", "glaive", "CON", "", "日本"]
    items = [make_item(i, source=s) for i, s in enumerate(sources)]
    files = write_exports(items, tmp_path, formats=["by_source"])["by_source"]
    assert len(files) == len(set(files)) == len(sources)
    assert len({f.lower() for f in files}) == len(files)
    for rel in files:
        path = (tmp_path / rel).resolve()
        assert path.parent == (tmp_path / "by_source").resolve()
        assert re.fullmatch(r"by_source/[A-Za-z0-9._-]+\.jsonl", rel), rel
        assert not Path(rel).name.startswith(".")
    assert "by_source/a_b.jsonl" in files and "by_source/glaive.jsonl" not in files
    categories = {read_jsonl(tmp_path / rel)[0]["category"] for rel in files}
    assert categories == set(sources)


# --------------------------------------------------------------------------------------------
# RUN.md
# --------------------------------------------------------------------------------------------


def test_run_md_commands_carry_real_counts(out: Path, items: list[SuiteItem]) -> None:
    text = (out / "RUN.md").read_text(encoding="utf-8")
    n_all, n_chat = len(items), len(chat_items(items))
    assert "python -m sglang.bench_serving --backend sglang-oai-chat" in text
    assert f"--num-prompts {n_chat}" in text
    vllm = text[text.index("dataset-path vllm_custom.jsonl") :]
    for flag in ("--skip-chat-template", "--custom-output-len -1", "--no-oversample"):
        assert flag in vllm
    assert f"--num-prompts {n_all}" in vllm
    assert "--tokenizer Qwen/Qwen3-8B" in text
    assert '{"kind":"json_file","path":"guidellm.jsonl"}' in text
    assert "--custom-dataset-type single_turn" in text
    assert "--custom-dataset-type multi_turn" in text
    assert "--disable-ignore-eos" in text
    for v in formats.CLIENT_VERSIONS.values():
        assert v in text
    assert "return_spec_tokens_details" in text and "/metrics" in text
    # spec_bench / speed-bench loaders render the template: completions or native endpoints only.
    by_source = text[text.index("### `by_source/`") :]
    assert "--dataset-name spec_bench" in by_source and "--dataset-name speed-bench" in by_source
    assert "sglang-oai-chat" not in by_source and "openai-chat" not in by_source
    assert "--spec-bench-output-len 64 --no-oversample --disable-shuffle" in by_source  # glaive


def test_run_md_warnings_for_this_suite(out: Path) -> None:
    text = (out / "RUN.md").read_text(encoding="utf-8")
    assert "No chat turns for 1 of 6 items" in text and "`kimik25-0005`" in text
    # ultrachat (system + earlier turn) and glaive-0002 (system + tools) lose history.
    assert "History lost in single-turn files.** 2 of 5 items" in text
    assert "1 of 6 items are not token-exact" in text  # fidelity None
    assert "1 item with tool definitions left out of `guidellm.jsonl`" in text
    assert "`aiperf_multi_turn.jsonl`: 2 items with assistant or tool turns" in text
    assert "not checked: 1" in text
    assert "BOS twice" not in text  # ChatML prompts start with <|im_start|>, not a BOS


def test_run_md_vllm_sharegpt_drop_count_known_answer(qwen_tokenizer: Any) -> None:
    # vLLM's own rule on the re-tokenized text, whatever n_prompt_tokens says.
    items = [
        make_item(0, messages=[{"role": "user", "content": "Hi"}]),  # prompt < 4
        make_item(1, messages=[{"role": "user", "content": "go " * 1100}]),  # prompt > 1024
        make_item(2, messages=[{"role": "user", "content": "go " * 1000}], response="x " * 1100),
        make_item(3, n_prompt_tokens=3000),  # long recorded prompt, short human turn: kept
        make_item(4, response="Yes"),  # output < 4
        make_item(7, no_messages=True),  # not in sharegpt
    ]
    from distprompt.write.clients import sharegpt_drops

    drops = sharegpt_drops([it for it in items if it.messages], qwen_tokenizer)["vllm"]
    r = drops.reasons
    assert (drops.total, r["prompt < 4"], r["prompt > 1024"], r["prompt + output > 2048"]) == (
        4,
        1,
        1,
        1,
    )
    assert r["output < 4"] == 1
    text = run_md(items, formats=["sharegpt"], tokenizer_name="tok", tokenizer=qwen_tokenizer)
    assert "vLLM `sharegpt` drops 4 of 5 items silently" in text
    assert "vllm_custom.jsonl" in text  # the way to keep them


def test_run_md_warns_about_a_leading_bos(tmp_path: Path) -> None:
    bos = "<｜begin▁of▁sentence｜>"
    items = [make_item(i, bos=bos, source="kimik25") for i in range(3)]
    text = run_md(items, formats=["vllm_custom"], tokenizer_name="deepseek-ai/DeepSeek-V3")
    assert "BOS twice" in text and f"3 of 3 rendered prompts start with `{bos}`" in text
    assert "BOS twice" in run_md(
        [make_item(0, bos="<|begin_of_text|>")], formats=["guidellm"], tokenizer_name=""
    )
    assert "BOS twice" not in run_md(items, formats=["openai"], tokenizer_name="")


def test_run_md_is_what_write_exports_writes(out: Path, items: list[SuiteItem]) -> None:
    expected = run_md(items, formats=FORMATS, tokenizer_name="Qwen/Qwen3-8B")
    assert (out / "RUN.md").read_text(encoding="utf-8") == expected


def test_run_md_without_items_still_renders(tmp_path: Path) -> None:
    files = write_exports([], tmp_path)
    assert (tmp_path / "RUN.md").read_text().startswith("# Running this suite")
    assert files["by_source"] == []
    assert (tmp_path / "openai.jsonl").read_bytes() == b""
