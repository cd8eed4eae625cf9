"""Model-free drafters: exact against naive references, hand-made cases, names, speed shape."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from distprompt.errors import ConfigError
from distprompt.evaluate import DEFAULT_DRAFTERS, Drafter, SpecCounts, simulate, simulate_many


def _vllm_ngram(tokens: list[int], lo: int, hi: int, k: int) -> list[int]:
    """vLLM's ``_find_longest_matched_ngram_and_propose_tokens`` (KMP on the reversed
    context), transcribed step for step, without the ``max_model_len`` cap."""
    total = len(tokens)
    if total < lo:
        return []
    rev = tokens[::-1]
    lps = [0] * hi
    longest = position = prev = 0
    i = 1
    while i < total:
        if rev[prev] == rev[i]:
            prev += 1
            if prev >= longest:
                longest, position = prev, i
            if i < hi:
                lps[i] = prev
            if prev == hi:
                prev = lps[hi - 1]
            i += 1
        elif prev != 0:
            prev = lps[prev - 1]
        else:
            i += 1
    if longest < lo:
        return []
    start = total - 1 - position + longest
    return tokens[start : start + min(k, total - start)]


def _naive_suffix(tokens: list[int], d: Drafter) -> list[int]:
    """Suffix drafter by brute force over every position of the context."""
    total = len(tokens)

    def continuations(s: list[int]) -> tuple[int | None, int, int]:
        counts: dict[int, int] = {}
        best, best_cnt = None, 0
        n = len(s)
        for p in range(total - n):
            if tokens[p : p + n] == s:
                x = tokens[p + n]
                counts[x] = counts.get(x, 0) + 1
                if counts[x] >= best_cnt:
                    best, best_cnt = x, counts[x]
        return best, best_cnt, sum(counts.values())

    m = 0
    for n in range(min(d.max_depth, total - 1), 0, -1):
        if continuations(tokens[total - n :])[0] is not None:
            m = n
            break
    if m == 0:
        return []
    limit = min(d.num_speculative_tokens, int(d.spec_factor * m + 1e-9))
    s = tokens[total - m :]
    out: list[int] = []
    prob = 1.0
    while len(out) < limit:
        x, c, tot = continuations(s)
        if x is None:
            break
        prob *= c / tot
        if prob < d.min_prob:
            break
        out.append(x)
        s = [*s, x]
    return out


def _naive(prompt: list[int], reply: list[int], d: Drafter) -> SpecCounts:
    n = len(reply)
    if n <= 1:
        return SpecCounts(tokens=n)
    done, steps, drafted, accepted, drafts = 1, 0, 0, 0, 0
    while done < n:
        ctx = prompt + reply[:done]
        if d.kind == "ngram":
            prop = _vllm_ngram(
                ctx, d.prompt_lookup_min, d.prompt_lookup_max, d.num_speculative_tokens
            )
        else:
            prop = _naive_suffix(ctx, d)
        a = 0
        while a < len(prop) and done + a < n and prop[a] == reply[done + a]:
            a += 1
        steps += 1
        drafted += len(prop)
        drafts += bool(prop)
        accepted += a
        done += min(a + 1, n - done)
    return SpecCounts(n, steps, drafted, accepted, drafts)


DRAFTERS = [
    *DEFAULT_DRAFTERS,
    Drafter("ngram", 2, prompt_lookup_min=1, prompt_lookup_max=1),
    Drafter("ngram", 5, prompt_lookup_min=2, prompt_lookup_max=2),
    Drafter("suffix", 3, max_depth=3),
    Drafter("suffix", 5, max_depth=2, spec_factor=2.0, min_prob=0.0),
    Drafter("suffix", 4, max_depth=6, spec_factor=0.5, min_prob=0.4),
]

seqs = st.lists(st.integers(0, 3), max_size=40)


@settings(max_examples=300, deadline=None)
@given(prompt=seqs, reply=seqs)
def test_simulation_equals_the_naive_reference(prompt: list[int], reply: list[int]) -> None:
    got = simulate_many(np.array(prompt, dtype=np.int64), np.array(reply), DRAFTERS)
    assert list(got) == [d.name for d in DRAFTERS]
    for d in DRAFTERS:
        assert got[d.name] == _naive(prompt, reply, d), d.name


@settings(max_examples=100, deadline=None)
@given(
    prompt=st.lists(st.integers(0, 1), max_size=30), reply=st.lists(st.integers(0, 1), max_size=30)
)
def test_binary_alphabet_repeats_equal_the_reference(prompt: list[int], reply: list[int]) -> None:
    for d in DRAFTERS:
        assert simulate(prompt, reply, d) == _naive(prompt, reply, d), d.name


@settings(max_examples=200, deadline=None)
@given(prompt=seqs, reply=seqs)
def test_counts_are_consistent(prompt: list[int], reply: list[int]) -> None:
    for c in simulate_many(prompt, reply, DEFAULT_DRAFTERS).values():
        assert c.tokens == len(reply)
        assert 0 <= c.accepted <= c.drafted
        assert c.drafts <= c.steps
        if len(reply) > 1:
            # the prefill's token, then accepted + 1 a step; the last step has no bonus when
            # its drafts reached the reply's end
            assert c.tokens - 1 - c.accepted in (c.steps, c.steps - 1)
        else:
            assert c.steps == 0


def test_vllm_docstring_example() -> None:
    # vLLM's own example: [1,2,3,4,2,3], n in [2,3], k=4 proposes [4,2,3]
    assert _vllm_ngram([1, 2, 3, 4, 2, 3], 2, 3, 4) == [4, 2, 3]
    # the transcription picks the earliest occurrence of the longest match
    assert _vllm_ngram([7, 1, 8, 7, 1, 9, 7, 1], 1, 3, 1) == [8]


def test_copy_of_the_prompt_accepts_nearly_everything() -> None:
    rng = np.random.default_rng(0)
    prompt = rng.integers(0, 50_000, size=2000)
    reply = prompt[500:1500].copy()
    for d in DEFAULT_DRAFTERS:
        c = simulate(prompt, reply, d)
        assert c.acceptance_rate > 0.95, d.name
        k = d.num_speculative_tokens
        assert c.tokens_per_step > 0.95 * (k + 1), d.name


def test_random_reply_accepts_almost_nothing() -> None:
    rng = np.random.default_rng(1)
    prompt = rng.integers(0, 50_000, size=2000)
    reply = rng.integers(0, 50_000, size=1000)
    for d in DEFAULT_DRAFTERS:
        c = simulate(prompt, reply, d)
        assert c.accepted <= 5, d.name
        assert c.steps >= 990


def test_a_repeated_reply_is_learned_from_itself() -> None:
    prompt = np.arange(100, 120)
    reply = np.tile(np.arange(7), 30)  # nothing from the prompt, but the reply repeats
    for d in DEFAULT_DRAFTERS:
        c = simulate(prompt, reply, d)
        assert c.acceptance_rate > 0.8, d.name
        assert c.tokens_per_step > 3, d.name


def test_short_replies() -> None:
    for reply, tokens in (([], 0), ([5], 1)):
        c = simulate([1, 2, 3], reply, Drafter("ngram", 4))
        assert c == SpecCounts(tokens=tokens)
        assert np.isnan(c.tokens_per_step) and np.isnan(c.acceptance_rate)
    assert simulate_many([1], [2], []) == {}


def test_ratios() -> None:
    c = SpecCounts(tokens=10, steps=4, drafted=8, accepted=5, drafts=3)
    assert c.tokens_per_step == 2.5
    assert c.acceptance_rate == 5 / 8
    assert c.accept_length == 1 + 5 / 3
    assert c + c == SpecCounts(20, 8, 16, 10, 6)


@pytest.mark.parametrize(
    ("name", "drafter"),
    [
        ("ngram[1-3]k4", Drafter("ngram", 4)),
        ("ngram[2-5]k7", Drafter("ngram", 7, prompt_lookup_min=2, prompt_lookup_max=5)),
        ("suffix-k8", Drafter("suffix", 8)),
        (
            "suffix-d16-f2-p0.05-k8",
            Drafter("suffix", 8, max_depth=16, spec_factor=2, min_prob=0.05),
        ),
        ("suffix-p0-k3", Drafter("suffix", 3, min_prob=0.0)),
    ],
)
def test_names_round_trip(name: str, drafter: Drafter) -> None:
    assert drafter.name == name
    assert Drafter.parse(name) == drafter


@pytest.mark.parametrize("text", ["ngram", "ngram[3-1]k4", "suffix-k0", "eagle-k4", "suffix-d0-k4"])
def test_bad_names_are_config_errors(text: str) -> None:
    with pytest.raises(ConfigError, match="drafter"):
        Drafter.parse(text)


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ConfigError, match="kind"):
        Drafter("eagle", 4)
    with pytest.raises(ConfigError, match="num_speculative_tokens"):
        Drafter("ngram", 0)
    with pytest.raises(ValueError, match="reply_ids"):
        simulate([1], [-1, 2], Drafter("ngram", 4))


def test_simulate_stays_the_function_after_every_evaluate_module_is_imported() -> None:
    """A submodule named like a package attribute replaces it on import: ``simulate`` must stay
    the function whatever else of ``distprompt.evaluate`` was imported first."""
    import importlib
    import pkgutil

    import distprompt.evaluate as evaluate

    for mod in pkgutil.iter_modules(evaluate.__path__):
        importlib.import_module(f"distprompt.evaluate.{mod.name}")
    assert callable(evaluate.simulate) and evaluate.simulate.__name__ == "simulate"
    assert set(evaluate.__all__).isdisjoint(m.name for m in pkgutil.iter_modules(evaluate.__path__))
