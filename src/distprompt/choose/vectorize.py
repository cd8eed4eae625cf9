"""Features for selection, computed from token ids (no decoding needed).

Each prompt becomes a bag of token unigrams and hashed bigrams, weighted by TF-IDF (sublinear
tf), reduced by truncated SVD (LSA) and L2-normalized. Template markers and boilerplate that every
prompt of a source shares get a low IDF, so what distinguishes prompts dominates. The joint
selection space appends the z-scored log prompt length and, when given, the z-scored log length of
the recorded response (the output length a benchmark asks for), each scaled by ``length_weight``,
and the reply-content block (tokens a lookup of the prompt or the reply so far could draft,
distinct tokens: :func:`distprompt.replies.reply_features`) scaled by ``reply_weight``:
throughput and acceptance depend on both lengths and on what the reply is as much as on the
prompt's content. Shares: prompt content 1, each length ``length_weight`` (1), the reply block
``reply_weight`` (1).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from distprompt._heap import trim_heap

__all__ = ["FEATURE_BUDGET", "Features", "budget_width", "head_tail", "vectorize"]

_BIGRAM_BUCKETS = 1 << 20
#: Scale of the reply-content block in the joint space (content vectors have norm 1, each
#: z-scored log length ``length_weight``). Tuned on the TUNE corpora of benchmarks/RESULTS.md
#: (issue 26): cells where the suite beats 80 % of random samples, at 20 / 50 per source, over
#: suites of three seeds, with the reply features seen2/seen4/distinct and the exact-first
#: calibration: 0.5: 91 / 93 %, 1.0: 91 / 92 %, 2.0: 85 / 92 %, 4.0: 83 / 90 % (1.0 met both
#: of the issue's bars in 41 of 42 corpus x metric cells at 20 per source, 0.5 in 39).
#: Re-checked with the five reply features (lookup, lookup_run added): 0.5: 91 / 92 %,
#: 1.0: 91 / 94 %, 2.0: 84 / 93 %.
REPLY_WEIGHT = 1.0
_SVD_FIT_MAX = 4000  # pools larger than this fit the SVD on a uniform sample of this many
#: Tokens of a pool that make features (see ``vectorize(token_budget=)``).
FEATURE_BUDGET = 3_000_000


@dataclass(frozen=True, slots=True, eq=False)
class Features:
    """Feature matrices for one source's candidates (rows aligned with the candidates).

    Attributes:
        tfidf: Sparse L2-normalized TF-IDF matrix (for near-duplicate checks).
        content: Dense L2-normalized LSA vectors.
        joint: ``content`` with the scaled z-scored log prompt length appended.
        log_length: log of each prompt's token count.
    """

    tfidf: Any
    content: np.ndarray
    joint: np.ndarray
    log_length: np.ndarray


def _counts(docs: Sequence[np.ndarray], vocab_hint: int | None = None) -> Any:
    """Document x feature counts; features seen in a single document only are dropped.

    Such features say nothing about how documents relate (they are most hashed bigrams of a
    long prompt) but dominate the matrix; dropping them (``min_df=2``) keeps the SVD cheap. When
    that would leave nothing (tiny or all-distinct pools), every feature is kept.

    Built in linear time, without a sort: the ids of all documents are laid out feature by
    feature (scipy's CSR to CSC conversion, a counting sort that keeps documents in order), where
    a document's repeats of a feature are adjacent and summed in one pass and the documents of a
    feature are counted directly; the kept features are laid out back by document, which sorts
    each document's features. Unigram and bigram features are apart (ids below ``vocab_hint``,
    then the hashed bigrams), so each kind is laid out on its own.

    ``vocab_hint``: the first bigram column, above every id (default: the largest id + 1).
    """
    from scipy import sparse

    n = len(docs)
    lengths = np.fromiter((len(d) for d in docs), dtype=np.int64, count=n)
    ids = np.concatenate(docs).astype(np.int32, copy=False) if n else np.zeros(0, np.int32)
    if vocab_hint is None:
        vocab_hint = int(ids.max()) + 1 if ids.shape[0] else 1
    # The bigram at every position but the last of each document (in place: one int64 array).
    big = ids[:-1].astype(np.int64)
    big *= 1_000_003
    big += ids[1:]
    big %= _BIGRAM_BUCKETS
    big32 = big.astype(np.int32)
    del big
    ends = np.cumsum(lengths)
    big32 = np.delete(big32, ends[(lengths > 0) & (ends <= big32.shape[0])] - 1)
    by_feature = [_by_feature(lengths, ids, vocab_hint)]
    del ids
    by_feature.append(_by_feature(np.maximum(lengths - 1, 0), big32, _BIGRAM_BUCKETS))
    del big32
    df = np.concatenate([np.diff(m.indptr) for m in by_feature])
    keep = df >= 2
    if not keep.any():
        keep = df >= 1
    n_kept, nnz = int(keep.sum()), int(df[keep].sum())
    # Counts summed in float32 (exact below 2**24) and widened once laid out by document: the
    # largest temporary arrays of selection at half the size.
    indices = np.empty(nnz, dtype=np.int32)
    data = np.empty(nnz, dtype=np.float32)
    at = 0
    for m, kept in zip(by_feature, np.split(keep, [vocab_hint]), strict=True):
        entries = np.repeat(kept, np.diff(m.indptr))
        k = int(np.count_nonzero(entries))
        indices[at : at + k] = m.indices[entries]
        data[at : at + k] = m.data[entries]
        at += k
    del by_feature, entries
    indptr: np.ndarray = np.zeros(max(1, n_kept) + 1, dtype=_index_dtype(nnz))
    np.cumsum(df[keep], out=indptr[1 : n_kept + 1])  # one empty column when nothing is kept
    by_doc = sparse.csc_matrix((data, indices, indptr), shape=(n, max(1, n_kept))).tocsr()
    del indices, data
    return sparse.csr_matrix(
        (by_doc.data.astype(np.float64), by_doc.indices, by_doc.indptr), shape=by_doc.shape
    )


def _by_feature(lengths: np.ndarray, cols: np.ndarray, n_cols: int) -> Any:
    """Counts of ``cols`` (``lengths[i]`` of them for document ``i``, in document order) laid
    out feature by feature: CSC, documents ascending within a feature, repeats summed."""
    from scipy import sparse

    indptr: np.ndarray = np.zeros(lengths.shape[0] + 1, dtype=_index_dtype(cols.shape[0]))
    np.cumsum(lengths, out=indptr[1:])
    by_doc = sparse.csr_matrix(
        (np.ones(cols.shape[0], dtype=np.float32), cols, indptr),
        shape=(lengths.shape[0], n_cols),
    )
    m = by_doc.tocsc()
    del by_doc
    m.sum_duplicates()  # documents already ascending: a linear pass, no sort
    return m


def _index_dtype(nnz: int) -> type:
    """int32 index arrays while they can hold ``nnz``: scipy widens every index array of a
    matrix to the widest one given, and an int64 pointer would double the biggest ones."""
    return np.int32 if nnz < 2**31 else np.int64


def budget_width(tokens: int, n: int, budget: int = FEATURE_BUDGET) -> int | None:
    """The ``w`` of :func:`head_tail` that keeps ``n`` prompts of ``tokens`` tokens in all
    within about ``budget`` tokens of features, or None when they are within it whole.

    Applying it twice changes nothing (``w`` depends on ``n`` and ``budget`` only): a caller
    may cut the prompts as it reads them, and :func:`vectorize` finds them cut.
    """
    if tokens <= budget:
        return None
    return max(16, budget // (2 * n))


def head_tail(p: np.ndarray, w: int) -> np.ndarray:
    """The first and last ``w`` tokens of ``p`` (all of it when it has at most ``2 w``)."""
    return p if len(p) <= 2 * w else np.concatenate([p[:w], p[len(p) - w :]])


def _budget(prompts: Sequence[np.ndarray], budget: int) -> Sequence[np.ndarray]:
    """Each prompt's first and last ``w`` tokens, ``w`` such that the pool's features stay
    within ``budget`` tokens (prompts already within it are kept whole)."""
    w = budget_width(sum(len(p) for p in prompts), len(prompts), budget)
    if w is None:
        return prompts
    return [head_tail(p, w) for p in prompts]


def vectorize(
    prompts: Sequence[np.ndarray],
    *,
    dims: int = 64,
    lengths: Sequence[int] | None = None,
    response_lengths: Sequence[int] | None = None,
    replies: np.ndarray | None = None,
    replied: np.ndarray | None = None,
    length_weight: float = 1.0,
    reply_weight: float = REPLY_WEIGHT,
    seed: int = 0,
    token_budget: int = FEATURE_BUDGET,
) -> Features:
    """TF-IDF/LSA features of token-id sequences, plus the joint selection space.

    Args:
        prompts: Prompt token ids, one array per candidate (or the window of each prompt
            the features are computed from: :func:`distprompt.records.feature_window`).
        dims: LSA dimensions (capped by what the data supports).
        lengths: Prompt lengths (default: the lengths of ``prompts``).
        response_lengths: Recorded output length of each candidate; adds a joint-space column.
        replies: ``(n, len(REPLY_FEATURES))`` reply-content shares of each candidate
            (:func:`distprompt.replies.reply_features`); adds one joint-space block.
        replied: Which rows of ``replies`` were measured: the others get the measured rows'
            mean (no pull either way).
        reply_weight: Scale of the reply block (each z-scored column scaled so that the block's
            expected squared norm is ``reply_weight**2``).
        length_weight: Scale of the z-scored log lengths in the joint space.
        seed: Seeds the randomized SVD.
        token_budget: At most this many tokens of the pool make features: beyond it, each
            prompt contributes its first and last ``budget / (2 n)`` tokens. Bounds the
            matrix (and the memory and time of selection) whatever the pool size.

    Example:
        >>> import numpy as np
        >>> f = vectorize([np.array([1, 2, 3]), np.array([1, 2, 4, 5]), np.array([7, 8])])
        >>> f.joint.shape[0]
        3
    """
    from sklearn.decomposition import TruncatedSVD
    from sklearn.feature_extraction.text import TfidfTransformer
    from sklearn.preprocessing import normalize

    n = len(prompts)
    if lengths is None:
        lengths = [len(p) for p in prompts]
    prompts = _budget(prompts, token_budget)
    counts = _counts(prompts)  # the ids' maximum from their concatenation, not per prompt
    # The temporaries of _counts (tens of MB on a large pool) are mostly freed into the heap,
    # where they stayed resident under the SVD's arrays. Measured on the benchmark corpus
    # (export, one worker): the main process's peak, during the 18k-candidate pool's SVD,
    # 659 -> 603 MB with the counts built by sorting, 667 -> 589 MB with the linear ones.
    trim_heap()
    if n <= _SVD_FIT_MAX:
        tfidf = TfidfTransformer(sublinear_tf=True).fit_transform(counts)
    else:
        tfidf = _tfidf_inplace(counts)
    del counts
    k = min(dims, n - 1, tfidf.shape[1] - 1)
    if k >= 1:
        # Two power iterations are plenty for LSA-grade components and halve the cost of five.
        svd = TruncatedSVD(n_components=k, random_state=seed, algorithm="randomized", n_iter=2)
        # Degenerate pools (all prompts alike) have zero variance: sklearn's explained-variance
        # ratio divides by it; the components themselves are fine.
        with np.errstate(invalid="ignore", divide="ignore"):
            if n <= _SVD_FIT_MAX:
                content = svd.fit_transform(tfidf)
            else:
                # The components of a uniform sample of the pool span the pool as well; fitting
                # on it keeps the cost linear in the pool size.
                rng = np.random.default_rng(seed)
                fit = np.sort(rng.choice(n, _SVD_FIT_MAX, replace=False))
                svd.fit(tfidf[fit])
                content = svd.transform(tfidf)
    else:
        content = np.zeros((n, 1))
    content = normalize(content)
    log_len = np.log(np.maximum(1, np.asarray(lengths, dtype=np.float64)))
    columns = [content, length_weight * _zscore(log_len)[:, None]]
    if response_lengths is not None:
        # Measured on data_samples/ (report, suite vs random): adding the output length cut the
        # response-length KS from 0.33 to 0.24 at 5 items per source and 0.21 to 0.16 at 10, for
        # a coverage cost of about 0.01 in mean distance.
        log_resp = np.log(np.maximum(1, np.asarray(response_lengths, dtype=np.float64)))
        columns.append(length_weight * _zscore(log_resp)[:, None])
    if replies is not None and replies.shape[0] == n and replies.ndim == 2:
        # What the drafter must predict: copies from the prompt, repeats within the reply.
        r = np.asarray(replies, dtype=np.float64).copy()
        seen = np.ones(n, dtype=bool) if replied is None else np.asarray(replied, dtype=bool)
        if seen.any():
            r[~seen] = r[seen].mean(axis=0)
            z = np.column_stack([_zscore(r[:, j]) for j in range(r.shape[1])])
            columns.append(z * (reply_weight / np.sqrt(r.shape[1])))
    joint = np.hstack(columns)
    return Features(tfidf=tfidf, content=content, joint=joint, log_length=log_len)


def _tfidf_inplace(m: Any) -> Any:
    """TfidfTransformer(sublinear_tf=True) computed in the counts matrix itself (large pools:
    no copy of the biggest matrix of the run)."""
    from sklearn.preprocessing import normalize

    n = m.shape[0]
    df = np.bincount(m.indices, minlength=m.shape[1]).astype(np.float64)
    idf = np.log((n + 1) / (df + 1)) + 1.0
    np.log(m.data, out=m.data)
    m.data += 1.0
    m.data *= idf[m.indices]
    return normalize(m, copy=False)


def _zscore(v: np.ndarray) -> np.ndarray:
    sd = float(v.std())
    return (v - v.mean()) / sd if sd > 0 else np.zeros_like(v)
