"""``manifest.json``: what an export read, checked, chose and wrote (:func:`build_manifest`)."""

from __future__ import annotations

import hashlib
import platform
from collections.abc import Sequence
from typing import Any

import numpy as np

from distprompt._version import __version__
from distprompt.choose.stratify import Quota
from distprompt.config import Config
from distprompt.manifest import (
    CheckEntry,
    CorpusEntry,
    Counts,
    Design,
    FidelityIssue,
    Manifest,
    ManifestTokenizer,
    Quantiles,
    Residual,
    ShardEntry,
    SourceEntry,
    TokenizerCheck,
)
from distprompt.read.scan import Partial
from distprompt.records import Shard, SourceStats, SuiteItem, histogram_quantiles
from distprompt.recover.checks import TokenizerFigures
from distprompt.recover.decode import TokenizerInfo

__all__ = [
    "MARKER_FLAGS",
    "build_manifest",
    "design_summary",
    "template_summary",
    "tokenizer_check",
]

#: Flags of the marker check: reported under ``tokenizer_check``, not as schema anomalies.
MARKER_FLAGS = frozenset({"template_start_missing", "generation_prompt_missing"})


def template_summary(profile: Any) -> dict[str, Any] | None:
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
        "arguments_style": profile.arguments_style,
        # A template that drops earlier reasoning cannot round-trip such prompts by design.
        "drops_earlier_reasoning": profile.drops_earlier_reasoning,
        "switches": sorted(
            {k for _, _, kw in profile.generation_variants for k, _ in kw}
            | {k for kw, _ in profile.switch_tables for k, _ in kw}
        ),
        # Each probe once, with its final outcome (a probe retried with string arguments that
        # then rendered is `ok`); failed_probes are the ones refused in every form.
        "probes": dict(profile.probes),
        "failed_probes": sorted(profile.failed_probes),
    }


def _quantiles(counter: Any) -> Quantiles:
    return Quantiles.of(histogram_quantiles(counter, (0.0, 0.5, 0.9, 0.99, 1.0)))


def design_summary(items: Sequence[SuiteItem], st: SourceStats) -> Design:
    """The source's sampling design as written: items per stratum, the take-all rows, and how
    far the weighted totals are from the corpus's (``(weighted - corpus) / corpus``; the first
    reply as the items' recorded length, before any ``max_output_tokens`` cap)."""
    strata: dict[str, int] = {}
    weights: dict[str, float] = {}
    for it in items:
        name = it.stratum or "none"
        strata[name] = strata.get(name, 0) + 1
        weights[name] = weights.get(name, 0.0) + it.weight

    def first(it: SuiteItem) -> int:
        return len(it.response_ids) if it.response_ids is not None else it.max_tokens

    def gap(got: float, want: float) -> float | None:
        return round((got - want) / want, 6) + 0.0 if want else None

    return Design(
        strata=dict(sorted(strata.items())),
        rows_represented={k: round(v, 3) for k, v in sorted(weights.items())},
        take_all=tuple(
            f"{it.provenance.shard}:{it.provenance.line}"
            for it in items
            if it.stratum == "take-all"
        ),
        # the share of the source's first-reply tokens the take-all rows hold
        take_all_reply_share=round(
            sum(it.weight * first(it) for it in items if it.stratum == "take-all")
            / st.first_reply_tokens,
            6,
        )
        if st.first_reply_tokens
        else None,
        residual=Residual(
            rows=gap(sum(it.weight for it in items), st.rows),
            prompt_tokens=gap(
                sum(it.weight * it.n_prompt_tokens for it in items), st.prompt_tokens
            ),
            first_reply_tokens=gap(
                sum(it.weight * first(it) for it in items), st.first_reply_tokens
            ),
        ),
    )


