"""Template learning: read how a tokenizer's chat template lays out turns, from probe renders.

Nothing here knows a model family. :func:`learn_template` renders a few probe conversations whose
contents are unique sentinel strings through the tokenizer's own chat template and records, for
every pair of consecutive *slots* (a message's content, its reasoning, a tool call's name, its
arguments as one JSON object or each argument's key and value, a tool definition), the literal
text the template writes between them, also under each template switch. The resulting
:class:`TemplateProfile` is the automaton :mod:`distprompt.recover.turns` walks to recover messages.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import re
from dataclasses import dataclass
from typing import Any

from distprompt.errors import TemplateError

__all__ = ["TemplateProfile", "learn_template"]

logger = logging.getLogger("distprompt.recover.template")

# Slot kinds. START/END are the virtual slots before the first and after the last literal.
START, END = "^", "$"
SYSTEM, USER, ASSISTANT, TOOL = "system", "user", "assistant", "tool"
REASONING, CALL_NAME, CALL_ARGS, TOOL_DEF = "reasoning", "call_name", "call_args", "tool_def"
# Arguments a template writes key by key (XML parameters, key/value tags) instead of as one JSON
# object: one slot per key and one per value.
ARG_KEY, ARG_VALUE = "arg_key", "arg_value"
_LETTER_KIND = {
    "s": SYSTEM,
    "u": USER,
    "a": ASSISTANT,
    "t": TOOL,
    "r": REASONING,
    "n": CALL_NAME,
    "g": CALL_ARGS,
    "d": TOOL_DEF,
    "k": ARG_KEY,
    "v": ARG_VALUE,
}
# A tool call's id and a tool result's ``tool_call_id``, where the template prints them: one slot
# each (any id format the data holds: Mistral's nine characters, Kimi-K2's functions.NAME:IDX).
CALL_ID, RESULT_ID = "call_id", "result_id"
# letter, message index, item index (tool call or definition), argument index (keys and values)
_SENTINEL_RE = re.compile(r"(?:QZX|qzx)([a-z])(\d{2})(\d)(\d?)(?:ZQX|zqx)|QQ([ij])(\d{2})(\d)()ZqX")
_SENTINEL_STEMS = ("QZX", "qzx", "ZQX", "zqx", "ZqX")
_ID_KIND = {"i": CALL_ID, "j": RESULT_ID}
# Only consulted when the template never renders ``reasoning_content``, so its tags cannot be
# read off a probe: the first pair whose closing tag the template source mentions is used.
_FALLBACK_REASONING_TAGS = (
    ("<think>", "</think>"),
    ("<thinking>", "</thinking>"),
    ("<|begin_of_thought|>", "<|end_of_thought|>"),
    ("◁think▷", "◁/think▷"),
)


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
            arguments (one JSON object, or key by key).
        tool_def_form: ``tool`` when the template prints the whole OpenAI tool dict, ``function``
            when it prints only its ``function`` part.
        tool_arguments_as_string: Tool-call arguments must be passed as a JSON string.
        reasoning_rendered: ``reasoning_content`` is rendered for at least some turns.
        reasoning_tags: Opening and closing reasoning tags, if known.
        drops_earlier_reasoning: Reasoning of an assistant turn before the last user turn does not
            survive rendering, so such prompts cannot always round-trip.
        template_sha256: Hash of the template source (identity for caches and manifests).
        failed_probes: Names of probe conversations the template refused (raised on) in every
            form tried, each once.
        generation_variants: ``(previous_slot, literal, kwargs)``: prompt endings that only a
            template variable produces, e.g. Qwen3's ``enable_thinking=False`` empty think block.
        arguments_style: How tool-call arguments are written: ``json`` (one JSON object),
            ``keys`` (key by key: XML parameters, key/value tags) or None (no tool calls seen).
        switch_tables: ``(kwargs, transitions)``: the whole automaton under a template switch
            that changes more than the prompt ending (e.g. a ``/nothink`` suffix on user turns).
        markers: Template markers (added tokens the template writes, BOS) that never belong in a
            message's content; a message holding one is a flat reading.
        probes: ``(probe name, "ok" | "refused")``, each probe once with its final outcome.
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
    arguments_style: str | None = None
    switch_tables: tuple[
        tuple[tuple[tuple[str, Any], ...], tuple[tuple[str, str, bool, str], ...]], ...
    ] = ()
    markers: tuple[str, ...] = ()
    probes: tuple[tuple[str, str], ...] = ()

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


def _s(letter: str, msg: int, k: int = 0) -> str:
    return f"QZX{letter}{msg:02d}{k}ZQX"


def _id(letter: str, msg: int, k: int = 0) -> str:
    # Nine letters and digits: templates may insist on a length (Mistral's tool-call ids).
    return f"QQ{letter}{msg:02d}{k}ZqX"


def _arg_key(msg: int, k: int, j: int) -> str:
    # Lower case: templates and JSON keep keys as written, and keys are often identifiers.
    return f"qzxk{msg:02d}{k}{j}zqx"


def _arg_value(msg: int, k: int, j: int) -> str:
    return f"QZXv{msg:02d}{k}{j}ZQX"


def _tool_def(k: int) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": f"qzxd00{k}zqx",
            "description": "Probe tool.",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
        },
    }


def _call(msg: int, k: int, *, as_string: bool, bare: bool = False) -> dict[str, Any]:
    # Two string arguments with sentinel keys and values: a template that writes the arguments as
    # one JSON object shows that object (a CALL_ARGS slot); one that writes them key by key shows
    # the literals around each key and value, and between two arguments. ``bare``: none.
    args = {} if bare else {_arg_key(msg, k, j): _arg_value(msg, k, j) for j in range(2)}
    return {
        "id": _id("i", msg, k),
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
        if m.group(5) is not None:
            found.append(_ProbeSlot(_ID_KIND[m.group(5)], m.start(), m.end(), int(m.group(6))))
            continue
        kind = _LETTER_KIND.get(m.group(1))
        msg = int(m.group(2))
        if kind is None:
            continue
        if kind == ARG_KEY and m.group(0) in calls:
            # The first key: inside a JSON object equal to the arguments, the object is the slot.
            span = _enclosing_json(text, m.start(), [calls[m.group(0)]])
            if span is not None:
                kind = CALL_ARGS
            else:
                span = m.span()
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
        self.outcomes: dict[str, bool] = {}  # probe name -> rendered in some form
        self.def_forms: set[str] = set()
        self.last: list[tuple[str, str, bool, str]] = []  # transitions of the latest probe
        # While set, probes (rendered under a template switch) add their transitions here.
        self.collect: set[tuple[str, str, bool, str]] | None = None

    def render(self, name: str, messages: list[dict[str, Any]], **kw: Any) -> str | None:
        try:
            out = self.tok.apply_chat_template(messages, tokenize=False, **kw)
        except Exception as exc:  # templates signal unsupported roles by raising anything
            logger.debug("probe %s refused by template: %s", name, exc)
            self.outcomes.setdefault(name, False)
            return None
        self.outcomes[name] = True
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
            _arg_key(i, k, 0): _as_dict(c["function"]["arguments"])
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
        if self.collect is not None:
            self.collect.update(self.last)
        else:
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

    About twenty conversations with sentinel contents are rendered: with and without a system
    message, with tool definitions (also in multi-turn conversations), tool calls (one and
    several, with and without content) and tool results in a row, and with reasoning in the last
    and in an earlier assistant turn; then again under each template switch. Probes the template
    refuses are skipped; what they would have taught is then simply not recognised.

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
    _plain_probes(lr, {})
    supports_system = lr.outcomes.get("base_sys", False)
    if not lr.outcomes.get("base_nosys"):
        raise TemplateError(
            "expected the chat template to render a plain user/assistant/user conversation, "
            "but it raised; check that the tokenizer's chat_template is a chat template"
        )
    supports_tools = TOOL_DEF in lr.kinds_seen

    def args_seen() -> bool:
        return CALL_ARGS in lr.kinds_seen or ARG_KEY in lr.kinds_seen

    _tool_probes(lr, as_string=False, kw={})
    as_string = not args_seen()
    if as_string:
        _tool_probes(lr, as_string=True, kw={})  # e.g. templates that concatenate arguments as text
    supports_calls = args_seen()
    reasoning_rendered = REASONING in lr.kinds_seen

    tags, drops = _earlier_reasoning(lr, template, reasoning_rendered)

    variants, tables = _switches(lr, template, tokenizer, as_string)

    plain = lr.render("gen_off", [_u(0)], add_generation_prompt=False) or ""
    with_gen = lr.render("gen_on", [_u(0)], add_generation_prompt=True) or ""
    bos = getattr(tokenizer, "bos_token", None)
    bos = bos if isinstance(bos, str) and bos else None
    style = None
    if supports_calls:
        style = "json" if CALL_ARGS in lr.kinds_seen else "keys"
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
        failed_probes=tuple(sorted(n for n, ok in lr.outcomes.items() if not ok)),
        generation_variants=tuple(sorted(variants, key=repr)),
        arguments_style=style,
        switch_tables=tuple(sorted(tables.items(), key=repr)),
        markers=_markers(tokenizer, lr.transitions, bos, tags),
        probes=tuple(sorted((n, "ok" if ok else "refused") for n, ok in lr.outcomes.items())),
    )


def _sys0() -> dict[str, Any]:
    """A probe's system turn."""
    return {"role": "system", "content": _s("s", 0)}


