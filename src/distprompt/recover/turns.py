"""Chat-turn recovery: turn a tokenized prompt span back into the ``messages`` that produced it.

Nothing here knows a model family. :func:`~distprompt.recover.template.learn_template` reads the
literal text the tokenizer's own chat template writes between consecutive slots (a message's
content, its reasoning, a tool call's name or arguments, a tool definition). Those literals form a
small automaton; :func:`recover_turns` walks it over the decoded prompt, rebuilds the messages,
re-renders them and says how exact the result is (``tokens`` > ``text`` > ``lossy``)."""

from __future__ import annotations

import functools
import itertools
import json
import logging
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from distprompt.records import Ambiguity
from distprompt.recover.ambiguity import user_reading
from distprompt.recover.compare import diff_reason, encode_offsets, first_diff, masked_prefix
from distprompt.recover.decode import decode_input
from distprompt.recover.template import (
    ARG_KEY,
    ARG_VALUE,
    ASSISTANT,
    CALL_ARGS,
    CALL_ID,
    CALL_NAME,
    END,
    REASONING,
    RESULT_ID,
    START,
    SYSTEM,
    TOOL,
    TOOL_DEF,
    USER,
    TemplateProfile,
)

__all__ = ["RecoveredTurns", "recover_turns"]

logger = logging.getLogger("distprompt.recover.turns")

