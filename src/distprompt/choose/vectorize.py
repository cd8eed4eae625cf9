"""Features for selection, computed from token ids (no decoding needed).

Each prompt becomes a bag of token unigrams and hashed bigrams, weighted by TF-IDF (sublinear
tf), reduced by truncated SVD (LSA) and L2-normalized. Template markers and boilerplate that every
prompt of a source shares get a low IDF, so what distinguishes prompts dominates. The joint
selection space appends the z-scored log prompt length and, when given, the z-scored log length of
the recorded response (the output length a benchmark asks for), each scaled by ``length_weight``:
throughput and acceptance depend on both lengths as much as on content.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["FEATURE_BUDGET", "Features", "vectorize"]

_BIGRAM_BUCKETS = 1 << 20
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


def _counts(docs: Sequence[np.ndarray], vocab_hint: int) -> Any:
    """Document x feature counts; features seen in a single document only are dropped.

    Such features say nothing about how documents relate (they are most hashed bigrams of a
    long prompt) but dominate the matrix; dropping them (``min_df=2``) keeps the SVD cheap. When
    that would leave nothing (tiny or all-distinct pools), every feature is kept.
    """
    from scipy import sparse

    n_cols = vocab_hint + _BIGRAM_BUCKETS
    lengths = np.zeros(len(docs) + 1, dtype=np.int64)
    cols: list[np.ndarray] = []
    for i, ids in enumerate(docs):
        a = np.asarray(ids, dtype=np.int64)
        if a.shape[0] > 1:
            bi = vocab_hint + ((a[:-1] * 1_000_003 + a[1:]) % _BIGRAM_BUCKETS)
            a = np.concatenate([a, bi])
        cols.append(a.astype(np.int32))  # column ids < 2**31: half the memory of int64
        lengths[i + 1] = a.shape[0]
    c = np.concatenate(cols) if cols else np.zeros(0, dtype=np.int32)
    del cols
    # Counts summed in float32 (exact below 2**24) and widened once compacted: the largest
    # temporary arrays of selection at half the size.
    m = sparse.csr_matrix(
        (np.ones(c.shape[0], dtype=np.float32), c, np.cumsum(lengths)),
        shape=(len(docs), n_cols),
    )
    del c
    m.sum_duplicates()
    # Compact the column space in linear time (no sort of all features).
    df = np.bincount(m.indices, minlength=n_cols)
    keep = df >= 2
    if not keep.any():
        keep = df >= 1
    remap = (np.cumsum(keep) - 1).astype(np.int32)
    mask = keep[m.indices]
    kept_before = np.zeros(
        mask.shape[0] + 1, dtype=np.int64 if mask.shape[0] >= 2**31 else np.int32
    )
    np.cumsum(mask, out=kept_before[1:])
    indptr = kept_before[m.indptr]
    del kept_before
    data = m.data[mask].astype(np.float64)
    indices = remap[m.indices[mask]]
    del m, mask
    return sparse.csr_matrix((data, indices, indptr), shape=(len(docs), max(1, int(keep.sum()))))


def _budget(prompts: Sequence[np.ndarray], budget: int) -> Sequence[np.ndarray]:
    """Each prompt's first and last ``w`` tokens, ``w`` such that the pool's features stay
    within ``budget`` tokens (prompts already within it are kept whole)."""
    total = sum(len(p) for p in prompts)
    if total <= budget:
        return prompts
    w = max(16, budget // (2 * len(prompts)))
    return [p if len(p) <= 2 * w else np.concatenate([p[:w], p[len(p) - w :]]) for p in prompts]


def vectorize(
    prompts: Sequence[np.ndarray],
    *,
    dims: int = 64,
    lengths: Sequence[int] | None = None,
    response_lengths: Sequence[int] | None = None,
    length_weight: float = 1.0,
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
    vocab_hint = int(max((int(p.max()) for p in prompts if len(p)), default=0)) + 1
    counts = _counts(prompts, vocab_hint)
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