def _u(i: int) -> dict[str, Any]:
    """A probe's user turn."""
    return {"role": "user", "content": _s("u", i)}


def _a(i: int, content: str | None = None, **extra: Any) -> dict[str, Any]:
    """A probe's assistant turn (its own sentinel unless ``content`` is given)."""
    return {"role": "assistant", "content": _s("a", i) if content is None else content, **extra}


def _t(i: int) -> dict[str, Any]:
    """A probe's tool result."""
    # Its own id sentinel: the call's id printed twice would not be a slot the second time.
    return {"role": "tool", "tool_call_id": _id("j", i), "content": _s("t", i)}


def _plain_probes(lr: _Learner, kw: dict[str, Any]) -> bool:
    """The plain and tool-definition probes (under the template switches ``kw``); whether
    both plain conversations rendered."""
    sys0, defs = _sys0(), [_tool_def(0), _tool_def(1)]
    base = lr.learn("base_sys", [sys0, _u(1), _a(2), _u(3)], **kw) is not None
    nosys = lr.learn("base_nosys", [_u(0), _a(1), _u(2)], **kw) is not None
    if base:
        # A lone system + user turn: templates that merge the two show their separator here.
        lr.learn("base_sys_single", [sys0, _u(1)], **kw)
    if base:
        lr.learn("tools_sys", [sys0, _u(1)], defs, **kw)
        # Templates that put tools (and the system prompt) into the last user turn.
        lr.learn("tools_sys_multi", [sys0, _u(1), _a(2), _u(3)], defs, **kw)
    lr.learn("tools_nosys", [_u(0)], defs, **kw)
    lr.learn("tools_nosys_multi", [_u(0), _a(1), _u(2)], defs, **kw)
    return nosys and base


