"""The reply features of the pass (replies.reply_features) against their definitions, written
out plainly: per reply token, whether the bigram / 4-gram (and the token itself / the trigram)
ending at it occurred earlier in the prompt's last 32k tokens or earlier in the reply; the
reply's distinct tokens; whether a copy predictor (the token after the last earlier occurrence
of the longest context of up to three tokens that occurred earlier) gets the token right, and
the token before it too; and the steps and drafted tokens of the two n-gram drafters, against
the drafter simulation (evaluate.drafters), which follows vLLM's proposer step by step."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from distprompt import replies
from distprompt.evaluate.drafters import DEFAULT_DRAFTERS, Drafter, simulate_many
from distprompt.records import REPLY_FEATURES
from distprompt.replies import REPLY_DRAFTERS, SUFFIX_LIKE_K, reply_features


def _seen(ctx: list[int], start: int, n: int) -> float:
    """The share of the reply's tokens (ctx[start:]) whose n-gram ending at them occurred
    earlier in ctx."""
    hit = 0
    for t in range(start, len(ctx)):
        if t - n + 1 < 0:
            continue
        gram = ctx[t - n + 1 : t + 1]
        if any(ctx[j - n + 1 : j + 1] == gram for j in range(n - 1, t)):
            hit += 1
    return hit / (len(ctx) - start)


def _plain(prompt: list[int], reply: list[int], tail: int = 32768) -> list[float]:
    ctx = prompt[-tail:] + reply
    start = len(ctx) - len(reply)
    out = [_seen(ctx, start, 2), _seen(ctx, start, 4)]
    out.append(len(set(reply)) / len(reply))
    right = []
    for t in range(start, len(ctx)):
        guess = None
        for n in (3, 2, 1):
            if t - n < 0:
                continue
            context = ctx[t - n : t]
            earlier = [j for j in range(n, t) if ctx[j - n : j] == context]
            if earlier:
                guess = ctx[earlier[-1]]
                break
        right.append(guess == ctx[t])
    out.append(sum(right) / len(reply))
    out.append(sum(a and b for a, b in itertools.pairwise(right)) / len(reply))
    out += [_seen(ctx, start, 1), _seen(ctx, start, 3)]
    # the n-gram drafters, simulated on the prompt's last 32k tokens
    for lo, hi, k in REPLY_DRAFTERS:
        d = Drafter("ngram", k, prompt_lookup_min=lo, prompt_lookup_max=hi)
        c = simulate_many(prompt[-tail:], reply, [d])[d.name]
        out += [c.steps / len(reply), c.drafted / k / len(reply)]
    steps, drafted = _suffix_like(prompt[-tail:], reply)
    return [*out, steps / len(reply), drafted / SUFFIX_LIKE_K / len(reply)]


def _suffix_like(prompt: list[int], reply: list[int]) -> tuple[int, int]:
    """The suffix-decoding-like drafter's verify steps and drafted tokens, by its definition:
    after the prefill's token, at each step the longest suffix of the context of at most 5
    tokens that occurred earlier, its latest earlier occurrence, and the tokens after it (as
    many as the match is long, 8 for a match of 5; fewer when the context ends first)."""
    ctx = prompt + reply
    n_prompt, n = len(prompt), len(reply)
    steps = drafted = 0
    done = 1
    while done < n:
        t = n_prompt + done
        a = 0
        for m in range(5, 0, -1):
            if t - m < 0:
                continue
            ends = [e for e in range(m - 1, t - 1) if ctx[e - m + 1 : e + 1] == ctx[t - m : t]]
            if ends:
                start = ends[-1] + 1
                limit = min(SUFFIX_LIKE_K if m == 5 else m, t - start)
                drafted += limit
                while a < limit and done + a < n and ctx[start + a] == ctx[t + a]:
                    a += 1
                break
        steps += 1
        done += min(a + 1, n - done)
    return steps, drafted


ids = st.lists(st.integers(0, 6), max_size=40)
# replies that copy from the prompt, so long matches and multi-token acceptance occur
copies = st.tuples(ids, ids, st.integers(0, 40), st.integers(0, 40)).map(
    lambda t: (t[0], t[0][t[2] : t[2] + t[3]] + t[1])
)


@settings(max_examples=300, deadline=None)
@given(ids, ids.filter(bool))
def test_features_follow_their_definition(prompt: list[int], reply: list[int]) -> None:
    got = reply_features(np.array(prompt, dtype=np.int32), np.array(reply, dtype=np.int32))
    assert got.dtype == np.uint16 and got.shape == (len(REPLY_FEATURES),)
    want = _plain(prompt, reply)
    assert np.allclose(got / 65535, want, atol=1 / 65535)


@settings(max_examples=300, deadline=None)
@given(copies.filter(lambda pr: bool(pr[1])))
def test_drafter_counts_follow_the_simulation(pair: tuple[list[int], list[int]]) -> None:
    prompt, reply = pair
    got = reply_features(np.array(prompt), np.array(reply))
    assert np.allclose(got / 65535, _plain(prompt, reply), atol=1 / 65535)


def test_the_simulated_drafters_are_the_default_ngram_settings() -> None:
    ngram = [
        (d.prompt_lookup_min, d.prompt_lookup_max, d.num_speculative_tokens)
        for d in DEFAULT_DRAFTERS
        if d.kind == "ngram"
    ]
    assert list(REPLY_DRAFTERS) == ngram
    names = [
        Drafter("ngram", k, prompt_lookup_min=lo, prompt_lookup_max=hi).name
        for lo, hi, k in REPLY_DRAFTERS
    ]
    assert [f for f in REPLY_FEATURES if f.startswith("ngram")] == [
        f"{n}_{what}" for n in names for what in ("steps", "drafted")
    ]


def test_a_long_copy_is_drafted_four_tokens_a_step() -> None:
    # a reply copying 41 prompt tokens: after the prefill token, ngram[1-3]k4 finds the copy
    # and accepts 4 tokens and a bonus each step: 40 tokens in 8 steps, 32 drafted
    prompt = np.arange(100, 141)
    got = reply_features(prompt, prompt.copy())
    i = REPLY_FEATURES.index("ngram[1-3]k4_steps")
    assert (got[i : i + 2] / 65535 * 41).round().tolist() == [8, 32 / 4]


@settings(max_examples=60, deadline=None)
@given(ids, ids.filter(bool))
def test_the_stable_sort_path_agrees(prompt: list[int], reply: list[int]) -> None:
    # replies too long to pack their positions under the hashes take a stable argsort
    fast = reply_features(np.array(prompt), np.array(reply))
    with pytest.MonkeyPatch.context() as m:
        m.setattr(replies, "_POS_BITS", 2)
        m.setattr(replies, "_HASH_MASK", np.uint64(~3 & 0xFFFF_FFFF_FFFF_FFFF))
        slow = reply_features(np.array(prompt), np.array(reply))
    assert fast.tolist() == slow.tolist()


def test_only_the_prompts_last_32k_tokens_are_searched() -> None:
    reply = np.array([900_001, 900_002, 900_003, 900_004])
    far = np.concatenate([reply, np.arange(40_000)])  # the copy is 40k tokens back
    near = np.concatenate([np.arange(40_000), reply])
    assert reply_features(far, reply)[:2].tolist() == [0, 0]
    # 3 of 4 bigrams and 1 of 4 4-grams ending in the reply were seen (the first spans the seam)
    assert reply_features(near, reply)[:2].tolist() == [49151, 16384]


def test_a_measured_reply_never_reads_as_unmeasured() -> None:
    # all 65535 marks a candidate whose reply was not measured (read.scan)
    reply = np.array([7, 8, 9])
    got = reply_features(np.array([1, 7, 8, 9]), reply)
    assert got.tolist() != [65535] * len(REPLY_FEATURES)
    empty = reply_features(np.array([1, 2]), np.array([], dtype=np.int32))
    assert empty.tolist() == [0] * len(REPLY_FEATURES)


def test_a_copied_span_is_predicted_after_its_first_token() -> None:
    # the reply copies 6 prompt tokens: the first has no context seen before (the prompt's
    # last token occurs once); the copy predictor gets the other five, in one run of five
    prompt = np.array([10, 11, 12, 13, 14, 15, 99])
    reply = np.array([10, 11, 12, 13, 14, 15])
    got = reply_features(prompt, reply) / 65535
    assert np.allclose(got[3:5], [5 / 6, 4 / 6], atol=1 / 65535)


@settings(max_examples=100, deadline=None)
@given(st.lists(copies, max_size=8), st.sampled_from([10, 60, 300_000]))
def test_a_batch_measures_each_row_alone(
    pairs: list[tuple[list[int], list[int]]], batch: int
) -> None:
    # rows measured together (several batches when the budget is small) match rows alone
    arrays = [(np.array(p, dtype=np.int64), np.array(r, dtype=np.int64)) for p, r in pairs]
    many = replies.reply_features_many(arrays, batch_tokens=batch)
    assert many.shape == (len(pairs), len(REPLY_FEATURES)) and many.dtype == np.uint16
    for got, (p, r) in zip(many, arrays, strict=True):
        assert got.tolist() == reply_features(p, r).tolist()
        if len(r):
            assert np.allclose(got / 65535, _plain(p.tolist(), r.tolist()), atol=1 / 65535)
