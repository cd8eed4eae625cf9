"""Chat-turn recovery: turn a tokenized prompt span back into the ``messages`` that produced it.

Nothing here knows a model family. :func:`~distprompt.template.learn_template` reads the literal
text the tokenizer's own chat template writes between consecutive slots (a message's content, its
reasoning, a tool call's name or arguments, a tool definition). Those literals form a small
automaton; :func:`recover_turns` walks it over the decoded prompt, rebuilds the messages,
re-renders them and says how exact the result is (``tokens`` > ``text`` > ``lossy``).
"""

from __future__ import annotations

import functools
import itertools
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from distprompt.template import (
    ASSISTANT,
    CALL_ARGS,
    CALL_NAME,
    END,
    REASONING,
    START,
    SYSTEM,
    TOOL,
    TOOL_DEF,
    USER,
    TemplateProfile,
    learn_template,
)

__all__ = ["RecoveredTurns", "TemplateProfile", "learn_template", "recover_turns"]

logger = logging.getLogger("distprompt.turns")

_ASSISTANT_KINDS = frozenset({ASSISTANT, REASONING, CALL_NAME, CALL_ARGS})
_PARSE_BUDGET = 20_000  # DFS steps; real prompts need about one step per slot
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
    """

    messages: tuple[dict[str, Any], ...]
    tools: tuple[dict[str, Any], ...] | None
    fidelity: str
    reason: str | None
    chat_template_kwargs: dict[str, Any] | None = None


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
