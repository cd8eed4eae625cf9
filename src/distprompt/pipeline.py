"""The only module that wires the stages together: shards → pass → quotas → select → items."""

from __future__ import annotations

import hashlib
import logging
import os
import platform
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from distprompt._version import __version__
from distprompt.config import Config
from distprompt.decode import TokenizerInfo, decode, load_tokenizer
from distprompt.errors import InputError, TokenizerError
from distprompt.metrics import SourceEvidence, measure_source
from distprompt.records import Candidate, SuiteItem
from distprompt.report import build_report
from distprompt.sample import Partial, SourceStats, histogram_quantiles, load_candidates, scan
from distprompt.select import select
from distprompt.shards import Shard, discover_shards
from distprompt.stratify import Quota, allocate
from distprompt.suite import Suite
from distprompt.vectorize import vectorize

__all__ = ["build_suite", "item_id"]

logger = logging.getLogger("distprompt.pipeline")

#: Out-of-vocabulary rows above this share mean the tokenizer is not the data's, even when skipping.
OOV_MISMATCH_SHARE = 0.01


def item_id(source: str, prompt_ids: Sequence[int] | np.ndarray) -> str:
    """Stable item id: a hash of the source and the prompt ids (independent of the seed)."""
    h = hashlib.blake2b(digest_size=8)
    h.update(source.encode("utf-8") + b"\x00")
    h.update(np.ascontiguousarray(prompt_ids, dtype="<i8").tobytes())
    return f"{_slug(source)}-{h.hexdigest()}"


def _slug(s: str) -> str:
    out = "".join(c if c.isalnum() or c in "-_" else "_" for c in s)
    return out[:40] or "source"


