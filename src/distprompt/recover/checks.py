"""Does a tokenizer match the data? Three checks, run by ``inspect`` and ``export`` alike.

:func:`distprompt.inspect_corpus` and :func:`distprompt.build_suite` both prepare the
checks with :func:`prepare_checks` (markers learned, the per-row check for the pass) and judge
them with :func:`run_checks` on the pass's result (no second pass: the round trip samples the
candidate pool the pass keeps anyway), so both commands give the same verdict and message.

* ``vocabulary`` — token ids are below the tokenizer's vocabulary size. A row with a larger id is
  a bad row (``id_out_of_vocab``, left out of the figures like any other); the check fails when no
  row at all is inside the vocabulary. Otherwise the other two checks, run on the valid rows,
  decide: a few corrupt rows are not a wrong tokenizer;
* ``template_markers`` — the markers the chat template puts in every prompt are in every prompt:
  each prompt opens as one of the template's layouts opens (e.g. ``<|im_start|>``, a BOS token,
  or Mistral's ``<s>[INST]`` and, with tools, ``<s>[AVAILABLE_TOOLS]``), and holds the generation
  prompt (what ``add_generation_prompt`` appends, e.g. ``<|im_start|>assistant\\n``). Both are
  learned by rendering probe conversations in every layout (with and without a system prompt
  and tools, tool calls with ids and their results, reasoning, several turns) through the
  tokenizer's own template (:func:`~distprompt.recover.markers.learn_layouts`), so nothing
  is model specific;
* ``round_trip`` — decoded prompts of a uniform sample re-encode to the same ids.

The marker check runs inside the corpus pass (:class:`RowCheck` checks each valid row, and the
pass holds the rows that fail it apart). It is a verdict on the corpus, by source: it fails when
more than :data:`MISMATCH_SHARE` of all checked rows fail, or of one source's checked rows with
at least :data:`MIN_MISMATCH_ROWS` of them. Then the held rows are the corpus's, evidence that
the tokenizer is not the data's, and are given back to the figures (:func:`settle_rows`);
otherwise each is a problem of its own row, a bad row like any other: skipped and counted under
its reason (``template_start_missing``, ``generation_prompt_missing``) with ``--on-error skip``,
else refused with :func:`row_problem` (which says it is the row's, not the tokenizer's). The
round trip fails when fewer than :data:`MIN_ROUND_TRIP` of the sampled prompts re-encode exactly.
The outcome is a :class:`Check` per check in the :class:`TokenizerFigures`;
:attr:`TokenizerFigures.mismatch` is the message both commands raise.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from distprompt.errors import DataError, TemplateError
from distprompt.read.fastrow import RowView
from distprompt.recover.markers import Markers, learn_layouts, learn_markers

__all__ = [
    "MIN_MISMATCH_ROWS",
    "MIN_ROUND_TRIP",
    "MISMATCH_SHARE",
    "ROUND_TRIP_SAMPLE",
    "Check",
    "Checks",
    "Markers",
    "RowCheck",
    "TokenizerFigures",
    "learn_layouts",
    "learn_markers",
    "prepare_checks",
    "row_problem",
    "run_checks",
    "settle_rows",
]

logger = logging.getLogger("distprompt.recover.checks")

#: The marker check fails when more than this share of the checked rows lack the markers: of
#: all of them, or of one source's (with at least :data:`MIN_MISMATCH_ROWS` failing).
MISMATCH_SHARE = 0.5
#: Fewer failing rows of a source are no evidence against the tokenizer: they are row problems.
MIN_MISMATCH_ROWS = 3
#: The round-trip check fails when fewer than this share of sampled prompts re-encode exactly.
MIN_ROUND_TRIP = 0.5
#: Prompts per source decoded and re-encoded by the round-trip check.
ROUND_TRIP_SAMPLE = 64


@dataclass(frozen=True, slots=True)
class Check:
    """The outcome of one tokenizer check.

    Attributes:
        name: ``vocabulary``, ``template_markers`` or ``round_trip``.
        passed: True, False, or None when the check could not run.
        checked: Rows (or sampled prompts) checked.
        failed: How many of them failed.
        first: ``shard:line`` of the first failure.
        by_source: Failures per source.
        detail: One readable sentence.
    """

    name: str
    passed: bool | None
    checked: int
    failed: int
    first: str | None
    by_source: dict[str, int]
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "checked": self.checked,
            "failed": self.failed,
            "first": self.first,
            "by_source": dict(sorted(self.by_source.items())),
            "detail": self.detail,
        }


@dataclass(frozen=True, slots=True)
class TokenizerFigures:
    """The tokenizer checked against the data, the markers learned from it, and the checks."""

    name: str
    vocab_size: int
    has_chat_template: bool
    start_markers: str
    generation_prompt: str
    checks: tuple[Check, ...]

    @property
    def passed(self) -> bool:
        """Whether no check failed (a check that could not run does not fail)."""
        return all(c.passed is not False for c in self.checks)

    @property
    def mismatch(self) -> str | None:
        """Why the tokenizer evidently is not the data's (one line per failed check), or None.

        The message ``inspect`` and ``export`` print: which check, how many rows, the first
        ``shard:line`` and what to do.
        """
        failed = [c for c in self.checks if c.passed is False]
        if not failed:
            return None
        return "\n".join(
            f"tokenizer {self.name!r} does not match the data: {c.name} check failed — "
            f"{c.detail}; pass the tokenizer the data was made with"
            for c in failed
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "vocab_size": self.vocab_size,
            "has_chat_template": self.has_chat_template,
            "start_markers": self.start_markers,
            "generation_prompt": self.generation_prompt,
            "checks": {c.name: c.to_dict() for c in self.checks},
        }


@dataclass(frozen=True, slots=True)
class RowCheck:
    """The marker check of each valid row, run inside the pass (picklable for worker processes).

    A row must open with ``start`` and, when the template's layouts open differently, with one
    of ``starts``; it must hold ``gen`` or, when the layouts ask for a reply differently, one of
    ``gens`` (:class:`Markers`). Ids outside the vocabulary are not checked here: the pass makes
    such a row a bad row (``id_out_of_vocab``) before it reaches this check. The markers are
    compared as the bytes of int64 arrays (one ``bytes`` compare or search a row, no numpy call
    on the hot path).
    """

    start: tuple[int, ...]
    gen: tuple[int, ...]
    starts: tuple[tuple[int, ...], ...] = ()
    gens: tuple[tuple[int, ...], ...] = ()
    _start: bytes = field(init=False, repr=False, compare=False)
    _gen: bytes = field(init=False, repr=False, compare=False)
    _starts: tuple[bytes, ...] = field(init=False, repr=False, compare=False)
    _gens: tuple[bytes, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        def raw(ids: Sequence[int]) -> bytes:
            return np.asarray(ids, dtype=np.int64).tobytes()

        object.__setattr__(self, "_start", raw(self.start))
        object.__setattr__(self, "_gen", raw(self.gen))
        object.__setattr__(self, "_starts", tuple(raw(s) for s in self.starts if s))
        object.__setattr__(self, "_gens", tuple(raw(g) for g in self.gens if g))

    @classmethod
    def of(cls, markers: Markers) -> RowCheck:
        """The row check of learned markers."""
        return cls(markers.start, markers.gen, markers.starts, markers.gens)

    def __call__(self, row: RowView) -> list[str]:
        out: list[str] = []
        prompt = row.prompt_ids
        if prompt.dtype != np.int64:
            prompt = prompt.astype(np.int64)
        if self.start and prompt[: len(self.start)].tobytes() != self._start:
            out.append("template_start_missing")  # shorter than the marker included
        elif self._starts and not any(prompt[: len(s) // 8].tobytes() == s for s in self._starts):
            out.append("template_start_missing")
        if self.gen:
            if not _contains(prompt, self._gen):
                out.append("generation_prompt_missing")
        elif self._gens and not any(_contains(prompt, g) for g in self._gens):
            out.append("generation_prompt_missing")
        return out


def _contains(hay: np.ndarray, needle: bytes) -> bool:
    """Whether the int64 array ``hay`` holds the ids whose int64 bytes are ``needle`` as a
    contiguous run."""
    m = len(needle)
    if m == 0:
        return True
    if hay.shape[0] * 8 < m:
        return False
    if hay[-(m // 8) :].tobytes() == needle:  # where it usually is: at the end
        return True
    data = hay.tobytes()
    at = data.find(needle)
    while at >= 0 and at % 8:  # a match across element boundaries is no match
        at = data.find(needle, at + 1)
    return at >= 0


def show_ids(tok: Any, ids: Sequence[int]) -> str:
    """The text of some token ids (a marker), or "" for none."""
    from distprompt.recover.decode import decode

    return decode(tok, list(ids)) if ids else ""


def show_markers(tok: Any, one: Sequence[int], alternatives: Sequence[Sequence[int]]) -> str:
    """The text of a marker, or of its alternatives joined by `` | ``."""
    if alternatives:
        return " | ".join(show_ids(tok, a) for a in alternatives)
    return show_ids(tok, one)


def _quoted(tok: Any, one: Sequence[int], alternatives: Sequence[Sequence[int]]) -> str:
    if alternatives:
        return "(" + " or ".join(repr(show_ids(tok, a)) for a in alternatives) + ")"
    return repr(show_ids(tok, one))


def count_round_trips(
    tok: Any, cands: Sequence[Any], vocab_size: int
) -> tuple[int, int, str | None]:
    """``(ok, sampled, first failing shard:line)`` over candidates with in-vocabulary ids."""
    from distprompt.recover.decode import decode, encode_many

    ok = 0
    first: str | None = None
    tried = []
    for c in cands:
        ids = c.prompt_ids
        assert ids is not None, "load_candidates() first"
        if ids.size and int(ids.max()) >= vocab_size:
            continue
        tried.append((c, ids.tolist()))
    texts = [decode(tok, ids) for _, ids in tried]
    for (c, ids), again in zip(tried, encode_many(tok, texts), strict=True):
        if again == ids:
            ok += 1
        elif first is None or _loc_key(f"{c.provenance.shard}:{c.provenance.line}") < _loc_key(
            first
        ):
            first = f"{c.provenance.shard}:{c.provenance.line}"
    return ok, len(tried), first


def _loc_key(where: str) -> tuple[str, int]:
    shard, _, line = where.rpartition(":")
    return shard, int(line) if line.isdigit() else 0


def _marker_rows(part: Any) -> tuple[dict[str, int], dict[str, int]]:
    """``(failed, checked)`` rows of the marker check per source: the rows the pass held apart
    (:attr:`~distprompt.read.scan.Partial.held`), and all rows read, readmitted or not."""
    held = part.held
    failed = {s: st.rows for s, st in held.stats.items()} if held is not None else {}
    checked = {s: st.rows for s, st in part.stats.items()}
    if held is not None and part.settled != "readmitted":
        for s, n in failed.items():
            checked[s] = checked.get(s, 0) + n
    return failed, checked


def _marker_verdict(failed: Mapping[str, int], checked: Mapping[str, int]) -> bool:
    """Whether the rows failing the marker check are few enough to be row problems."""
    total_failed, total = sum(failed.values()), sum(checked.values())
    if total_failed > MISMATCH_SHARE * total:
        return False
    return not any(
        n >= MIN_MISMATCH_ROWS and n > MISMATCH_SHARE * checked[s] for s, n in failed.items()
    )


def _rows_check(name: str, part: Any, what: str) -> Check:
    failed_by, checked_by = _marker_rows(part)
    total = sum(checked_by.values())
    by_source = {s: n for s, n in sorted(failed_by.items()) if n}
    failed = sum(by_source.values())
    held = part.held
    firsts = list(held.tally.first_anomaly.values()) if held is not None else []
    first = min(firsts, key=_loc_key) if firsts else None
    passed = _marker_verdict(failed_by, checked_by)
    if failed:
        srcs = ", ".join(
            f"{s}: {n} of {checked_by[s]}, {100.0 * n / checked_by[s]:.0f}%"
            for s, n in by_source.items()
        )
        detail = f"{what} in {failed} of {total} rows ({srcs}); first at {first}"
        if passed:
            detail += (
                "; too few to blame the tokenizer (it is blamed when more than half of all "
                f"rows, or of a source's with at least {MIN_MISMATCH_ROWS}, fail): these are "
                "bad rows"
            )
    else:
        detail = f"no {what} in {total} rows"
    return Check(name, passed, total, failed, first, by_source, detail)


def settle_rows(part: Any) -> None:
    """Settle the rows the pass held apart for failing the marker check: given back to the
    corpus when the check fails (the tokenizer is not the data's; the verdict says so), else
    bad rows, counted as skipped under their reason (:func:`row_problem` refuses them when
    bad rows are not skipped).

    Example:
        >>> part = scan(shards, check=checks.row_check, ...)  # doctest: +SKIP
        >>> settle_rows(part)  # doctest: +SKIP
    """
    if part.held is None or part.settled:
        return
    if _marker_verdict(*_marker_rows(part)):
        part.set_aside()
    else:
        part.readmit()


def row_problem(figures: TokenizerFigures, part: Any) -> DataError | None:
    """The error for the first row set aside by the marker check (:func:`settle_rows`), when
    the tokenizer matches the corpus: a problem of that row, said so; None when there is none.
    """
    held = part.held
    if held is None or part.settled != "set_aside" or not held.tally.first_skip:
        return None
    reason, where = min(held.tally.first_skip.items(), key=lambda kv: _loc_key(kv[1]))
    shard, _, line = where.rpartition(":")
    rows, checked = sum(held.tally.skipped.values()), sum(_marker_rows(part)[1].values())
    if reason == "template_start_missing":
        expected = f"start with the chat template's start marker {figures.start_markers!r}"
        if " | " in figures.start_markers:
            expected = (
                "start as one of the chat template's layouts does "
                f"({figures.start_markers.replace(' | ', ' or ')})"
            )
    else:
        expected = f"contain the generation prompt {figures.generation_prompt!r}"
    return DataError(
        shard,
        int(line),
        reason,
        f"expected the prompt (input_ids[:n_prompt_tokens]) to {expected}, found it does not; "
        f"a problem of this row, not of the tokenizer ({rows} of {checked} rows fail the "
        f"template checks, too few to blame tokenizer {figures.name!r}) — fix the row (is "
        "n_prompt_tokens right?) or run with --on-error skip to skip such rows",
    )


def _vocab_check(part: Any, total_rows: int, vocab_size: int) -> Check:
    """``vocabulary``: out-of-vocabulary rows are bad rows; only none in the vocabulary fails."""
    bad = int(part.tally.skipped.get("id_out_of_vocab", 0))
    first = part.tally.first_skip.get("id_out_of_vocab")
    read = bad + total_rows
    what = f"token ids >= the vocabulary size {vocab_size}"
    if not bad:
        return Check("vocabulary", True, read, 0, None, {}, f"no {what} in {read} rows")
    if total_rows == 0:
        detail = f"{what} in every row ({bad} of {read}); first at {first}"
        return Check("vocabulary", False, read, bad, first, {}, detail)
    detail = (
        f"{what} in {bad} of {read} rows, skipped as bad rows (first at {first}); the other "
        f"checks decide on the {total_rows} valid rows"
    )
    return Check("vocabulary", True, read, bad, first, {}, detail)


def tokenizer_checks(
    part: Any,
    total_rows: int,
    vocab_size: int,
    tok: Any,
    start: Sequence[int],
    gen: Sequence[int],
    template_note: str,
    round_trips: Mapping[str, tuple[int, int, str | None]],
    *,
    starts: Sequence[Sequence[int]] = (),
    gens: Sequence[Sequence[int]] = (),
) -> tuple[Check, ...]:
    """The three checks, from the pass's counts (``part``) and the round trips per source.

    ``total_rows`` counts the rows the marker check saw (in the vocabulary, held apart by it
    or not); ``start``/``gen`` are the learned markers
    (``template_note`` says why they could not be learned); ``round_trips`` holds
    :func:`count_round_trips` per source.
    """
    vocab = _vocab_check(part, total_rows, vocab_size)
    if total_rows == 0:
        markers = Check("template_markers", None, 0, 0, None, {}, "not run: no valid row")
    elif template_note or not (start or gen or starts or gens):
        markers = Check(
            "template_markers",
            None,
            0,
            0,
            None,
            {},
            f"not run: {template_note or 'the chat template has no fixed markers'}",
        )
    else:
        parts = []
        if start or starts:
            parts.append(f"start marker {_quoted(tok, start, starts)}")
        if gen or gens:
            parts.append(f"generation prompt {_quoted(tok, gen, gens)}")
        markers = _rows_check("template_markers", part, " or ".join(parts) + " missing")
    ok = sum(r[0] for r in round_trips.values())
    n = sum(r[1] for r in round_trips.values())
    firsts = [r[2] for r in round_trips.values() if r[2]]
    first = min(firsts, key=_loc_key) if firsts else None
    by_source = {s: r[1] - r[0] for s, r in round_trips.items() if r[1] - r[0]}
    if n == 0:
        rt = Check("round_trip", None, 0, 0, None, {}, "not run: no prompt in the vocabulary")
    else:
        rate = ok / n
        srcs = ", ".join(
            f"{s}: {100.0 * (round_trips[s][0] / round_trips[s][1]):.0f}%"
            for s in sorted(by_source)
        )
        detail = (
            f"{ok} of {n} sampled prompts ({100.0 * rate:.1f}%) decode and re-encode to the "
            "same ids"
        )
        if by_source:
            detail += f" (below 100%: {srcs}); first failure at {first}"
        rt = Check("round_trip", rate >= MIN_ROUND_TRIP, n, n - ok, first, by_source, detail)
    return (vocab, markers, rt)


@dataclass(frozen=True, slots=True)
class Checks:
    """The tokenizer checks prepared for one pass: the learned markers and the per-row check.

    Attributes:
        vocab_size: Ids at or above it make a row bad (``id_out_of_vocab``); pass it to the scan.
        start: Ids every prompt starts with (learned from the chat template; may be empty).
        gen: The generation prompt every prompt contains (may be empty).
        template_note: Why the markers could not be learned ("" when they were).
        row_check: The per-row marker check for the pass (``scan(check=...)``).
        starts: How the template's layouts open, when they differ (:class:`Markers`).
        gens: The layouts' generation prompts, when they differ.
    """

    vocab_size: int
    start: tuple[int, ...]
    gen: tuple[int, ...]
    template_note: str
    row_check: RowCheck
    starts: tuple[tuple[int, ...], ...] = ()
    gens: tuple[tuple[int, ...], ...] = ()

    @classmethod
    def of(cls, vocab_size: int, markers: Markers) -> Checks:
        """The checks of learned markers."""
        return cls(
            vocab_size,
            markers.start,
            markers.gen,
            "",
            RowCheck.of(markers),
            markers.starts,
            markers.gens,
        )


def prepare_checks(tok: Any, vocab_size: int) -> Checks:
    """Learn the markers from the tokenizer's chat template and build the pass's row check.

    Example:
        >>> checks = prepare_checks(tok, tinfo.vocab_size)  # doctest: +SKIP
        >>> part = scan(shards, check=checks.row_check, ...)  # doctest: +SKIP
    """
    try:
        return Checks.of(vocab_size, learn_layouts(tok))
    except TemplateError as exc:
        return Checks(vocab_size, (), (), str(exc), RowCheck(start=(), gen=()))


def run_checks(
    checks: Checks,
    part: Any,
    tok: Any,
    name: str,
    *,
    has_chat_template: bool,
    shards: Sequence[Any],
    seed: int = 0,
    round_trip_sample: int = ROUND_TRIP_SAMPLE,
) -> tuple[TokenizerFigures, dict[str, tuple[int, int, str | None]]]:
    """Judge the tokenizer on a finished pass (``part``, scanned with ``checks``; the rows
    its marker check held apart are settled first, :func:`settle_rows`).

    The round trip decodes and re-encodes the first ``round_trip_sample`` candidates of each
    source's pool (a uniform sample of its unique prompts, kept by the pass anyway), so no
    second pass over the corpus is needed. Their ids are those the pass held (the pool's
    sample, :func:`~distprompt.read.readback.sampled_prompts`); the ids of any it did not hold are
    read back from ``shards`` by offset (counted in the debug log).

    Returns:
        The :class:`TokenizerFigures` and the round trips per source
        (``(ok, sampled, first failing shard:line)``).
    """
    settle_rows(part)  # when the caller has not (the pipeline does, before its quotas)
    # the rows checked: those held apart by the marker check count, whatever they became
    total_rows = sum(_marker_rows(part)[1].values())
    from distprompt.read.readback import sampled_prompts

    round_trips: dict[str, tuple[int, int, str | None]] = {}
    for src in sorted(part.stats):
        cands, read_back = sampled_prompts(part.pools[src], round_trip_sample, shards, seed=seed)
        if read_back:
            logger.debug(
                "round trip of %s: %d of %d sampled prompts read back (not held by the pass)",
                src,
                read_back,
                len(cands),
            )
        round_trips[src] = count_round_trips(tok, cands, checks.vocab_size)
    figures = TokenizerFigures(
        name=name,
        vocab_size=checks.vocab_size,
        has_chat_template=has_chat_template,
        start_markers=show_markers(tok, checks.start, checks.starts),
        generation_prompt=show_markers(tok, checks.gen, checks.gens),
        checks=tokenizer_checks(
            part,
            total_rows,
            checks.vocab_size,
            tok,
            checks.start,
            checks.gen,
            checks.template_note,
            round_trips,
            starts=checks.starts,
            gens=checks.gens,
        ),
    )
    return figures, round_trips
