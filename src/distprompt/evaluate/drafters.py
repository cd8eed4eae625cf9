"""Model-free speculative decoding, simulated exactly on a recorded reply.

A drafter proposes up to ``k`` tokens from the context (prompt + reply so far) alone; the target
model is the recorded reply under greedy verification: the longest prefix of the proposal equal
to the next recorded tokens is accepted, then the target's own next token (the bonus) is added.
So the counts are what a server running that drafter would measure if the target generated the
recorded reply, with no GPU and no model.

Counting (consistent with vLLM's spec-decode metrics): the first reply token comes from the
prefill and is not a decode step; each later step verifies one proposal (possibly empty) and
yields ``accepted + 1`` tokens, fewer only when the reply ends (an accepted last token needs no
bonus). So ``tokens = len(reply)``, ``steps`` = decode steps after the prefill,
``tokens / steps`` is SGLang's ``spec_accept_length`` (completion tokens / verify steps) and
``1 + accepted / drafts`` is vLLM's "mean acceptance length" (``drafts`` = steps that proposed
at least one token). Proposals are not cut at the reply's end (vLLM cuts them only at
``max_model_len``), so tokens proposed past it count as drafted and rejected.

Drafters:

* ``ngram`` follows vLLM's ``NgramProposer`` (``vllm/v1/spec_decode/ngram_proposer.py``,
  ``_find_longest_matched_ngram_and_propose_tokens``, read at commit ``adce4e9``, the same since
  v0.10): the longest suffix of the context of length ``n`` in
  ``[prompt_lookup_min, prompt_lookup_max]`` that also occurs earlier (an occurrence ending
  before the last token; it may overlap the suffix), its **earliest** occurrence, and the up to
  ``k`` tokens that follow it (fewer when the context ends first). No match, no proposal.
* ``suffix`` is a per-request SuffixDecoding (Oliaro et al.; Arctic Inference, vLLM
  ``method="suffix"``) over prompt + generated tokens, simplified: match the longest suffix of
  the context (at most ``max_depth`` tokens) that occurs earlier with a following token, then
  walk greedily: the next draft token is the most frequent token following the string matched
  so far (suffix + drafted tokens) among its occurrences in the context, ties to the one whose
  last such occurrence is latest; stop at ``k`` tokens, at ``floor(spec_factor * match
  length)`` tokens (Arctic's ``max_spec_factor``), when the product of the chosen tokens'
  frequency shares falls below ``min_prob`` (Arctic's ``min_token_prob``), or when the string
  has no continuation. Simplified against Arctic: no global tree across requests (so results do
  not depend on request order), only the longest match is tried (Arctic scores every match
  length), and the drafted continuation is not bounded by the tree depth.

Cost, linear in the row: every n-gram of ``prompt + reply`` up to the longest order a drafter
needs gets an exact integer id (one ``np.unique`` per order, shared by all drafters of a call);
the ngram drafter looks its match up in O(n) per step; the suffix drafter counts continuations
in arrays filled for the prompt at once and updated per reply token (``max_depth + k`` orders).
Measured on one shared core, :data:`DEFAULT_DRAFTERS` in one :func:`simulate_many` call: a
30,000-token prompt with a 3,000-token reply 0.4-0.6 s (the two ngram settings 10-25 ms each,
suffix decoding the rest); rows of 400 + 100 and 250 + 250 tokens 5-8 ms.

Example:
    >>> import numpy as np
    >>> prompt = np.array([5, 6, 7, 8, 9, 1, 2])
    >>> reply = np.array([5, 6, 7, 8, 9])
    >>> counts = simulate(prompt, reply, Drafter("ngram", 4))
    >>> counts.tokens, counts.steps, counts.accepted
    (5, 1, 4)
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from distprompt.errors import ConfigError

__all__ = [
    "DEFAULT_DRAFTERS",
    "DRAFTER_KINDS",
    "Drafter",
    "SpecCounts",
    "simulate",
    "simulate_many",
]

DRAFTER_KINDS = ("ngram", "suffix")

_NGRAM_NAME = re.compile(r"ngram\[(\d+)-(\d+)\]k(\d+)")
_SUFFIX_NAME = re.compile(r"suffix(?:-d(\d+))?(?:-f([0-9.]+))?(?:-p([0-9.]+))?-k(\d+)")


@dataclass(frozen=True, slots=True)
class Drafter:
    """One drafter setting.

    Attributes:
        kind: ``"ngram"`` (vLLM's n-gram proposer) or ``"suffix"`` (suffix decoding).
        num_speculative_tokens: Most tokens proposed per step (``k``).
        prompt_lookup_min: ngram only: shortest n-gram matched (vLLM's option of that name).
        prompt_lookup_max: ngram only: longest n-gram matched.
        max_depth: suffix only: longest context suffix matched (vLLM's default tree depth, 24).
        spec_factor: suffix only: at most ``floor(spec_factor * match length)`` tokens are
            proposed (vLLM's ``suffix_decoding_max_spec_factor``, 1.0).
        min_prob: suffix only: stop drafting when the estimated probability of the drafted
            path falls below this (vLLM's ``suffix_decoding_min_token_prob``, 0.1).

    Example:
        >>> Drafter("ngram", 4).name
        'ngram[1-3]k4'
        >>> Drafter.parse("suffix-k8") == Drafter("suffix", 8)
        True
    """

    kind: str
    num_speculative_tokens: int
    prompt_lookup_min: int = 1
    prompt_lookup_max: int = 3
    max_depth: int = 24
    spec_factor: float = 1.0
    min_prob: float = 0.1

    def __post_init__(self) -> None:
        if self.kind not in DRAFTER_KINDS:
            raise ConfigError(
                f"drafter: expected a kind in {', '.join(DRAFTER_KINDS)}, found {self.kind!r}; "
                "name one of them"
            )
        if self.num_speculative_tokens < 1:
            raise ConfigError(
                f"drafter {self.kind}: expected num_speculative_tokens >= 1, found "
                f"{self.num_speculative_tokens}; propose at least one token"
            )
        if not 1 <= self.prompt_lookup_min <= self.prompt_lookup_max:
            raise ConfigError(
                f"drafter {self.kind}: expected 1 <= prompt_lookup_min <= prompt_lookup_max, "
                f"found {self.prompt_lookup_min} and {self.prompt_lookup_max}; fix the range"
            )
        if self.max_depth < 1 or self.spec_factor <= 0 or not 0 <= self.min_prob <= 1:
            raise ConfigError(
                f"drafter {self.kind}: expected max_depth >= 1, spec_factor > 0 and "
                f"0 <= min_prob <= 1, found {self.max_depth}, {self.spec_factor} and "
                f"{self.min_prob}; fix the setting"
            )

    @property
    def name(self) -> str:
        """A stable name, used as a column key and read back by :meth:`parse`:
        ``ngram[MIN-MAX]kK``, ``suffix-kK`` (non-default suffix knobs inserted as ``-dD``,
        ``-fF``, ``-pP`` before ``-kK``)."""
        k = self.num_speculative_tokens
        if self.kind == "ngram":
            return f"ngram[{self.prompt_lookup_min}-{self.prompt_lookup_max}]k{k}"
        parts = ["suffix"]
        if self.max_depth != 24:
            parts.append(f"d{self.max_depth}")
        if self.spec_factor != 1.0:
            parts.append(f"f{self.spec_factor:g}")
        if self.min_prob != 0.1:
            parts.append(f"p{self.min_prob:g}")
        return "-".join([*parts, f"k{k}"])

    @classmethod
    def parse(cls, text: str) -> Drafter:
        """The drafter a :attr:`name` names (the CLI's ``--drafter``).

        Raises:
            ConfigError: ``text`` is not a drafter name.
        """
        t = text.strip()
        m = _NGRAM_NAME.fullmatch(t)
        if m:
            lo, hi, k = (int(g) for g in m.groups())
            return cls("ngram", k, prompt_lookup_min=lo, prompt_lookup_max=hi)
        m = _SUFFIX_NAME.fullmatch(t)
        if m:
            depth, factor, prob, steps = m.groups()
            try:
                return cls(
                    "suffix",
                    int(steps),
                    max_depth=int(depth) if depth else 24,
                    spec_factor=float(factor) if factor else 1.0,
                    min_prob=float(prob) if prob else 0.1,
                )
            except ValueError as exc:  # "1.2.3" is not a number; ConfigError passes through
                if isinstance(exc, ConfigError):
                    raise
        raise ConfigError(
            f"--drafter: expected a name like ngram[1-3]k4, suffix-k8 or suffix-d16-f2-p0.05-k8, "
            f"found {text!r}; use one of those shapes"
        )

    @property
    def _orders(self) -> int:
        """The longest n-gram order whose ids the drafter reads."""
        if self.kind == "ngram":
            return self.prompt_lookup_max
        return self.max_depth + self.num_speculative_tokens


#: The settings simulated when none are named: vLLM's n-gram defaults at k=4 and a shorter
#: match range, and suffix decoding with vLLM's defaults at k=8.
DEFAULT_DRAFTERS: tuple[Drafter, ...] = (
    Drafter("ngram", 4, prompt_lookup_min=1, prompt_lookup_max=3),
    Drafter("ngram", 4, prompt_lookup_min=2, prompt_lookup_max=5),
    Drafter("suffix", 8),
)


@dataclass(frozen=True, slots=True)
class SpecCounts:
    """What a server would count for one reply (or a sum of them: counts add).

    Attributes:
        tokens: Reply tokens generated (``len(reply)``), the prefill's first token included.
        steps: Decode (verify) steps after the prefill.
        drafted: Draft tokens proposed.
        accepted: Draft tokens accepted.
        drafts: Steps in which at least one token was proposed.
    """

    tokens: int = 0
    steps: int = 0
    drafted: int = 0
    accepted: int = 0
    drafts: int = 0

    def __add__(self, other: SpecCounts) -> SpecCounts:
        return SpecCounts(
            self.tokens + other.tokens,
            self.steps + other.steps,
            self.drafted + other.drafted,
            self.accepted + other.accepted,
            self.drafts + other.drafts,
        )

    @property
    def tokens_per_step(self) -> float:
        """``tokens / steps`` (SGLang's accept length); NaN without a step."""
        return self.tokens / self.steps if self.steps else float("nan")

    @property
    def acceptance_rate(self) -> float:
        """``accepted / drafted``; NaN when nothing was drafted."""
        return self.accepted / self.drafted if self.drafted else float("nan")

    @property
    def accept_length(self) -> float:
        """``1 + accepted / drafts``: vLLM's mean acceptance length; NaN without a draft."""
        return 1 + self.accepted / self.drafts if self.drafts else float("nan")


class _Index:
    """Exact integer ids of every n-gram of a sequence, orders ``1..orders``.

    ``ids[n][p]`` is the id of ``seq[p:p+n]`` (ids unique across orders); ``first[id]`` the
    smallest ``p`` it starts at; ``last_tok[id]`` its last token.
    """

    __slots__ = ("first", "ids", "last_tok", "n_ids", "seq")

    def __init__(self, seq: np.ndarray, orders: int) -> None:
        self.seq = seq
        n = seq.shape[0]
        self.ids: list[np.ndarray] = [np.zeros(0, dtype=np.int64)]
        firsts: list[np.ndarray] = []
        base = 0
        prev = np.zeros(n, dtype=np.int64)
        # (id of the prefix, last token) as one int64: prefix ids < n, tokens < width
        width = int(seq.max()) + 1 if n else 1
        for order in range(1, min(orders, n) + 1):
            count = n - order + 1
            key = prev[:count] * width + seq[order - 1 : order - 1 + count]
            _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
            local = inverse.reshape(-1).astype(np.int64)
            self.ids.append(local + base)
            firsts.append(first.astype(np.int64))
            prev = local
            base += int(first.shape[0])
        self.n_ids = base
        self.first = np.concatenate(firsts) if firsts else np.zeros(0, dtype=np.int64)
        self.last_tok = np.zeros(base, dtype=np.int64)
        for order in range(1, len(self.ids)):
            ids = self.ids[order]
            self.last_tok[ids] = seq[order - 1 : order - 1 + ids.shape[0]]

    def gram(self, order: int, start: int) -> int:
        return int(self.ids[order][start])


def _ngram_proposal(index: _Index, total: int, d: Drafter) -> tuple[int, int]:
    """``(start, length)`` in the sequence of the ngram proposal for context ``seq[:total]``."""
    hi = min(d.prompt_lookup_max, total, len(index.ids) - 1)
    for n in range(hi, d.prompt_lookup_min - 1, -1):
        s = int(index.first[index.gram(n, total - n)])
        if s < total - n:
            start = s + n
            return start, min(d.num_speculative_tokens, total - start)
    return 0, 0


class _SuffixCounts:
    """Continuation counts of every string of the context, kept as the context grows.

    ``cnt[child]`` counts the occurrences of an n-gram id inside the context; ``tot[parent]``
    those followed by a token in the context; ``best[parent]`` the child with the highest count
    (ties: the one that reached it last, i.e. whose last occurrence is latest).
    """

    __slots__ = ("best", "best_cnt", "cnt", "index", "orders", "tot", "total")

    def __init__(self, index: _Index, total: int, orders: int) -> None:
        self.index = index
        self.orders = min(orders, len(index.ids) - 1)
        n_ids = index.n_ids
        # int32: ids and counts stay below the sequence length times the orders
        self.cnt = np.zeros(n_ids, dtype=np.int32)
        self.tot = np.zeros(n_ids, dtype=np.int32)
        self.best = np.full(n_ids, -1, dtype=np.int32)
        self.best_cnt = np.zeros(n_ids, dtype=np.int32)
        self.total = total
        # Everything inside the first context at once; later tokens one at a time (below).
        for order in range(1, self.orders):
            m = total - order  # parent at p has its following token at p + order < total
            if m <= 0:
                break
            parent = index.ids[order][:m]
            child = index.ids[order + 1][:m]
            kids, last_rev, counts = np.unique(child[::-1], return_index=True, return_counts=True)
            self.cnt[kids] = counts  # an id has one order: no other order writes here
            pars, par_counts = np.unique(parent, return_counts=True)
            self.tot[pars] = par_counts
            last = m - 1 - last_rev
            par = parent[last]
            order_ = np.lexsort((last, counts, par))  # per parent: highest count, latest last
            par_sorted = par[order_]
            is_end = np.ones(par_sorted.shape[0], dtype=bool)
            is_end[:-1] = par_sorted[1:] != par_sorted[:-1]
            winners = order_[is_end]
            self.best[par[winners]] = kids[winners]
            self.best_cnt[par[winners]] = counts[winners]

    def grow(self, total: int) -> None:
        """Add the context's tokens up to ``seq[:total]``."""
        ids = self.index.ids
        cnt, tot, best, best_cnt = self.cnt, self.tot, self.best, self.best_cnt
        for q in range(self.total, total):
            for order in range(1, min(self.orders - 1, q) + 1):
                p = q - order
                child = int(ids[order + 1][p])
                parent = int(ids[order][p])
                c = cnt[child] + 1
                cnt[child] = c
                tot[parent] += 1
                if c >= best_cnt[parent]:
                    best_cnt[parent] = c
                    best[parent] = child
        self.total = max(self.total, total)

    def propose(self, d: Drafter) -> list[int]:
        index, total = self.index, self.total
        lo, hi = 0, min(d.max_depth, total - 1, self.orders - 1)
        # longest suffix with an earlier occurrence followed by a context token (monotone in m)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if index.first[index.gram(mid, total - mid)] < total - mid:
                lo = mid
            else:
                hi = mid - 1
        m = lo
        if m == 0:
            return []
        limit = min(d.num_speculative_tokens, int(d.spec_factor * m + 1e-9))
        node = index.gram(m, total - m)
        out: list[int] = []
        prob = 1.0
        while len(out) < limit and m + len(out) < self.orders:
            child = int(self.best[node])
            if child < 0 or self.cnt[child] == 0:
                break
            prob *= int(self.best_cnt[node]) / int(self.tot[node])
            if prob < d.min_prob:
                break
            out.append(int(self.index.last_tok[child]))
            node = child
        return out


def _verify(reply: np.ndarray, done: int, proposal: Sequence[int] | np.ndarray) -> int:
    """Draft tokens accepted: the longest prefix of ``proposal`` equal to the reply after
    ``done`` tokens."""
    a = 0
    n = reply.shape[0]
    for tok in proposal:
        if done + a >= n or int(reply[done + a]) != int(tok):
            break
        a += 1
    return a


def _run(
    seq: np.ndarray,
    n_prompt: int,
    n_reply: int,
    d: Drafter,
    index: _Index,
    suffix0: _SuffixCounts | None,
    *,
    reuse: bool,
) -> SpecCounts:
    reply = seq[n_prompt:]
    if n_reply <= 1:
        return SpecCounts(tokens=n_reply)
    steps = drafted = accepted = drafts = 0
    done = 1  # the prefill's token
    counts = None
    if d.kind == "suffix":
        assert suffix0 is not None
        counts = suffix0 if reuse else _copy_counts(suffix0)
    while done < n_reply:
        total = n_prompt + done
        if counts is not None:
            counts.grow(total)
            proposal: Sequence[int] | np.ndarray = counts.propose(d)
        else:
            start, length = _ngram_proposal(index, total, d)
            proposal = seq[start : start + length]
        a = _verify(reply, done, proposal)
        steps += 1
        if len(proposal):
            drafts += 1
            drafted += len(proposal)
        accepted += a
        done += min(a + 1, n_reply - done)
    return SpecCounts(n_reply, steps, drafted, accepted, drafts)


def _copy_counts(c: _SuffixCounts) -> _SuffixCounts:
    new = _SuffixCounts.__new__(_SuffixCounts)
    new.index, new.orders, new.total = c.index, c.orders, c.total
    new.cnt, new.tot = c.cnt.copy(), c.tot.copy()
    new.best, new.best_cnt = c.best.copy(), c.best_cnt.copy()
    return new


def _as_ids(a: np.ndarray | Sequence[int], what: str) -> np.ndarray:
    arr = np.asarray(a, dtype=np.int64).reshape(-1)
    if arr.size and int(arr.min()) < 0:
        raise ValueError(f"{what}: expected token ids >= 0, found {int(arr.min())}")
    return arr


def simulate_many(
    prompt_ids: np.ndarray | Sequence[int],
    reply_ids: np.ndarray | Sequence[int],
    drafters: Sequence[Drafter],
) -> dict[str, SpecCounts]:
    """Simulate several drafters on one recorded reply, indexing the sequence once.

    Args:
        prompt_ids: The prompt's token ids.
        reply_ids: The recorded reply (the first assistant span after the prompt).
        drafters: The settings to simulate.

    Returns:
        ``Drafter.name`` -> counts, in the order of ``drafters``.

    Example:
        >>> out = simulate_many([1, 2, 3, 4], [1, 2, 3, 4], DEFAULT_DRAFTERS)
        >>> {name: c.steps for name, c in out.items()}
        {'ngram[1-3]k4': 1, 'ngram[2-5]k4': 1, 'suffix-k8': 2}
    """
    prompt = _as_ids(prompt_ids, "prompt_ids")
    reply = _as_ids(reply_ids, "reply_ids")
    n_prompt, n_reply = int(prompt.shape[0]), int(reply.shape[0])
    if not drafters:
        return {}
    if n_reply <= 1:
        return {d.name: SpecCounts(tokens=n_reply) for d in drafters}
    seq = np.concatenate([prompt, reply])
    index = _Index(seq, max(d._orders for d in drafters))
    suffix_orders = max((d._orders for d in drafters if d.kind == "suffix"), default=0)
    suffix0 = _SuffixCounts(index, n_prompt + 1, suffix_orders) if suffix_orders else None
    last_suffix = max((i for i, d in enumerate(drafters) if d.kind == "suffix"), default=-1)
    return {
        d.name: _run(seq, n_prompt, n_reply, d, index, suffix0, reuse=i == last_suffix)
        for i, d in enumerate(drafters)
    }


def simulate(
    prompt_ids: np.ndarray | Sequence[int],
    reply_ids: np.ndarray | Sequence[int],
    drafter: Drafter,
) -> SpecCounts:
    """Simulate one drafter on one recorded reply (see the module docstring for the counting).

    Example:
        >>> simulate([7, 8, 9], [1, 2, 3], Drafter("ngram", 4))
        SpecCounts(tokens=3, steps=2, drafted=0, accepted=0, drafts=0)
    """
    return simulate_many(prompt_ids, reply_ids, [drafter])[drafter.name]
