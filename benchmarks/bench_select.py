"""Selection at pool scale: distprompt (TF-IDF/LSA + kernel herding) against a uniform random
sample of the same size, on time and on what the suite is for (coverage and length fidelity).

Builds a pool of ``--pool`` unique prompts by perturbing the prompts of ``data_samples/`` (a few
token ids changed per copy, so every prompt is unique and near-duplicates abound), then picks
``--k`` of them both ways, in the same run. Prints seconds, mean distance from each candidate to
its nearest pick (lower covers better) and the KS statistic of prompt length (lower matches
better), and the ratios distprompt / random.

Usage: python benchmarks/bench_select.py [--pool 20000] [--k 50]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]


def pool(n: int, seed: int = 0) -> list[np.ndarray]:
    prompts = []
    for shard in sorted((REPO / "data_samples" / "prepared").glob("*/tokenized_data.jsonl")):
        with open(shard) as fh:
            for line in fh:
                r = json.loads(line)
                prompts.append(np.array(r["input_ids"][: r["n_prompt_tokens"]], dtype=np.int64))
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        p = prompts[i % len(prompts)].copy()
        j = rng.integers(0, len(p), size=5)
        p[j] = rng.integers(0, 150_000, size=5)
        out.append(p)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pool", type=int, default=20000)
    ap.add_argument("--k", type=int, default=50)
    a = ap.parse_args()

    from distprompt.choose.select import select
    from distprompt.choose.vectorize import vectorize
    from distprompt.write.metrics import ks_statistic, mean_nearest_distance, reference_space

    docs = pool(a.pool)
    lengths = np.array([len(d) for d in docs])
    # As in export: scikit-learn and scipy imported while the pass runs, selection on one
    # BLAS thread (distprompt.engine.threads.one_thread).
    import sklearn.decomposition
    import sklearn.feature_extraction.text  # noqa: F401
    from threadpoolctl import threadpool_limits

    t = time.perf_counter()
    with threadpool_limits(limits=1):
        feats = vectorize(docs)
        sel = select(feats, a.k, method="herding")
    t_dp = time.perf_counter() - t
    t = time.perf_counter()
    rnd = np.random.default_rng(0).choice(len(docs), size=a.k, replace=False)
    t_rnd = time.perf_counter() - t

    space = reference_space(feats.content, feats.log_length)
    corpus = {int(v): int(c) for v, c in zip(*np.unique(lengths, return_counts=True), strict=True)}
    res = {}
    for name, idx in (("distprompt", list(sel.indices)), ("random", rnd.tolist())):
        res[name] = (
            mean_nearest_distance(space, idx),
            ks_statistic(lengths[idx].tolist(), corpus),
        )
    print(f"pool {a.pool} unique prompts (mean {lengths.mean():.0f} tokens), k={a.k}")
    print(
        f"distprompt: {t_dp:.1f} s, mean distance {res['distprompt'][0]:.3f}, "
        f"length KS {res['distprompt'][1]:.3f}"
    )
    print(
        f"    random: {t_rnd:.3f} s, mean distance {res['random'][0]:.3f}, "
        f"length KS {res['random'][1]:.3f}"
    )
    print(
        f"ratio distprompt/random: mean distance {res['distprompt'][0] / res['random'][0]:.2f}, "
        f"length KS {res['distprompt'][1] / max(res['random'][1], 1e-9):.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