def _tool_probes(lr: _Learner, as_string: bool, kw: dict[str, Any]) -> None:
    """The tool-call probes: calls, results, reasoning beside calls, calls without arguments."""
    sys0, defs = _sys0(), [_tool_def(0), _tool_def(1)]

    def calls(m: int, n: int) -> list[dict[str, Any]]:
        return [_call(m, k, as_string=as_string) for k in range(n)]

    one = defs[:1]
    lr.learn("calls", [_u(0), _a(1, tool_calls=calls(1, 2)), _t(2), _t(3), _a(4), _u(5)], one, **kw)
    steps = [_u(0), _a(1, "", tool_calls=calls(1, 1)), _t(2), _a(3, "", tool_calls=calls(3, 2))]
    lr.learn("calls_multistep", [*steps, _t(4), _t(5)], one, **kw)
    lr.learn("calls_then_user", [_u(0), _a(1, tool_calls=calls(1, 1)), _t(2), _u(3)], one, **kw)
    lr.learn("calls_sys", [sys0, _u(1), _a(2, "", tool_calls=calls(2, 1)), _t(3)], one, **kw)
    for content in (None, ""):
        reasoned = _a(1, content, reasoning_content=_s("r", 1), tool_calls=calls(1, 1))
        # A second reasoned call after a tool result: agent traces reason at every step.
        again = _a(3, content, reasoning_content=_s("r", 3), tool_calls=calls(3, 1))
        lr.learn("reasoning_last", [_u(0), reasoned, _t(2), again, _t(4)], one, **kw)
    if ARG_KEY in lr.kinds_seen:
        # Key by key, a call without arguments has literals of its own: after its name
        # comes the next call or the end of the calls, not a key.
        bare = _call(1, 0, as_string=as_string, bare=True)
        lr.learn("calls_no_arguments", [_u(0), _a(1, tool_calls=[bare, *calls(1, 2)[1:]]),
                 _t(2), _t(3)], one, **kw)  # fmt: skip
        last = _call(1, 1, as_string=as_string, bare=True)
        lr.learn("calls_no_arguments_last", [_u(0), _a(1, tool_calls=[*calls(1, 1), last]),
                 _t(2), _t(3)], one, **kw)  # fmt: skip


