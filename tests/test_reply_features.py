"""The reply features of the pass (records.reply_features) against their definitions, written
out plainly: per reply token, whether the bigram / 4-gram (and the token itself / the trigram)
ending at it occurred earlier in the prompt's last 32k tokens or earlier in the reply; the
reply's distinct tokens; whether a copy predictor (the token after the last earlier occurrence
of the longest context of up to three tokens that occurred earlier) gets the token right, and
the token before it too."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from distprompt import records
from distprompt.records import REPLY_FEATURES, reply_features


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
    return out


ids = st.lists(st.integers(0, 6), max_size=40)


@settings(max_examples=300, deadline=None)
@given(ids, ids.filter(bool))
def test_features_follow_their_definition(prompt: list[int], reply: list[int]) -> None:
    got = reply_features(np.array(prompt, dtype=np.int32), np.array(reply, dtype=np.int32))
    assert got.dtype == np.uint16 and got.shape == (len(REPLY_FEATURES),)
    want = _plain(prompt, reply)
    assert np.allclose(got / 65535, want, atol=1 / 65535)


@settings(max_examples=60, deadline=None)
@given(ids, ids.filter(bool))
def test_the_stable_sort_path_agrees(prompt: list[int], reply: list[int]) -> None:
    # replies too long to pack their positions under the hashes take a stable argsort
    fast = reply_features(np.array(prompt), np.array(reply))
    with pytest.MonkeyPatch.context() as m:
        m.setattr(records, "_POS_BITS", 2)
        m.setattr(records, "_HASH_MASK", np.uint64(~3 & 0xFFFF_FFFF_FFFF_FFFF))
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