def build_suite(
    data: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    *,
    tokenizer: Any,
    per_source: int | None = 50,
    total: int | None = None,
    allocation: str = "proportional",
    min_per_source: int = 0,
    max_candidates: int = 20000,
    seed: int = 0,
    on_error: str = "raise",
    method: str = "herding",
    max_output_tokens: int | None = None,
    near_duplicate: float = 0.95,
    workers: int = 1,
    engine: str = "local",
    ray_address: str | None = None,
    recover_turns: bool = True,
    progress: bool = False,
    warn: Callable[[str], None] | None = None,
) -> Suite:
    """Build a representative, provenance-stamped prompt suite from tokenized shards.

    Args:
        data: A directory (searched recursively), a glob, a shard file, or a list of those.
        tokenizer: Local tokenizer folder, ``tokenizer.json``, hub id, or a loaded tokenizer.
        per_source: Items from every source. Ignored (set to None) when ``total`` is given.
        total: Total items, split between sources by ``allocation``.
        allocation: ``proportional`` (to rows), ``sqrt`` or ``equal``; with ``total``.
        min_per_source: Floor per source; with ``total``.
        max_candidates: Unique prompts kept per source for selection (bounds memory).
        seed: Seeds every random choice; same input and seed give byte-identical output.
        on_error: ``raise`` at the first bad row, or ``skip`` bad rows and count them by reason.
        method: ``herding`` (default), ``kmedoids`` or ``random``.
        max_output_tokens: Cap on each item's ``max_tokens``.
        near_duplicate: TF-IDF cosine at which two prompts count as near-duplicates.
        workers: Processes reading shards in parallel (does not change the result).
        engine: ``local`` (this machine) or ``ray`` (Ray tasks, one per shard; needs
            ``pip install 'distprompt[ray]'``); does not change the result.
        ray_address: The Ray cluster for ``engine="ray"``; None starts or joins a Ray on this
            machine (see :func:`distprompt.engine.connect_ray`).
        recover_turns: Recover chat ``messages`` and check fidelity (needs a chat template).
        progress: Show progress bars on stderr.
        warn: Called with each warning as it arises (the CLI prints them).

    Returns:
        The :class:`Suite`.

    Raises:
        ConfigError: Invalid options (before any shard is read).
        InputError: DATA has no readable shard.
        DataError: A bad row, when ``on_error="raise"``.
        TokenizerError: The tokenizer cannot be loaded or does not match the data.

    Example:
        >>> from distprompt import build_suite
        >>> suite = build_suite("prepared/", tokenizer="tok/", per_source=5)  # doctest: +SKIP
        >>> suite.save("out")  # doctest: +SKIP
    """
    if total is not None:
        per_source = None
    config = Config(
        per_source=per_source,
        total=total,
        allocation=allocation,
        min_per_source=min_per_source,
        max_candidates=max_candidates,
        seed=seed,
        on_error=on_error,
        method=method,
        max_output_tokens=max_output_tokens,
        near_duplicate=near_duplicate,
        workers=workers,
        recover_turns=recover_turns,
        engine=engine,
        ray_address=ray_address,
    )
    warnings: list[str] = []

    def _warn(msg: str) -> None:
        warnings.append(msg)
        logger.warning("%s", msg)
        if warn is not None:
            warn(msg)

    skip = config.on_error == "skip"
    scan_kw: dict[str, Any] = {
        "max_candidates": config.max_candidates,
        "seed": config.seed,
        "skip_bad_rows": skip,
        "workers": config.workers,
        "progress": progress,
        "engine": config.engine,
        "ray_address": config.ray_address,
    }
    guess = quick_vocab_size(tokenizer)
    part: Partial | None
    if guess is None:
        tok, tinfo = load_tokenizer(tokenizer)
        shards = discover_shards(data, warn=_warn)
        part = scan(shards, vocab_size=tinfo.vocab_size, tokenizer_name=tinfo.name, **scan_kw)
    else:
        # Read the shards in worker processes while this one loads the tokenizer (seconds of
        # imports and parsing); the pass checks ids against the vocabulary size read off
        # tokenizer.json, and runs again in the rare case the loaded tokenizer disagrees.
        try:
            shards = discover_shards(data, warn=_warn)
        except InputError:
            load_tokenizer(tokenizer)  # a bad tokenizer is reported first, as always
            raise
        loader = _Loader(tokenizer)
        overlap = sum(s.size for s in shards) >= _OVERLAP_BYTES
        if not overlap:
            loader.result()  # loaded first: a bad tokenizer stops the run before any read
        try:
            part = scan(
                shards,
                vocab_size=guess,
                tokenizer_name=str(tokenizer),
                processes=overlap or None,
                on_started=loader.start if overlap else None,
                **scan_kw,
            )
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:
            err = loader.join()  # a bad tokenizer is reported first, as always
            if err is not None:
                raise err from None
            assert loader.value is not None
            if not isinstance(exc, TokenizerError) or loader.value[1].vocab_size == guess:
                raise
            part = None  # ids beyond the guessed vocabulary: judge them by the real one
        tok, tinfo = loader.result()
        if part is None or tinfo.vocab_size != guess:
            part = scan(shards, vocab_size=tinfo.vocab_size, tokenizer_name=tinfo.name, **scan_kw)
    assert part is not None
    for name, why in sorted(part.failed.items()):
        _warn(f"{name}: left out (--on-error skip): {why}")
    _check_vocab(part, tinfo)
    if part.skipped:
        total_skipped = sum(part.skipped.values())
        detail = ", ".join(
            f"{r}: {n} (first at {part.first_skip.get(r, '?')})"
            for r, n in sorted(part.skipped.items())
        )
        _warn(f"skipped {total_skipped} bad rows — {detail}")
    if not part.stats:
        # An empty suite would look like a finished export; refuse before anything is written.
        why = f"{sum(part.skipped.values())} bad rows skipped" if part.skipped else "no rows"
        raise InputError(
            f"{data}: expected at least one valid row in {len(shards)} shard(s), found none "
            f"({why}); check DATA and the bad-row counts"
        )

    rows = {s: st.rows for s, st in part.stats.items()}
    available = {s: len(part.pools[s]) for s in part.stats}
    quotas = allocate(
        rows,
        available,
        per_source=config.per_source,
        total=config.total,
        allocation=config.allocation,
        min_per_source=config.min_per_source,
    )
    for q in quotas.values():
        if q.shortfall > 0:
            _warn(
                f"source {q.source!r}: quota {q.target} but only {q.granted} unique prompts; "
                f"it gives all it has ({q.shortfall} short)"
            )

    profile = None
    if config.recover_turns:
        profile = _learn_profile(tok, tinfo, _warn)

    picks: list[_Pick] = []
    selected_counts: dict[str, int] = {}
    evidence: dict[str, SourceEvidence | None] = {}
    for source in sorted(part.stats):
        cands = part.pools[source].candidates()
        chosen, evidence[source] = _select_source(cands, quotas[source], config, part.stats[source])
        loaded = load_candidates([c for c, _, _ in chosen], shards, seed=config.seed)
        chosen = [(c, size, w) for c, (_, size, w) in zip(loaded, chosen, strict=True)]
        selected_counts[source] = len(chosen)
        picks.extend(
            (cand, cluster, size, weight) for cluster, (cand, size, weight) in enumerate(chosen)
        )
    items = _make_items(picks, tokenizer=tok, profile=profile, config=config, warn=_warn)

    manifest = _manifest(
        config, tinfo, shards, part, quotas, selected_counts, items, warnings, data=data
    )
    manifest["template"] = _template_summary(profile)
    manifest["fidelity_issues"] = [
        {"id": it.id, "source": it.source, "fidelity": it.fidelity, "reason": it.fidelity_reason}
        for it in items
        if it.fidelity not in (None, "tokens")
    ]
    report = build_report(
        evidence,
        stats=part.stats,
        quotas=quotas,
        items=items,
        meta={"method": config.method, "seed": config.seed},
    )
    return Suite(items, manifest, report=report)