def build_manifest(
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
    ignored: Sequence[str] = (),
    verdict: TokenizerFigures | None = None,
    profile: Any = None,
) -> Manifest:
    """``manifest.json``'s content: versions, options, DATA's fingerprint and counts, the
    tokenizer check, the sources' design, warnings, the learned template (``profile``) and the
    items that are not token-exact."""
    import sklearn
    import tokenizers
    import transformers

    fp = hashlib.sha256()
    for s in shards:
        fp.update(f"{s.name}\x00{s.size}\n".encode())
    sources = {src: _source_entry(src, part, quotas, selected, items) for src in sorted(part.stats)}
    data_spec = (
        tuple(sorted(str(d) for d in data)) if isinstance(data, (list, tuple)) else str(data)
    )
    return Manifest(
        distprompt_version=__version__,
        versions={
            "python": platform.python_version(),
            "numpy": np.__version__,
            "scikit-learn": sklearn.__version__,
            "tokenizers": tokenizers.__version__,
            "transformers": transformers.__version__,
        },
        config=config.recorded(),  # not how the pass ran nor how the files are written
        data=data_spec,
        tokenizer=ManifestTokenizer.from_dict(tinfo.to_dict()),
        corpus=CorpusEntry(
            fingerprint=fp.hexdigest(),
            shards=tuple(
                ShardEntry(name=s.name, bytes=s.size, rows=part.shard_rows.get(s.name, 0))
                for s in shards
            ),
            ignored=tuple(ignored),
        ),
        counts=Counts(
            rows=sum(st.rows for st in part.stats.values()),
            items=len(items),
            skipped=dict(sorted(part.tally.skipped.items())),
            first_skipped=dict(sorted(part.tally.first_skip.items())),
            anomalies={
                k: v for k, v in sorted(part.tally.anomalies.items()) if k not in MARKER_FLAGS
            },
            # Only when some shard was left out: a complete run's manifest does not change.
            failed_shards=dict(sorted(part.failed.items())) if part.failed else None,
        ),
        tokenizer_check=tokenizer_check(verdict, enforced=config.check_tokenizer),
        sources=sources,
        warnings=tuple(warnings),
        template=template_summary(profile),
        fidelity_issues=tuple(
            FidelityIssue(
                id=it.id, source=it.source, fidelity=it.fidelity, reason=it.fidelity_reason
            )
            for it in items
            if it.fidelity not in (None, "tokens")
        ),
    )


def _source_entry(
    src: str,
    part: Partial,
    quotas: dict[str, Quota],
    selected: dict[str, int],
    items: Sequence[SuiteItem],
) -> SourceEntry:
    """A source's entry of the manifest: counts, length quantiles, its items' recovery and
    ambiguities, and its sampling design."""
    st = part.stats[src]
    counted = part.pool_counts(src)
    unique, exact = counted.unique, counted.exact
    fid: dict[str, int] = {}
    structure: dict[str, int] = {}
    ambiguous: dict[str, int] = {}
    for it in items:
        if it.source == src:
            for a in it.ambiguities:
                key = f"{a.kind}:{a.reading}"
                ambiguous[key] = ambiguous.get(key, 0) + 1
        if it.source == src and it.fidelity is not None:
            fid[it.fidelity] = fid.get(it.fidelity, 0) + 1
        if it.source == src and it.structure is not None:
            structure[it.structure] = structure.get(it.structure, 0) + 1
    return SourceEntry(
        rows=st.rows,
        unique_prompts=unique,
        unique_exact=exact,
        duplicate_rows=max(0, st.rows - unique),
        candidates=counted.candidates,
        target=quotas[src].target,
        selected=selected.get(src, 0),
        prompt_tokens=_quantiles(st.prompt_lengths),
        # n_response_tokens: the whole rest of the row, every later turn included
        response_tokens=_quantiles(st.response_lengths),
        # the first assistant span after the prompt: what max_tokens asks for
        first_reply_tokens=_quantiles(st.first_reply_lengths),
        fidelity=dict(sorted(fid.items())),
        # How the turns were recovered: `turns` (every turn recognised) or `flat` (fallback).
        structure=dict(sorted(structure.items())),
        # Readings the tokens leave open, by kind and the reading kept (`user`: no
        # evidence for a system prompt; `system`: the source's items gave it).
        ambiguities=dict(sorted(ambiguous.items())),
        design=design_summary([it for it in items if it.source == src], st),
    )


def tokenizer_check(verdict: TokenizerFigures | None, *, enforced: bool) -> TokenizerCheck | None:
    """The manifest's ``tokenizer_check``: the verdict, whether it was enforced, the checks."""
    if verdict is None:
        return None
    return TokenizerCheck(
        passed=verdict.passed,
        enforced=enforced,
        mismatch=verdict.mismatch,
        start_markers=verdict.start_markers,
        generation_prompt=verdict.generation_prompt,
        checks={c.name: CheckEntry.from_dict(c.to_dict()) for c in verdict.checks},
    )