_ASSISTANT_KINDS = frozenset(
    {ASSISTANT, REASONING, CALL_NAME, CALL_ARGS, CALL_ID, ARG_KEY, ARG_VALUE}
)
_PARSE_BUDGET = 20_000  # DFS steps; real prompts need about one step per slot
_MAX_READINGS = 4  # complete parses tried per automaton before settling for the first
_DIGITS = re.compile(r"\d+")
_MAX_OCCURRENCES = 3  # later occurrences of a literal tried on backtracking
_MAX_REPAIRS = 16  # extra renders spent on alternative encodings of awkward turns


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
        structure: ``turns`` when every turn was recognised (no template marker inside any
            message), ``flat`` for the declared fallback: the prompt text in fewer messages,
            template markers included.
        ambiguities: Where the tokens have two readings, the one kept
            (:mod:`distprompt.recover.ambiguity`).
    """

    messages: tuple[dict[str, Any], ...]
    tools: tuple[dict[str, Any], ...] | None
    fidelity: str
    reason: str | None
    chat_template_kwargs: dict[str, Any] | None = None
    structure: str = "turns"
    ambiguities: tuple[Ambiguity, ...] = ()


# --------------------------------------------------------------------------- parsing


@dataclass(frozen=True, slots=True)
class _Slot:
    kind: str
    start: int
    end: int
    new: bool  # starts a new message
    lit_start: int  # where the literal leading into this slot starts


# A transition: (next slot, starts a new message, literal, pattern). ``pattern`` is set when the
# template writes a counter into the literal (``functions.NAME:0``, ``:1`` …): probes showed the
# literal with different numbers, so any number is accepted there.
_Entry = tuple[str, bool, str, "re.Pattern[str] | None"]
_Table = dict[str, tuple[_Entry, ...]]


@functools.lru_cache(maxsize=64)
def _table(
    transitions: tuple[tuple[str, str, bool, str], ...],
    variants: tuple[tuple[str, str, tuple[tuple[str, Any], ...]], ...],
) -> _Table:
    groups: dict[tuple[str, str, bool], list[str]] = {}
    for prev, nxt, new, lit in transitions:
        groups.setdefault((prev, nxt, new), []).append(lit)
    for prev, lit, _ in variants:
        groups.setdefault((prev, END, True), []).append(lit)
    table: dict[str, list[_Entry]] = {}
    for (prev, nxt, new), lits in groups.items():
        by_shape: dict[str, list[str]] = {}
        for lit in dict.fromkeys(lits):
            by_shape.setdefault(_DIGITS.sub("0", lit), []).append(lit)
        for same in by_shape.values():
            if len(same) > 1 and START not in (prev, nxt) and END not in (prev, nxt):
                parts = _DIGITS.split(same[0])
                pattern = re.compile(r"\d+".join(re.escape(p) for p in parts))
                table.setdefault(prev, []).append((nxt, new, same[0], pattern))
            else:
                table.setdefault(prev, []).extend((nxt, new, lit, None) for lit in same)
    return {k: tuple(v) for k, v in table.items()}


def _json_end(text: str, start: int) -> int | None:
    try:
        obj, end = json.JSONDecoder().raw_decode(text, start)
    except ValueError:
        return None
    return end if isinstance(obj, dict) else None


def _candidates(
    text: str,
    table: _Table,
    kind: str,
    start: int,
    masked: list[int] | None,
    forbid: tuple[str, ...] = (),
) -> list[tuple[int, str, bool, str]]:
    """Ways to close the ``kind`` slot opened at ``start``: (literal position, next, new, lit)."""
    n = len(text)
    json_end = _json_end(text, start) if kind == TOOL_DEF else None
    if kind == TOOL_DEF and json_end is None:
        return []
    out: list[tuple[int, str, bool, str]] = []
    for nxt, new, lit0, pattern in table.get(kind, ()):
        lit = lit0
        if pattern is not None:
            for m in itertools.islice(pattern.finditer(text, start), _MAX_OCCURRENCES):
                if _slot_ok(text, kind, start, m.start(), masked, forbid):
                    out.append((m.start(), nxt, new, m.group(0)))
            continue
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
            if not _slot_ok(text, kind, start, pos, masked, forbid):
                continue
            out.append((pos, nxt, new, lit))
    # At one position the longest literal first; a system slot after a user one with the same
    # literal: a template that writes the system prompt into a user turn leaves both readings
    # open, and the user one invents nothing (recover/ambiguity.py records the other).
    out.sort(key=lambda c: (c[0], c[1] != END, -len(c[3]), c[1] == SYSTEM))
    return out


def _slot_ok(
    text: str,
    kind: str,
    start: int,
    end: int,
    masked: list[int] | None,
    forbid: tuple[str, ...] = (),
) -> bool:
    if kind in (CALL_NAME, ARG_KEY, CALL_ID, RESULT_ID) and (
        start == end or "\n" in text[start:end] or end - start > 256
    ):
        return False
    if forbid and kind != START and end > start:
        seg = text[start:end]
        if any(mk in seg for mk in forbid):
            return False  # a template marker inside a slot: the reading skipped a turn boundary
    if masked is not None and kind not in _ASSISTANT_KINDS and kind != START and end > start:
        # Loss-mask 1 marks assistant tokens; a mostly-masked non-assistant slot is a misparse.
        return 2 * (masked[end] - masked[start]) <= end - start
    return True


def _parse(
    text: str,
    profile: TemplateProfile,
    masked: list[int] | None,
    transitions: tuple[tuple[str, str, bool, str], ...] | None = None,
    forbid: tuple[str, ...] = (),
) -> Iterator[tuple[list[_Slot], dict[str, Any] | None]]:
    """Depth-first walk of the transition automaton; earliest literal first, then backtrack.

    Yields every complete reading in that order (the caller stops when one re-renders).
    ``transitions`` replaces the default automaton (a template switch's own one); no slot may
    hold a string of ``forbid``.
    """
    own = transitions is not None
    trans = profile.transitions if transitions is None else transitions
    table = _table(trans, () if own else profile.generation_variants)
    known = frozenset(trans)
    # frame: [kind, slot start, literal start, new, candidates, next candidate index]
    frames: list[list[Any]] = [[START, 0, 0, True, None, 0]]
    # What follows a slot does not depend on how it was reached: a (kind, start) that failed
    # once fails again, so remembering it keeps backtracking polynomial.
    dead: set[tuple[str, int]] = set()
    for _ in range(_PARSE_BUDGET):
        if not frames:
            return
        fr = frames[-1]
        if fr[4] is None:
            fr[4] = _candidates(text, table, fr[0], fr[1], masked, forbid)
        if fr[5] >= len(fr[4]):
            dead.add((fr[0], fr[1]))
            frames.pop()
            continue
        pos, nxt, new, lit = fr[4][fr[5]]
        fr[5] += 1
        if nxt == END:
            ends = [f[4][f[5] - 1][0] for f in frames]
            switches = None
            if not own:
                switches = next(
                    (
                        dict(kw)
                        for p, lit_v, kw in profile.generation_variants
                        if (p, lit_v) == (fr[0], lit)
                    ),
                    None,
                )
            if (fr[0], END, True, lit) in known:
                switches = None  # the defaults already end the prompt this way
            slots = [_Slot(f[0], f[1], e, f[3], f[2]) for f, e in zip(frames, ends, strict=True)]
            yield slots[1:], switches
            continue
        if (nxt, pos + len(lit)) not in dead:
            frames.append([nxt, pos + len(lit), pos, new, None, 0])


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
        # A result's printed id may come before its content (``## Return of ID``): one message.
        after_id = bool(groups) and groups[-1][-1].kind == RESULT_ID and not s.new
        opens = (s.kind in (SYSTEM, USER, TOOL) and not after_id) or s.new or not groups
        if opens:
            groups.append([s])
        else:
            groups[-1].append(s)
    names = [str((t.get("function") or t).get("name", "")) for t in tools]
    turns = [_turn(text, g, profile, names) for g in groups]
    systems = [i for i, t in enumerate(turns) if t.message["role"] == SYSTEM]
    if len(systems) == 1 and systems[0] > 0:
        # Templates that write the system prompt into the last user turn (Mistral v3 style) read
        # it from the first message: that is where it goes back.
        turns.insert(0, turns.pop(systems[0]))
    return turns, tools


def _name_in_id(call_id: str, names: Sequence[str]) -> str:
    """The one defined tool whose name the id holds as a whole word (``functions.NAME:0``):
    a template that prints only the id still names the call there. "" when not one."""
    found = [n for n in names if n and re.search(rf"(?<![\w-]){re.escape(n)}(?![\w-])", call_id)]
    return found[0] if len(set(found)) == 1 else ""


def _turn(
    text: str, group: list[_Slot], profile: TemplateProfile, names: Sequence[str] = ()
) -> _Turn:
    head = group[0]
    span = (head.lit_start, group[-1].end)
    if head.kind in (TOOL, RESULT_ID):
        result: dict[str, Any] = {"role": TOOL}
        for s in group:
            if s.kind == RESULT_ID:
                result["tool_call_id"] = text[s.start : s.end]
            elif s.kind == TOOL:
                result["content"] = text[s.start : s.end]
        result.setdefault("content", "")
        variants = [result]
        unescaped = _json_string(text, group[-1] if group[-1].kind == TOOL else head)
        if unescaped is not None:
            # A template that JSON-encodes results (``content | tojson``): the text as sent.
            variants.insert(0, {**result, "content": unescaped})
        return _Turn(variants, *span)
    if head.kind in (SYSTEM, USER):
        plain = {"role": head.kind, "content": text[head.start : head.end]}
        return _Turn([plain], *span)
    content, reasoning, r_slot, a_slot = "", None, None, None
    calls: list[dict[str, Any]] = []
    pending_id: str | None = None
    key: str | None = None
    keyed = False  # arguments written key by key: values are typed one by one
    for s in group:
        seg = text[s.start : s.end]
        if s.kind == REASONING:
            reasoning, r_slot = seg, s
        elif s.kind == ASSISTANT:
            content, a_slot = seg, s
        elif s.kind == CALL_NAME:
            calls.append({"type": "function", "function": {"name": seg, "arguments": ""}})
            if pending_id is not None:
                calls[-1]["id"], pending_id = pending_id, None
        elif s.kind == CALL_ID:
            # Printed after its call's name (Mistral) or before it; a template that prints no
            # name (Kimi-K2's section tokens) starts the call with its id.
            if not _prints_names(profile):
                name = _name_in_id(seg, names)
                calls.append({"id": seg, "type": "function", "function": {"name": name}})
                calls[-1]["function"]["arguments"] = ""
            elif calls and "id" not in calls[-1]:
                calls[-1]["id"] = seg
            else:
                pending_id = seg
        elif s.kind == CALL_ARGS and calls:
            calls[-1]["function"]["arguments"] = seg
        elif s.kind == ARG_KEY and calls:
            key, keyed = seg, True
            if not isinstance(calls[-1]["function"]["arguments"], dict):
                calls[-1]["function"]["arguments"] = {}
            calls[-1]["function"]["arguments"][seg] = ""
        elif s.kind == ARG_VALUE and calls and key is not None:
            calls[-1]["function"]["arguments"][key] = seg
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
    if keyed or profile.arguments_style == "keys":
        # JSON-encoded where the template encoded them (numbers, lists, objects), else strings;
        # every value a string is the other reading. A call without a key has no arguments.
        for c in calls:
            if not isinstance(c["function"]["arguments"], dict):
                c["function"]["arguments"] = {}
        arg_forms = [True, False]
    variants = []
    for (body, reason), parse_json in itertools.product(bodies, arg_forms if calls else [False]):
        msg: dict[str, Any] = {"role": ASSISTANT, "content": body}
        if reason is not None:
            msg["reasoning_content"] = reason
        if calls:
            msg["tool_calls"] = [_call_variant(c, parse_json=parse_json) for c in calls]
        variants.append(msg)
    return _Turn(variants, *span)


@functools.lru_cache(maxsize=8)
def _prints_names(profile: TemplateProfile) -> bool:
    return any(CALL_NAME in (prev, nxt) for prev, nxt, _new, _lit in profile.transitions)


def _json_string(text: str, slot: _Slot) -> str | None:
    """The slot's text as a JSON string encoding it, when the template wrote it in quotes."""
    if slot.start == 0 or slot.end >= len(text) or text[slot.start - 1] != '"':
        return None
    if text[slot.end] != '"':
        return None
    seg = text[slot.start : slot.end]
    try:
        value = json.loads(f'"{seg}"')
    except ValueError:
        return None
    return value if isinstance(value, str) and value != seg else None


def _typed(value: str) -> Any:
    """A value as the template wrote it: JSON where it parses to a non-string, else the text."""
    try:
        parsed = json.loads(value)
    except ValueError:
        return value
    return value if isinstance(parsed, str) else parsed


def _call_variant(call: dict[str, Any], *, parse_json: bool) -> dict[str, Any]:
    args: Any = call["function"]["arguments"]
    if isinstance(args, dict):
        args = {k: _typed(v) for k, v in args.items()} if parse_json else dict(args)
    elif parse_json:
        try:
            parsed = json.loads(args)
        except ValueError:
            parsed = None
        args = parsed if isinstance(parsed, dict) else args
    out: dict[str, Any] = {"id": call["id"]} if "id" in call else {}
    out["type"] = "function"
    out["function"] = {"name": call["function"]["name"], "arguments": args}
    return out


def _reasoning_opener(text: str, r_slot: _Slot, profile: TemplateProfile) -> str:
    lit = text[r_slot.lit_start : r_slot.start]
    for prev, nxt, new, lit_a in profile.transitions:
        if nxt == ASSISTANT and new and prev != START and lit.startswith(lit_a) and lit != lit_a:
            return lit[len(lit_a) :]
    return (profile.reasoning_tags[0] + "\n") if profile.reasoning_tags else ""


# --------------------------------------------------------------------------- recovery


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
        at = first_diff(text, rendered or "")
        # The turn holding the first difference, or the next one: a missing opener shows up
        # just before its own turn's first slot.
        near = [t for t in turns if t.end >= at][:2]
        culprit = next((t for t in near if t.choice + 1 < len(t.variants)), None)
        if culprit is None:
            break
        culprit.choice += 1
        candidate = _render(tokenizer, turns, tools, switches)
        if candidate is not None and first_diff(text, candidate) > at:
            rendered = candidate
        elif culprit.choice + 1 >= len(culprit.variants):
            culprit.choice = (
                0  # no encoding helped: keep the natural reading, `rendered` matches it
            )
            break
    return rendered


_Reading = tuple[list[_Turn], list[dict[str, Any]], dict[str, Any] | None, str | None]


def _readings(
    tokenizer: Any,
    body: str,
    profile: TemplateProfile,
    masked: list[int] | None,
    forbid: tuple[str, ...],
) -> Iterator[_Reading]:
    """Readings of the prompt, rebuilt and re-rendered: the default automaton's first, then each
    template switch's own automaton (its switches always sent along)."""
    tables: list[tuple[tuple[tuple[str, str, bool, str], ...] | None, dict[str, Any] | None]] = [
        (None, None)
    ]
    tables += [(trans, dict(kw)) for kw, trans in profile.switch_tables]
    for transitions, forced in tables:
        parses = _parse(body, profile, masked, transitions, forbid)
        for slots, switches in itertools.islice(parses, _MAX_READINGS):
            turns, tools = _build(body, slots, profile)
            kw = forced if forced is not None else switches
            yield turns, tools, kw, _repair(tokenizer, body, turns, tools, kw)


def _best_reading(
    tokenizer: Any, body: str, profile: TemplateProfile, masked: list[int] | None
) -> _Reading | None:
    """The reading to keep (None: the prompt has none).

    First the readings whose slots hold no template marker; the first of them that re-renders to
    the prompt wins. Else any reading that re-renders (a flat one); else the first marker-free
    reading; else the first reading at all.
    """
    firsts: list[_Reading] = []
    passes = (profile.markers, ()) if profile.markers else ((),)
    for forbid in passes:
        first: _Reading | None = None
        for reading in _readings(tokenizer, body, profile, masked, forbid):
            first = first or reading
            if reading[3] == body:
                return reading
        if first is not None:
            firsts.append(first)
    return firsts[0] if firsts else None


def _flat(tokenizer: Any, body: str, profile: TemplateProfile) -> tuple[list[_Turn], str | None]:
    """The declared fallback: the prompt as one user message, minus the template's own opening
    and generation prompt when that re-renders exactly (else the whole text)."""
    opens = [lit for p, n, _, lit in profile.transitions if (p, n) == (START, USER)]
    closes = [lit for p, n, _, lit in profile.transitions if (p, n) == (USER, END)]
    for head, tail in itertools.product(opens, closes):
        if body.startswith(head) and body.endswith(tail) and len(head) + len(tail) <= len(body):
            inner = body[len(head) : len(body) - len(tail)]
            turns = [_Turn([{"role": USER, "content": inner}], 0, len(body))]
            rendered = _render(tokenizer, turns, [])
            if rendered == body:
                return turns, rendered
    turns = [_Turn([{"role": USER, "content": body}], 0, len(body))]
    return turns, _render(tokenizer, turns, [])


def _clean(messages: Sequence[dict[str, Any]], profile: TemplateProfile) -> bool:
    """No template marker inside any content, reasoning, tool-call name or argument."""
    if not profile.markers:
        return True
    texts: list[str] = []
    for m in messages:
        texts += [str(m.get("content") or ""), str(m.get("reasoning_content") or "")]
        for c in m.get("tool_calls") or ():
            fn = c.get("function") or {}
            texts += [str(fn.get("name", "")), json.dumps(fn.get("arguments"), ensure_ascii=False)]
    return not any(mk in t for t in texts for mk in profile.markers)


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
    text = tokenizer.decode(decode_input(tokenizer, ids), skip_special_tokens=False)
    enc, offsets = encode_offsets(tokenizer, text)
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
        masked = masked_prefix(loss_mask, offsets, len(body), shift)
    reading = _best_reading(tokenizer, body, profile, masked)
    if reading is None and masked is not None:
        reading = _best_reading(tokenizer, body, profile, None)  # a mask of another convention
        if reading is not None:
            notes.append("loss mask disagrees with the recovered turn boundaries")
    if reading is None:
        notes.append("no turn structure recognised; prompt text kept as one user message")
        turns, rendered = _flat(tokenizer, body, profile)
        tools: list[dict[str, Any]] = []
        switches: dict[str, Any] | None = None
    else:
        turns, tools, switches, rendered = reading
    messages = tuple(t.message for t in turns)
    out_tools = tuple(tools) if tools else None

    structure = "turns" if reading is not None and _clean(messages, profile) else "flat"

    def result(fidelity: str, reason: str | None) -> RecoveredTurns:
        return RecoveredTurns(messages, out_tools, fidelity, reason, switches, structure)

    if rendered == body and text_ok and not shift:
        if structure == "turns":
            kept, ambiguity = user_reading(tokenizer, body, messages, tools, switches, profile)
            if ambiguity is not None:
                return RecoveredTurns(
                    tuple(kept), out_tools, "tokens", None, switches, structure, (ambiguity,)
                )
        return result("tokens", None)
    got = encode_offsets(tokenizer, rendered)[0] if rendered is not None else []
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
        notes.append(diff_reason(tokenizer, ids, got, "re-rendered messages differ"))
        return result("text", "; ".join(notes))
    notes.append(diff_reason(tokenizer, ids, enc, "decoded text does not re-encode"))
    return result("lossy", "; ".join(notes))