def _earlier_reasoning(
    lr: _Learner, template: str, reasoning_rendered: bool
) -> tuple[tuple[str, str] | None, bool]:
    """The reasoning tags, and whether the template drops the reasoning of earlier turns."""
    tags = _reasoning_tags(lr.transitions, template)
    kept = lr.render(
        "reasoning_earlier",
        [_u(0), _a(1, reasoning_content=_s("r", 1)), _u(2)],
        add_generation_prompt=True,
    )
    kept_earlier = kept is not None and _s("r", 1) in kept
    if tags is not None and not kept_earlier:
        inline = f"{tags[0]}\n{_s('r', 1)}\n{tags[1]}\n\n{_s('a', 1)}"
        kept = lr.render(
            "reasoning_inline", [_u(0), _a(1, inline), _u(2)], add_generation_prompt=True
        )
        kept_earlier = kept is not None and _s("r", 1) in kept
    drops = (reasoning_rendered or tags is not None) and not kept_earlier

    return tags, drops


def _switches(
    lr: _Learner, template: str, tokenizer: Any, as_string: bool
) -> tuple[
    set[tuple[str, str, tuple[tuple[str, Any], ...]]],
    dict[tuple[tuple[str, Any], ...], tuple[tuple[str, str, bool, str], ...]],
]:
    """The generation variants and the automata of the template's switches."""
    # Template switches: every probe again under each value. A switch that only changes how the
    # prompt ends is a generation variant of the default automaton; one that changes more (a
    # suffix on user turns, another system block) gets an automaton of its own.
    variants: set[tuple[str, str, tuple[tuple[str, Any], ...]]] = set()
    tables: dict[tuple[tuple[str, Any], ...], tuple[tuple[str, str, bool, str], ...]] = {}
    for var in _template_switches(template, tokenizer):
        for value in _switch_values(template, var):
            kw = {var: value}
            lr.collect = set()
            _plain_probes(lr, kw)
            _tool_probes(lr, as_string, kw)
            got, lr.collect = lr.collect, None
            extra = got - lr.transitions
            if not extra:
                continue
            key = ((var, value),)
            if all(nxt == END for _, nxt, _, _ in extra):
                variants.update((prev, lit, key) for prev, _, _, lit in extra)
            else:
                tables[key] = tuple(sorted(got))

    return variants, tables


def _markers(
    tokenizer: Any,
    transitions: set[tuple[str, str, bool, str]],
    bos: str | None,
    tags: tuple[str, str] | None,
) -> tuple[str, ...]:
    """Strings the template writes around contents that no content of a clean reading holds."""
    literals = [lit for _, _, _, lit in transitions]
    decoder = getattr(tokenizer, "added_tokens_decoder", None) or {}
    added = {str(getattr(v, "content", v)) for v in decoder.values()}
    found = {tok for tok in added if tok.strip() and any(tok in lit for lit in literals)}
    if not found:
        # Markers spelled as plain text: the literals that open a message.
        found = {lit.strip() for _, _, new, lit in transitions if new and lit.strip()}
    if bos:
        found.add(bos)
    found -= set(tags or ())  # reasoning kept in content is a reading the template accepts
    return tuple(sorted(found))


def _switch_values(template: str, var: str) -> list[Any]:
    """Values to probe a switch with: booleans, and strings the template compares it to."""
    name = re.escape(var)
    found: list[Any] = [True, False]
    patterns = (
        rf"\b{name}\s*(?:==|!=)\s*(['\"])(.{{0,40}}?)\1",
        rf"(['\"])(.{{0,40}}?)\1\s*(?:==|!=)\s*{name}\b",
    )
    for pat in patterns:
        for m in re.finditer(pat, template):
            if m.group(2) not in found:
                found.append(m.group(2))
    return found[:6]


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