#: Corpora smaller than this are read in this process, after the tokenizer is loaded.
_OVERLAP_BYTES = 64 << 20


class _Loader:
    """Loads the tokenizer, in a thread while the pass runs in worker processes."""

    def __init__(self, spec: Any) -> None:
        self.spec = spec
        self.value: tuple[Any, TokenizerInfo] | None = None
        self.error: BaseException | None = None
        self.thread: threading.Thread | None = None

    def run(self, *, warm: bool = False) -> None:
        try:
            self.value = load_tokenizer(self.spec)
        except BaseException as exc:  # handed to the caller by result()
            self.error = exc
            return
        if warm:  # what selection and the report import, while the pass still runs
            try:
                import matplotlib

                matplotlib.use("Agg", force=False)
                import matplotlib.pyplot
                import scipy.sparse  # noqa: F401
                import sklearn.cluster
                import sklearn.decomposition
                import sklearn.feature_extraction.text  # noqa: F401
            except Exception:  # imported again (and reported) where they are used
                pass

    def start(self) -> None:
        self.thread = threading.Thread(
            target=self.run, kwargs={"warm": True}, name="distprompt-tokenizer", daemon=True
        )
        self.thread.start()

    def join(self) -> BaseException | None:
        if self.thread is None and self.value is None and self.error is None:
            self.run()  # the pass failed before it started the thread
        if self.thread is not None:
            self.thread.join()
        return self.error

    def result(self) -> tuple[Any, TokenizerInfo]:
        self.join()
        if self.error is not None:
            raise self.error
        assert self.value is not None
        return self.value


def quick_vocab_size(spec: Any) -> int | None:
    """The vocabulary size (largest id + 1, added tokens included) read off a local
    ``tokenizer.json`` without loading the tokenizer; None when there is none to read."""
    if not isinstance(spec, (str, os.PathLike)) or not str(spec).strip():
        return None
    path = Path(spec).expanduser()
    tj = path / "tokenizer.json" if path.is_dir() else path
    if not tj.is_file() or tj.suffix != ".json":
        return None
    try:
        import orjson

        data = orjson.loads(tj.read_bytes())
        vocab = data["model"]["vocab"]
        ids = list(vocab.values()) if isinstance(vocab, dict) else [len(vocab) - 1]
        ids += [int(t["id"]) for t in data.get("added_tokens") or []]
        return max(ids) + 1 if ids else None
    except Exception:  # anything unusual: load the tokenizer first instead
        return None


def _template_summary(profile: Any) -> dict[str, Any] | None:
    """What turn recovery learned from the chat template, for the manifest."""
    if profile is None:
        return None
    return {
        "sha256": profile.template_sha256,
        "generation_prompt": profile.generation_prompt,
        "role_markers": dict(sorted(profile.role_markers().items())),
        "template_adds_bos": profile.template_adds_bos,
        "supports_system": profile.supports_system,
        "supports_tools": profile.supports_tools,
        "supports_tool_calls": profile.supports_tool_calls,
        # A template that drops earlier reasoning cannot round-trip such prompts by design.
        "drops_earlier_reasoning": profile.drops_earlier_reasoning,
        "failed_probes": sorted(profile.failed_probes),
    }


