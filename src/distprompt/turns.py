"""Chat-turn recovery: turn a tokenized prompt span back into the ``messages`` that produced it.

Nothing here knows a model family. :func:`learn_template` renders a few probe conversations whose
contents are unique sentinel strings through the tokenizer's own chat template and records, for
every pair of consecutive *slots* (a message's content, its reasoning, a tool call's name or
arguments, a tool definition), the literal text the template writes between them. Those literals
form a small automaton; :func:`recover_turns` walks it over the decoded prompt, rebuilds the
messages, re-renders them and says how exact the result is (``tokens`` > ``text`` > ``lossy``).
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from distprompt.errors import TemplateError

__all__ = ["RecoveredTurns", "TemplateProfile", "learn_template", "recover_turns"]

logger = logging.getLogger("distprompt.turns")

# Slot kinds. START/END are the virtual slots before the first and after the last literal.
START, END = "^", "$"
SYSTEM, USER, ASSISTANT, TOOL = "system", "user", "assistant", "tool"
REASONING, CALL_NAME, CALL_ARGS, TOOL_DEF = "reasoning", "call_name", "call_args", "tool_def"
_LETTER_KIND = {
    "s": SYSTEM,
    "u": USER,
    "a": ASSISTANT,
    "t": TOOL,
    "r": REASONING,
    "n": CALL_NAME,
    "g": CALL_ARGS,
    "d": TOOL_DEF,
}
_ASSISTANT_KINDS = frozenset({ASSISTANT, REASONING, CALL_NAME, CALL_ARGS})
_SENTINEL_RE = re.compile(r"(?:QZX|qzx)([a-z])(\d{2})(\d)(?:ZQX|zqx)")
_SENTINEL_STEMS = ("QZX", "qzx", "ZQX", "zqx")
# Only consulted when the template never renders ``reasoning_content``, so its tags cannot be
# read off a probe: the first pair whose closing tag the template source mentions is used.
_FALLBACK_REASONING_TAGS = (
    ("<think>", "</think>"),
    ("<thinking>", "</thinking>"),
    ("<|begin_of_thought|>", "<|end_of_thought|>"),
    ("◁think▷", "◁/think▷"),
)
_PARSE_BUDGET = 20_000  # DFS steps; real prompts need about one step per slot
_MAX_OCCURRENCES = 3  # later occurrences of a literal tried on backtracking
_MAX_REPAIRS = 16  # extra renders spent on alternative encodings of awkward turns


@dataclass(frozen=True, slots=True)
class TemplateProfile:
    """What :func:`learn_template` read off a tokenizer's chat template.

    Attributes:
        transitions: ``(previous_slot, next_slot, starts_new_message, literal)`` rows: the exact
            text the template writes between two slots. ``^``/``$`` stand for the prompt start
            and end, so ``(user, $, True, lit)`` says ``lit`` closes a final user turn and opens
            the generation prompt.
        generation_prompt: What ``add_generation_prompt=True`` appends after a user turn.
        bos_token: The tokenizer's BOS string, if any.
        template_adds_bos: Whether the rendered template already starts with ``bos_token``.
        supports_system: A system message renders.
        supports_tools: Tool definitions passed as ``tools=`` appear in the prompt.
        supports_tool_calls: Assistant ``tool_calls`` render with a recognisable name and
            JSON arguments.
        tool_def_form: ``tool`` when the template prints the whole OpenAI tool dict, ``function``
            when it prints only its ``function`` part.
        tool_arguments_as_string: Tool-call arguments must be passed as a JSON string.
        reasoning_rendered: ``reasoning_content`` is rendered for at least some turns.
        reasoning_tags: Opening and closing reasoning tags, if known.
        drops_earlier_reasoning: Reasoning of an assistant turn before the last user turn does not
            survive rendering, so such prompts cannot always round-trip.
        template_sha256: Hash of the template source (identity for caches and manifests).
        failed_probes: Names of probe conversations the template refused (raised on).
        generation_variants: ``(previous_slot, literal, kwargs)``: prompt endings that only a
            template variable produces, e.g. Qwen3's ``enable_thinking=False`` empty think block.
    """

    transitions: tuple[tuple[str, str, bool, str], ...]
    generation_prompt: str
    bos_token: str | None
    template_adds_bos: bool
    supports_system: bool
    supports_tools: bool
    supports_tool_calls: bool
    tool_def_form: str
    tool_arguments_as_string: bool
    reasoning_rendered: bool
    reasoning_tags: tuple[str, str] | None
    drops_earlier_reasoning: bool
    template_sha256: str
    failed_probes: tuple[str, ...]
    generation_variants: tuple[tuple[str, str, tuple[tuple[str, Any], ...]], ...] = ()

    def role_markers(self) -> dict[str, str]:
        """Human-readable view: the literal that opens each slot kind after a user turn or start.

        Example:
            >>> profile.role_markers()["assistant"]  # doctest: +SKIP
            '<|im_end|>\\n<|im_start|>assistant\\n'
        """
        out: dict[str, str] = {}
        for prev, nxt, _new, lit in self.transitions:
            if prev in (START, USER) and nxt not in out:
                out[nxt] = lit
        return out


@dataclass(frozen=True, slots=True)
class RecoveredTurns:
    """Messages recovered from one prompt span.

    Attributes:
        messages: OpenAI-style messages (``system``/``user``/``assistant``/``tool``); assistant
            messages may carry ``reasoning_content`` and ``tool_calls``.
        tools: Tool definitions (OpenAI ``function`` schema dicts) the template rendered into the
            prompt, or None.
        fidelity: ``tokens`` (messages re-render to exactly the prompt ids), ``text`` (they do not,
            but the decoded prompt text re-encodes to exactly the ids) or ``lossy``.
        reason: Why fidelity is not ``tokens``: first differing token and both contexts.
        chat_template_kwargs: Template variables the prompt was rendered with (e.g.
            ``{"enable_thinking": False}``), to send along as vLLM/SGLang ``chat_template_kwargs``;
            None when the defaults reproduce it.
    """

    messages: tuple[dict[str, Any], ...]
    tools: tuple[dict[str, Any], ...] | None
    fidelity: str
    reason: str | None
    chat_template_kwargs: dict[str, Any] | None = None


# --------------------------------------------------------------------------- learning


def _s(letter: str, msg: int, k: int = 0) -> str:
    return f"QZX{letter}{msg:02d}{k}ZQX"


def _tool_def(k: int) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": f"qzxd00{k}zqx",
            "description": "Probe tool.",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
        },
    }


def _call(msg: int, k: int, *, as_string: bool) -> dict[str, Any]:
    args = {"q": _s("g", msg, k), "k": 2}
    return {
        "type": "function",
        "function": {
            "name": f"qzxn{msg:02d}{k}zqx",
            "arguments": json.dumps(args) if as_string else args,
        },
    }


def _enclosing_json(text: str, pos: int, want: list[Any]) -> tuple[int, int] | None:
    """Span of the innermost JSON object around ``pos`` that decodes to one of ``want``."""
    decoder = json.JSONDecoder()
    i = pos
    for _ in range(32):
        i = text.rfind("{", 0, i)
        if i < 0:
            return None
        try:
            obj, end = decoder.raw_decode(text, i)
        except ValueError:
            continue
        if end > pos and obj in want:
            return i, end
    return None


@dataclass(frozen=True, slots=True)
class _ProbeSlot:
    kind: str
    start: int
    end: int
    msg: int  # -1 for tool definitions, which belong to no message


def _probe_slots(text: str, calls: dict[str, Any], defs: list[dict[str, Any]]) -> list[_ProbeSlot]:
    found: list[_ProbeSlot] = []
    seen: set[str] = set()
    for m in _SENTINEL_RE.finditer(text):
        if m.group(0) in seen:
            continue  # a template echoing a sentinel twice: the first one is the slot
        seen.add(m.group(0))
        kind = _LETTER_KIND.get(m.group(1))
        msg = int(m.group(2))
        if kind is None:
            continue
        if kind == CALL_ARGS:
            span = _enclosing_json(text, m.start(), [calls.get(m.group(0))])
        elif kind == TOOL_DEF:
            tool = defs[int(m.group(3))]
            # Prefer the whole tool dict: scanning outwards meets its inner function dict first.
            span = _enclosing_json(text, m.start(), [tool]) or _enclosing_json(
                text, m.start(), [tool["function"]]
            )
            msg = -1
        else:
            span = m.span()
        if span is not None:
            found.append(_ProbeSlot(kind, span[0], span[1], msg))
    found.sort(key=lambda s: s.start)
    slots: list[_ProbeSlot] = []
    for s in found:
        if not slots or s.start >= slots[-1].end:
            slots.append(s)
    return slots


class _Learner:
    """Renders probes and accumulates transitions; discarded once the profile is built."""

    def __init__(self, tokenizer: Any) -> None:
        self.tok = tokenizer
        self.transitions: set[tuple[str, str, bool, str]] = set()
        self.kinds_seen: set[str] = set()
        self.failed: list[str] = []
        self.def_forms: set[str] = set()
        self.last: list[tuple[str, str, bool, str]] = []  # transitions of the latest probe

    def render(self, name: str, messages: list[dict[str, Any]], **kw: Any) -> str | None:
        try:
            out = self.tok.apply_chat_template(messages, tokenize=False, **kw)
        except Exception as exc:  # templates signal unsupported roles by raising anything
            logger.debug("probe %s refused by template: %s", name, exc)
            self.failed.append(name)
            return None
        return out if isinstance(out, str) else None

    def learn(
        self,
        name: str,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        **template_kwargs: Any,
    ) -> str | None:
        self.last = []
        text = self.render(
            name, messages, tools=tools, add_generation_prompt=True, **template_kwargs
        )
        if text is None:
            return None
        calls = {
            _s("g", i, k): _as_dict(c["function"]["arguments"])
            for i, msg in enumerate(messages)
            for k, c in enumerate(msg.get("tool_calls") or [])
        }
        slots = _probe_slots(text, calls, tools or [])
        for s in slots:
            if s.kind == TOOL_DEF:
                tool = (tools or [])[0]
                span_obj = json.loads(text[s.start : s.end])
                self.def_forms.add("tool" if span_obj.get("type") == tool["type"] else "function")
        bounds = [_ProbeSlot(START, 0, 0, -2), *slots, _ProbeSlot(END, len(text), len(text), -3)]
        last_msg = -1  # index of the latest message seen; tool definitions belong to none
        for prev, nxt in itertools.pairwise(bounds):
            lit = text[prev.end : nxt.start]
            upto = len(messages) - 1 if nxt.kind == END else nxt.msg
            skipped = upto > last_msg + 1 if nxt.kind != TOOL_DEF else False
            last_msg = max(last_msg, upto)
            if skipped:
                continue  # a message left no slot (e.g. empty content): the literal is not generic
            if any(stem in lit for stem in _SENTINEL_STEMS):
                continue  # a slot we could not delimit (e.g. non-JSON arguments) leaked here
            if not lit and nxt.kind != END and prev.kind != START:
                continue  # nothing to find the boundary by
            self.last.append((prev.kind, nxt.kind, prev.msg != nxt.msg, lit))
        if not template_kwargs:
            self.transitions.update(self.last)
            self.kinds_seen.update(nxt for _, nxt, _, _ in self.last)
        return text


def _as_dict(args: Any) -> Any:
    return json.loads(args) if isinstance(args, str) else args


def _common_prefix_len(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def learn_template(tokenizer: Any) -> TemplateProfile:
    """Learn how a tokenizer's chat template lays out turns, from probe renders alone.

    About a dozen conversations with sentinel contents are rendered: with and without a system
    message, with tool definitions, tool calls (one and several, with and without content) and
    tool results, and with reasoning in the last and in an earlier assistant turn. Probes the
    template refuses are skipped; what they would have taught is then simply not recognised.

    Args:
        tokenizer: A ``transformers`` tokenizer with a chat template.

    Returns:
        The learned :class:`TemplateProfile` (hashable; learn once per tokenizer).

    Raises:
        TemplateError: The tokenizer has no chat template, or it renders no plain conversation.

    Example:
        >>> profile = learn_template(tokenizer)  # doctest: +SKIP
        >>> profile.generation_prompt  # doctest: +SKIP
        '<|im_start|>assistant\\n'
    """
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):
        template = template.get("default") or next(iter(template.values()), None)
    if not isinstance(template, str) or not template.strip():
        raise TemplateError(
            "expected a tokenizer with a chat template, found none; pass the tokenizer the data "
            "was rendered with (its tokenizer_config.json or chat_template.jinja carries it)"
        )
    lr = _Learner(tokenizer)

    def u(i: int) -> dict[str, Any]:
        return {"role": "user", "content": _s("u", i)}

    def a(i: int, content: str | None = None, **extra: Any) -> dict[str, Any]:
        return {"role": "assistant", "content": _s("a", i) if content is None else content, **extra}

    def t(i: int) -> dict[str, Any]:
        return {"role": "tool", "content": _s("t", i)}

    sys0 = {"role": "system", "content": _s("s", 0)}
    base = lr.learn("base_sys", [sys0, u(1), a(2), u(3)])
    supports_system = base is not None
    if lr.learn("base_nosys", [u(0), a(1), u(2)]) is None:
        raise TemplateError(
            "expected the chat template to render a plain user/assistant/user conversation, "
            "but it raised; check that the tokenizer's chat_template is a chat template"
        )
    defs = [_tool_def(0), _tool_def(1)]
    if supports_system:
        lr.learn("tools_sys", [sys0, u(1)], defs)
    lr.learn("tools_nosys", [u(0)], defs)
    supports_tools = TOOL_DEF in lr.kinds_seen

    def tool_probes(as_string: bool) -> None:
        def calls(m: int, n: int) -> list[dict[str, Any]]:
            return [_call(m, k, as_string=as_string) for k in range(n)]

        one = defs[:1]
        lr.learn("calls", [u(0), a(1, tool_calls=calls(1, 2)), t(2), t(3), a(4), u(5)], one)
        steps = [u(0), a(1, "", tool_calls=calls(1, 1)), t(2), a(3, "", tool_calls=calls(3, 1))]
        lr.learn("calls_multistep", [*steps, t(4)], one)
        lr.learn("calls_then_user", [u(0), a(1, tool_calls=calls(1, 1)), t(2), u(3)], one)
        for content in (None, ""):
            reasoned = a(1, content, reasoning_content=_s("r", 1), tool_calls=calls(1, 1))
            lr.learn("reasoning_last", [u(0), reasoned, t(2)], one)

    tool_probes(as_string=False)
    as_string = CALL_ARGS not in lr.kinds_seen
    if as_string:
        tool_probes(as_string=True)  # e.g. templates that concatenate arguments as a string
    supports_calls = CALL_ARGS in lr.kinds_seen
    reasoning_rendered = REASONING in lr.kinds_seen

    tags = _reasoning_tags(lr.transitions, template)
    kept = lr.render(
        "reasoning_earlier",
        [u(0), a(1, reasoning_content=_s("r", 1)), u(2)],
        add_generation_prompt=True,
    )
    kept_earlier = kept is not None and _s("r", 1) in kept
    if tags is not None and not kept_earlier:
        inline = f"{tags[0]}\n{_s('r', 1)}\n{tags[1]}\n\n{_s('a', 1)}"
        kept = lr.render("reasoning_inline", [u(0), a(1, inline), u(2)], add_generation_prompt=True)
        kept_earlier = kept is not None and _s("r", 1) in kept
    drops = (reasoning_rendered or tags is not None) and not kept_earlier

    variants: set[tuple[str, str, tuple[tuple[str, Any], ...]]] = set()
    for var in _template_switches(template, tokenizer):
        for value in (True, False):
            for probe in (
                [u(0), a(1), u(2)],
                [u(0), a(1, "", tool_calls=[_call(1, 0, as_string=as_string)]), t(2)],
            ):
                if lr.learn(f"switch_{var}", probe, defs[:1], **{var: value}) is None:
                    continue
                for prev, nxt, _, lit in lr.last:
                    if nxt == END and (prev, END, True, lit) not in lr.transitions:
                        variants.add((prev, lit, ((var, value),)))

    plain = lr.render("gen_off", [u(0)], add_generation_prompt=False) or ""
    with_gen = lr.render("gen_on", [u(0)], add_generation_prompt=True) or ""
    bos = getattr(tokenizer, "bos_token", None)
    bos = bos if isinstance(bos, str) and bos else None
    return TemplateProfile(
        transitions=tuple(sorted(lr.transitions)),
        generation_prompt=with_gen[_common_prefix_len(plain, with_gen) :],
        bos_token=bos,
        template_adds_bos=bool(bos and with_gen.startswith(bos)),
        supports_system=supports_system,
        supports_tools=supports_tools,
        supports_tool_calls=supports_calls,
        tool_def_form="function" if lr.def_forms == {"function"} else "tool",
        tool_arguments_as_string=as_string and supports_calls,
        reasoning_rendered=reasoning_rendered,
        reasoning_tags=tags,
        drops_earlier_reasoning=drops,
        template_sha256=hashlib.sha256(template.encode("utf-8")).hexdigest(),
        failed_probes=tuple(lr.failed),
        generation_variants=tuple(sorted(variants, key=repr)),
    )


def _template_switches(template: str, tokenizer: Any) -> list[str]:
    """Free variables of the template that are not the standard inputs: candidate switches."""
    import jinja2
    from jinja2 import meta

    try:
        env = jinja2.Environment(extensions=["jinja2.ext.loopcontrols"])
        names = meta.find_undeclared_variables(env.parse(template))
    except jinja2.TemplateError:
        return []  # e.g. transformers-only tags: the template still renders, variants unlearned
    standard = {
        "messages",
        "tools",
        "documents",
        "add_generation_prompt",
        "continue_final_message",
        "raise_exception",
        "strftime_now",
        *jinja2.defaults.DEFAULT_NAMESPACE,
        *getattr(tokenizer, "special_tokens_map", {}),
    }
    return sorted(n for n in names if n not in standard and not n.endswith("_token"))[:8]


def _reasoning_tags(
    transitions: set[tuple[str, str, bool, str]], template: str
) -> tuple[str, str] | None:
    """Reasoning tags as the template writes them, else a known pair its source mentions."""
    into_r = {(p, lit) for p, n, _, lit in transitions if n == REASONING}
    into_a = {(p, lit) for p, n, new, lit in transitions if n == ASSISTANT and new}
    out_r = [lit for p, n, new, lit in transitions if (p, n, new) == (REASONING, ASSISTANT, False)]
    for prev, lit in sorted(into_r):
        for prev_a, lit_a in sorted(into_a):
            if prev_a == prev and lit.startswith(lit_a) and out_r:
                return lit[len(lit_a) :].strip(), out_r[0].strip()
    for open_tag, close_tag in _FALLBACK_REASONING_TAGS:
        if close_tag in template:
            return open_tag, close_tag
    return None


# --------------------------------------------------------------------------- parsing


@dataclass(frozen=True, slots=True)
class _Slot:
    kind: str
    start: int
    end: int
    new: bool  # starts a new message
    lit_start: int  # where the literal leading into this slot starts


@functools.lru_cache(maxsize=32)
def _table(profile: TemplateProfile) -> dict[str, tuple[tuple[str, bool, str], ...]]:
    table: dict[str, list[tuple[str, bool, str]]] = {}
    for prev, nxt, new, lit in profile.transitions:
        table.setdefault(prev, []).append((nxt, new, lit))
    for prev, lit, _ in profile.generation_variants:
        table.setdefault(prev, []).append((END, True, lit))
    return {k: tuple(v) for k, v in table.items()}


def _json_end(text: str, start: int) -> int | None:
    try:
        obj, end = json.JSONDecoder().raw_decode(text, start)
    except ValueError:
        return None
    return end if isinstance(obj, dict) else None


def _candidates(
    text: str,
    table: dict[str, tuple[tuple[str, bool, str], ...]],
    kind: str,
    start: int,
    masked: list[int] | None,
) -> list[tuple[int, str, bool, str]]:
    """Ways to close the ``kind`` slot opened at ``start``: (literal position, next, new, lit)."""
    n = len(text)
    json_end = _json_end(text, start) if kind == TOOL_DEF else None
    if kind == TOOL_DEF and json_end is None:
        return []
    out: list[tuple[int, str, bool, str]] = []
    for nxt, new, lit in table.get(kind, ()):
        if kind == START:
            positions = [0] if text.startswith(lit) else []
        elif json_end is not None:
            positions = [json_end] if text.startswith(lit, json_end) else []
        elif nxt == END:
            positions = [n - len(lit)] if text.endswith(lit) and n - len(lit) >= start else []
        else:
            positions = []
            at = start
            while len(positions) < _MAX_OCCURRENCES:
                at = text.find(lit, at)
                if at < 0:
                    break
                positions.append(at)
                at += 1
        for pos in positions:
            if nxt == END and pos + len(lit) != n:
                continue
            if not _slot_ok(text, kind, start, pos, masked):
                continue
            out.append((pos, nxt, new, lit))
    out.sort(key=lambda c: (c[0], c[1] != END, -len(c[3])))
    return out


def _slot_ok(text: str, kind: str, start: int, end: int, masked: list[int] | None) -> bool:
    if kind == CALL_NAME and (start == end or "\n" in text[start:end] or end - start > 256):
        return False
    if masked is not None and kind not in _ASSISTANT_KINDS and kind != START and end > start:
        # Loss-mask 1 marks assistant tokens; a mostly-masked non-assistant slot is a misparse.
        return 2 * (masked[end] - masked[start]) <= end - start
    return True


def _parse(
    text: str, profile: TemplateProfile, masked: list[int] | None
) -> tuple[list[_Slot], dict[str, Any] | None] | None:
    """Depth-first walk of the transition automaton; earliest literal first, then backtrack."""
    table = _table(profile)
    # frame: [kind, slot start, literal start, new, candidates, next candidate index]
    frames: list[list[Any]] = [[START, 0, 0, True, None, 0]]
    # What follows a slot does not depend on how it was reached: a (kind, start) that failed
    # once fails again, so remembering it keeps backtracking polynomial.
    dead: set[tuple[str, int]] = set()
    for _ in range(_PARSE_BUDGET):
        if not frames:
            return None
        fr = frames[-1]
        if fr[4] is None:
            fr[4] = _candidates(text, table, fr[0], fr[1], masked)
        if fr[5] >= len(fr[4]):
            dead.add((fr[0], fr[1]))
            frames.pop()
            continue
        pos, nxt, new, lit = fr[4][fr[5]]
        fr[5] += 1
        if nxt == END:
            ends = [f[4][f[5] - 1][0] for f in frames]
            switches = next(
                (
                    dict(kw)
                    for p, lit_v, kw in profile.generation_variants
                    if (p, lit_v) == (fr[0], lit)
                ),
                None,
            )
            if (fr[0], END, True, lit) in profile.transitions:
                switches = None  # the defaults already end the prompt this way
            slots = [_Slot(f[0], f[1], e, f[3], f[2]) for f, e in zip(frames, ends, strict=True)]
            return slots[1:], switches
        if (nxt, pos + len(lit)) not in dead:
            frames.append([nxt, pos + len(lit), pos, new, None, 0])
    return None


# --------------------------------------------------------------------------- messages


@dataclass(slots=True)
class _Turn:
    """A message under construction, with the alternative encodings still to try."""

    variants: list[dict[str, Any]]
    start: int
    end: int
    choice: int = 0

    @property
    def message(self) -> dict[str, Any]:
        return self.variants[self.choice]


def _build(
    text: str, slots: list[_Slot], profile: TemplateProfile
) -> tuple[list[_Turn], list[dict[str, Any]]]:
    tools: list[dict[str, Any]] = []
    groups: list[list[_Slot]] = []
    for s in slots:
        if s.kind == TOOL_DEF:
            obj = json.loads(text[s.start : s.end])
            tools.append(
                obj if profile.tool_def_form == "tool" else {"type": "function", "function": obj}
            )
            continue
        opens = s.kind in (SYSTEM, USER, TOOL) or s.new or not groups
        if opens:
            groups.append([s])
        else:
            groups[-1].append(s)
    turns = [_turn(text, g, profile) for g in groups]
    return turns, tools


def _turn(text: str, group: list[_Slot], profile: TemplateProfile) -> _Turn:
    head = group[0]
    span = (head.lit_start, group[-1].end)
    if head.kind in (SYSTEM, USER, TOOL):
        plain = {"role": head.kind, "content": text[head.start : head.end]}
        return _Turn([plain], *span)
    content, reasoning, r_slot, a_slot = "", None, None, None
    calls: list[dict[str, Any]] = []
    for s in group:
        seg = text[s.start : s.end]
        if s.kind == REASONING:
            reasoning, r_slot = seg, s
        elif s.kind == ASSISTANT:
            content, a_slot = seg, s
        elif s.kind == CALL_NAME:
            calls.append({"type": "function", "function": {"name": seg, "arguments": ""}})
        elif s.kind == CALL_ARGS and calls:
            calls[-1]["function"]["arguments"] = seg
    bodies: list[tuple[str, str | None]] = [(content, reasoning)]
    if r_slot is not None and a_slot is not None:
        # The template may not render reasoning at this position; the verbatim text may then
        # still re-render if it is kept in content (with an empty reasoning field that stops the
        # template from splitting it off again).
        opener = _reasoning_opener(text, r_slot, profile)
        raw = opener + text[r_slot.start : a_slot.end]
        bodies += [(raw, None), (raw, "")]
    elif profile.reasoning_tags and profile.reasoning_tags[1] in content:
        bodies.append((content, ""))
    arg_forms = [False] if profile.tool_arguments_as_string else [True, False]
    variants = []
    for (body, reason), parse_json in itertools.product(bodies, arg_forms if calls else [False]):
        msg: dict[str, Any] = {"role": ASSISTANT, "content": body}
        if reason is not None:
            msg["reasoning_content"] = reason
        if calls:
            msg["tool_calls"] = [_call_variant(c, parse_json=parse_json) for c in calls]
        variants.append(msg)
    return _Turn(variants, *span)


def _call_variant(call: dict[str, Any], *, parse_json: bool) -> dict[str, Any]:
    args: Any = call["function"]["arguments"]
    if parse_json:
        try:
            parsed = json.loads(args)
        except ValueError:
            parsed = None
        args = parsed if isinstance(parsed, dict) else args
    return {"type": "function", "function": {"name": call["function"]["name"], "arguments": args}}


def _reasoning_opener(text: str, r_slot: _Slot, profile: TemplateProfile) -> str:
    lit = text[r_slot.lit_start : r_slot.start]
    for prev, nxt, new, lit_a in profile.transitions:
        if nxt == ASSISTANT and new and prev != START and lit.startswith(lit_a) and lit != lit_a:
            return lit[len(lit_a) :]
    return (profile.reasoning_tags[0] + "\n") if profile.reasoning_tags else ""


# --------------------------------------------------------------------------- recovery


def _encode(tokenizer: Any, text: str) -> tuple[list[int], list[tuple[int, int]] | None]:
    try:
        enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        return list(enc["input_ids"]), [tuple(o) for o in enc["offset_mapping"]]
    except (NotImplementedError, TypeError, ValueError, KeyError):
        return list(tokenizer.encode(text, add_special_tokens=False)), None


def _render(
    tokenizer: Any,
    turns: list[_Turn],
    tools: list[dict[str, Any]],
    switches: dict[str, Any] | None = None,
) -> str | None:
    try:
        out = tokenizer.apply_chat_template(
            [t.message for t in turns],
            tools=tools or None,
            add_generation_prompt=True,
            tokenize=False,
            **(switches or {}),
        )
    except Exception as exc:  # a template rejecting what we rebuilt is a finding, not a crash
        logger.debug("re-render raised: %s", exc)
        return None
    return out if isinstance(out, str) else None


def _first_diff(a: Sequence[Any], b: Sequence[Any]) -> int:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return min(len(a), len(b))


def _diff_reason(tokenizer: Any, want: Sequence[int], got: Sequence[int], what: str) -> str:
    i = _first_diff(want, got)

    def ctx(ids: Sequence[int]) -> str:
        return repr(tokenizer.decode(list(ids[max(0, i - 8) : i + 8]), skip_special_tokens=False))

    return (
        f"{what}: first differing token at index {i} (prompt has {len(want)} tokens, "
        f"re-encoded {len(got)}); prompt …{ctx(want)}… vs …{ctx(got)}…"
    )


def _masked_prefix(
    loss_mask: Sequence[int], offsets: list[tuple[int, int]], n_chars: int, shift: int
) -> list[int]:
    flags = [0] * n_chars
    for m, (a, b) in zip(loss_mask, offsets, strict=True):
        if m:
            for c in range(max(a - shift, 0), min(b - shift, n_chars)):
                flags[c] = 1
    return [0, *itertools.accumulate(flags)]


def _repair(
    tokenizer: Any,
    text: str,
    turns: list[_Turn],
    tools: list[dict[str, Any]],
    switches: dict[str, Any] | None,
) -> str | None:
    """Re-render, switching the encoding of the first turn that disagrees, until text matches."""
    rendered = _render(tokenizer, turns, tools, switches)
    for _ in range(_MAX_REPAIRS):
        if rendered == text:
            break
        at = _first_diff(text, rendered or "")
        # The turn holding the first difference, or the next one: a missing opener shows up
        # just before its own turn's first slot.
        near = [t for t in turns if t.end >= at][:2]
        culprit = next((t for t in near if t.choice + 1 < len(t.variants)), None)
        if culprit is None:
            break
        culprit.choice += 1
        candidate = _render(tokenizer, turns, tools, switches)
        if candidate is not None and _first_diff(text, candidate) > at:
            rendered = candidate
        elif culprit.choice + 1 >= len(culprit.variants):
            culprit.choice = (
                0  # no encoding helped: keep the natural reading, `rendered` matches it
            )
            break
    return rendered


def recover_turns(
    prompt_ids: Sequence[int],
    *,
    tokenizer: Any,
    profile: TemplateProfile,
    loss_mask: Sequence[int] | None = None,
) -> RecoveredTurns:
    """Recover chat messages from a prompt span that ends with the generation prompt.

    Costs one decode, one encode and one render for an ordinary prompt; turns the template
    cannot reproduce as read cost a few extra renders while alternative encodings are tried.

    Args:
        prompt_ids: ``input_ids[:n_prompt_tokens]`` of a row.
        tokenizer: The tokenizer the data was rendered with.
        profile: ``learn_template(tokenizer)``.
        loss_mask: The row's loss mask over the same span; 1s mark earlier assistant turns and
            rule out readings that put masked text in a system, user or tool message.

    Returns:
        The :class:`RecoveredTurns`, with its fidelity checked by re-rendering.

    Raises:
        ValueError: ``loss_mask`` is not as long as ``prompt_ids``.

    Example:
        >>> profile = learn_template(tok)  # doctest: +SKIP
        >>> ids = tok.apply_chat_template([{"role": "user", "content": "Hi"}],
        ...                               add_generation_prompt=True)["input_ids"]  # doctest: +SKIP
        >>> recover_turns(ids, tokenizer=tok, profile=profile).fidelity  # doctest: +SKIP
        'tokens'
    """
    ids = [int(i) for i in prompt_ids]
    if loss_mask is not None and len(loss_mask) != len(ids):
        raise ValueError(
            f"expected a loss_mask as long as prompt_ids ({len(ids)}), found {len(loss_mask)}; "
            "pass loss_mask[:n_prompt_tokens]"
        )
    text = tokenizer.decode(ids, skip_special_tokens=False)
    enc, offsets = _encode(tokenizer, text)
    text_ok = enc == ids
    notes: list[str] = []
    shift = 0
    bos = profile.bos_token
    if bos and not profile.template_adds_bos and text.startswith(bos):
        # The tokenizer, not the template, added BOS: messages cannot say so to a chat server.
        shift = len(bos)
        notes.append("prompt starts with a BOS token the chat template does not render")
    body = text[shift:]
    masked = None
    if loss_mask is not None and offsets is not None and text_ok and any(loss_mask):
        masked = _masked_prefix(loss_mask, offsets, len(body), shift)
    parsed = _parse(body, profile, masked)
    if parsed is None and masked is not None:
        parsed = _parse(body, profile, None)  # a mask from a different convention: ignore it
        if parsed is not None:
            notes.append("loss mask disagrees with the recovered turn boundaries")
    switches: dict[str, Any] | None = None
    if parsed is None:
        notes.append("no turn structure recognised; whole prompt kept as one user message")
        turns = [_Turn([{"role": USER, "content": body}], 0, len(body))]
        tools: list[dict[str, Any]] = []
        rendered = _render(tokenizer, turns, tools)
    else:
        turns, tools = _build(body, parsed[0], profile)
        switches = parsed[1]
        rendered = _repair(tokenizer, body, turns, tools, switches)
    messages = tuple(t.message for t in turns)
    out_tools = tuple(tools) if tools else None

    def result(fidelity: str, reason: str | None) -> RecoveredTurns:
        return RecoveredTurns(messages, out_tools, fidelity, reason, switches)

    if rendered == body and text_ok and not shift:
        return result("tokens", None)
    got = _encode(tokenizer, rendered)[0] if rendered is not None else []
    if got == ids:
        return result("tokens", None)
    if (
        profile.drops_earlier_reasoning
        and profile.reasoning_tags
        and any(
            profile.reasoning_tags[1] in str(m.get("content", "")) or m.get("reasoning_content")
            for m in messages[:-1]
        )
    ):
        notes.append("template drops earlier reasoning blocks")
    if rendered is None:
        notes.append("the chat template raised on the recovered messages")
    if text_ok:
        notes.append(_diff_reason(tokenizer, ids, got, "re-rendered messages differ"))
        return result("text", "; ".join(notes))
    notes.append(_diff_reason(tokenizer, ids, enc, "decoded text does not re-encode"))
    return result("lossy", "; ".join(notes))