def _check_vocab(part: Partial, tinfo: TokenizerInfo) -> None:
    bad = part.skipped.get("id_out_of_vocab", 0)
    kept = sum(st.rows for st in part.stats.values())
    if bad and bad > OOV_MISMATCH_SHARE * (bad + kept):
        raise TokenizerError(
            f"{part.first_skip.get('id_out_of_vocab', '?')}: expected token ids below "
            f"{tinfo.vocab_size} (the vocabulary of tokenizer {tinfo.name!r}), found {bad} of "
            f"{bad + kept} rows with larger ids; the data was made with another tokenizer — "
            "pass the matching --tokenizer"
        )


def _learn_profile(tok: Any, tinfo: TokenizerInfo, warn: Callable[[str], None]) -> Any:
    if not tinfo.has_chat_template:
        warn(f"tokenizer {tinfo.name!r} has no chat template: messages are not recovered")
        return None
    from distprompt.errors import TemplateError
    from distprompt.turns import learn_template

    try:
        return learn_template(tok)
    except TemplateError as exc:
        warn(f"chat template not usable for turn recovery: {exc}")
        return None


def _select_source(
    cands: list[Candidate], quota: Quota, config: Config, stats: SourceStats
) -> tuple[list[tuple[Candidate, int, float]], SourceEvidence | None]:
    """The source's representatives ``(candidate, cluster size, weight)`` and the report's
    measurements of them (taken here, where pool, features and selection are at hand)."""
    k = quota.granted
    if k <= 0 or not cands:
        return [], None
    if k >= len(cands):
        n = len(cands)
        every = [(c, 1, 1.0 / n) for c in cands]
        ev = measure_source(cands, range(n), [1.0 / n] * n, stats=stats, seed=config.seed)
        return every, ev
    feats = vectorize(
        [c.feature_ids for c in cands],
        lengths=[c.n_prompt_tokens for c in cands],
        response_lengths=[c.first_response_length for c in cands],
        dims=config.lsa_dims,
        length_weight=config.length_weight,
        seed=config.seed,
    )
    sel = select(
        feats, k, method=config.method, seed=config.seed, near_duplicate=config.near_duplicate
    )
    chosen = [(cands[i], sel.sizes[j], sel.weights[j]) for j, i in enumerate(sel.indices)]
    ev = measure_source(
        cands,
        sel.indices,
        sel.weights,
        stats=stats,
        content=feats.content,
        log_length=feats.log_length,
        labels=sel.labels,
        seed=config.seed,
    )
    return chosen, ev


#: A selected candidate and its cluster index, cluster size and weight.
_Pick = tuple[Candidate, int, int, float]


def _make_batch(picks: Sequence[_Pick], shared: tuple[Any, Any, Config]) -> list[SuiteItem]:
    tokenizer, profile, config = shared
    return [
        _make_item(
            cand,
            cluster=cluster,
            size=size,
            weight=weight,
            tokenizer=tokenizer,
            profile=profile,
            config=config,
        )
        for cand, cluster, size, weight in picks
    ]


def _make_items(
    picks: list[_Pick],
    *,
    tokenizer: Any,
    profile: Any,
    config: Config,
    warn: Callable[[str], None],
) -> list[SuiteItem]:
    """Decode the picks (and recover their turns) here, or with ``engine="ray"`` as one Ray task
    per CPU of the cluster over consecutive picks, in order: the same items either way."""
    shared = (tokenizer, profile, config)
    if config.engine != "ray" or len(picks) < 2:
        return _make_batch(picks, shared)
    import contextlib

    from distprompt.engine import UnitFailure, connect_ray, ray_map

    ray = connect_ray(config.ray_address)
    n = max(1, min(len(picks), int(ray.cluster_resources().get("CPU", 1))))
    step = -(-len(picks) // n)
    batches = [picks[i : i + step] for i in range(0, len(picks), step)]
    names = [f"items {i + 1}-{min(i + step, len(picks))}" for i in range(0, len(picks), step)]
    items: list[SuiteItem] = []
    results = ray_map(_make_batch, batches, names=names, address=config.ray_address, shared=shared)
    with contextlib.closing(results):
        for batch, res in zip(batches, results, strict=True):
            if isinstance(res, UnitFailure):
                warn(
                    f"decoding {res.name} on Ray failed {res.attempts} times ({res.reason}); "
                    "decoded on the driver instead"
                )
                res = _make_batch(batch, shared)
            items.extend(res)
    return items


def _make_item(
    cand: Candidate,
    *,
    cluster: int,
    size: int,
    weight: float,
    tokenizer: Any,
    profile: Any,
    config: Config,
) -> SuiteItem:
    assert cand.prompt_ids is not None and cand.prompt_mask is not None
    assert cand.response_ids is not None
    prompt_ids = [int(i) for i in cand.prompt_ids]
    max_tokens = max(1, int(cand.response_ids.shape[0]))
    if config.max_output_tokens is not None:
        max_tokens = min(max_tokens, config.max_output_tokens)
    messages = tools = None
    fidelity = reason = None
    template_kwargs = None
    if profile is not None:
        from distprompt.turns import recover_turns

        rec = recover_turns(
            prompt_ids,
            tokenizer=tokenizer,
            profile=profile,
            loss_mask=[int(m) for m in cand.prompt_mask],
        )
        messages, tools, fidelity, reason = rec.messages, rec.tools, rec.fidelity, rec.reason
        template_kwargs = rec.chat_template_kwargs
    return SuiteItem(
        id=item_id(cand.source, cand.prompt_ids),
        source=cand.source,
        prompt=decode(tokenizer, prompt_ids),
        n_prompt_tokens=cand.n_prompt_tokens,
        n_response_tokens=cand.n_response_tokens,
        max_tokens=max_tokens,
        cluster=cluster,
        cluster_size=size,
        weight=round(weight, 12),
        provenance=cand.provenance,
        prompt_ids=tuple(prompt_ids),
        response=decode(tokenizer, cand.response_ids, keep_special=False),
        duplicates=cand.count,
        messages=messages,
        tools=tools,
        fidelity=fidelity,
        fidelity_reason=reason,
        chat_template_kwargs=template_kwargs,
    )


def _quantiles(counter: Any) -> dict[str, int]:
    qs = histogram_quantiles(counter, (0.0, 0.5, 0.9, 0.99, 1.0))
    return dict(zip(("min", "p50", "p90", "p99", "max"), qs, strict=False))


def _manifest(
    config: Config,
    tinfo: TokenizerInfo,
    shards: Sequence[Shard],
    part: Partial,
    quotas: dict[str, Quota],
    selected: dict[str, int],
    items: Sequence[SuiteItem],
    warnings: list[str],
    *,
    data: Any,
) -> dict[str, Any]:
    import sklearn
    import tokenizers
    import transformers

    fp = hashlib.sha256()
    for s in shards:
        fp.update(f"{s.name}\x00{s.size}\n".encode())
    sources: dict[str, Any] = {}
    for src in sorted(part.stats):
        st = part.stats[src]
        unique, exact = part.pools[src].distinct()
        fid: dict[str, int] = {}
        for it in items:
            if it.source == src and it.fidelity is not None:
                fid[it.fidelity] = fid.get(it.fidelity, 0) + 1
        sources[src] = {
            "rows": st.rows,
            "unique_prompts": unique,
            "unique_exact": exact,
            "duplicate_rows": max(0, st.rows - unique),
            "candidates": len(part.pools[src]),
            "target": quotas[src].target,
            "selected": selected.get(src, 0),
            "prompt_tokens": _quantiles(st.prompt_lengths),
            "response_tokens": _quantiles(st.response_lengths),
            "fidelity": dict(sorted(fid.items())),
        }
    data_spec = sorted(str(d) for d in data) if isinstance(data, (list, tuple)) else str(data)
    cfg = config.to_dict()
    for how in ("workers", "engine", "ray_address"):
        cfg.pop(how)  # how the pass ran, not what it computed
    return {
        "distprompt_version": __version__,
        "versions": {
            "python": platform.python_version(),
            "numpy": np.__version__,
            "scikit-learn": sklearn.__version__,
            "tokenizers": tokenizers.__version__,
            "transformers": transformers.__version__,
        },
        "config": cfg,
        "data": data_spec,
        "tokenizer": tinfo.to_dict(),
        "corpus": {
            "fingerprint": fp.hexdigest(),
            "shards": [
                {"name": s.name, "bytes": s.size, "rows": part.shard_rows.get(s.name, 0)}
                for s in shards
            ],
        },
        "counts": {
            "rows": sum(st.rows for st in part.stats.values()),
            "items": len(items),
            "skipped": dict(sorted(part.skipped.items())),
            "first_skipped": dict(sorted(part.first_skip.items())),
            "anomalies": dict(sorted(part.anomalies.items())),
            # Only when some shard was left out: a complete run's manifest does not change.
            **({"failed_shards": dict(sorted(part.failed.items()))} if part.failed else {}),
        },
        "sources": sources,
        "warnings": list(warnings),
    }
